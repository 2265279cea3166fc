"""`rollkit view RUN... --export DIR` (rollkit.notebook.export, issue 53):
a static copy of the runs list, the runs' charts and grids and the
rollouts' pages with their timelines, that opens from file:// with no
server. The command in a real subprocess; what it wrote read back against
the runs; a run too large refused unless --where or --limit chooses; no
secret and no path of the machine in the files; and, in headless Chromium,
the export opened from disk: 0 console errors, 0 requests but for its own
files, the viewer's XSS payloads (tests/test_view_runs.py's MARKUP, in
replies, reasoning, tool calls and a run's name) running none, and the
timeline's bars where the trace's times put them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import rollkit as rk
from rollkit.cli import cli
from rollkit.examples.arithmetic import arithmetic_tasks, demo_agent
from rollkit.notebook import export as export_module
from rollkit.tables.lazyrun import open_run

MARKUP = "<img src=x onerror=alert(1)>"
SCRIPTED = "</script><script>window.rkPwned = 1</script>"
SECRET = "sk-test-do-not-leak-53"


def _hostile(request):  # type: ignore[no-untyped-def]
    if request.messages[-1].role != "tool":
        return rk.Response(message=rk.AssistantMessage(
            content=f"let me use {MARKUP}", reasoning=f"thinking {SCRIPTED}",
            tool_calls=[rk.ToolCall(id="c1", name="calculator", arguments=json.dumps({"expression": "1+1", "x": MARKUP}))]))
    return f"The answer is 7. {MARKUP}"


@pytest.fixture(scope="module")
def root(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("runs")
    for name, model, n in (("a", None, 8), (MARKUP, rk.ScriptedModel(_hostile, name="hostile"), 4)):
        agent = demo_agent() if model is None else demo_agent(model=model)
        rk.evaluate(agent, arithmetic_tasks(n), out=root / name, progress=False)
    return root


def _export(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rollkit", "view", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def _data(out: Path, k: int | str, file: str | None = None) -> dict:
    """What the data script `data/run-K.js` (or `data/FILE.js`, setting RK_K) sets."""
    name = f"RK_RUN_{k}" if file is None else f"RK_{k}"
    text = (out / "data" / f"{file or f'run-{k}'}.js").read_text()
    assert text.startswith(f"window.{name} = ") and "<" not in text
    return json.loads(text[len(f"window.{name} = "):].rstrip().rstrip(";"))


@pytest.fixture(scope="module")
def exported(root, tmp_path_factory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("export") / "share"
    done = _export([str(root), "--export", str(out)], env={"OPENAI_API_KEY": SECRET, "ROLLKIT_VIEW_TOKEN": SECRET})
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def test_the_export_holds_the_runs_list_each_runs_grid_and_charts_and_every_rollouts_page(root, exported):
    out, said = exported
    assert "run a: 8 of 8 rollouts" in said and f"run {MARKUP}: 4 of 4 rollouts" in said
    index = (out / "index.html").read_text()
    assert re.findall(r'<a class="rk-run-link" href="([^"]+)">', index) == ["runs/0.html", "runs/1.html"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in index and "<img" not in index
    for k, name in enumerate(sorted(["a", MARKUP])):  # the runs in the folder, by name
        run = open_run(root / name)
        data = _data(out, k)
        summary = (out / "runs" / f"{k}.html").read_text()  # the served page's tables of a finished run
        assert f"<b>rollouts: {len(run)} over {len(run)} tasks</b>" in summary and 'class="rk-cost"' in summary
        ids = data["rows"] and [row[data["columns"].index("id")] for row in data["rows"]]
        assert ids == run.rollouts().id.tolist() == [run[n].id for n in range(len(run))]  # row N is page N
        assert data["pages"] == [f"{n}.html" for n in range(len(run))]
        titles = [c["layout"]["title"]["text"] for c in data["charts"]]
        assert [t.split(" · ")[0] for t in titles] == ["reward distribution", "phase timing"]
        assert f"{len(run)} rol" in titles[1]
        for n, page in enumerate(data["pages"]):
            html_text = (out / "runs" / str(k) / page).read_text()
            assert f"rollout {run[n].id} of run" in html_text and 'class="rk-timeline"' in html_text
            assert "<img" not in html_text and "<script>window" not in html_text
            if name == MARKUP:  # the hostile run: its reasoning folded, its tool call paired, all escaped
                assert '<details class="rk-reasoning"><summary>thinking (' in html_text
                assert "thinking &lt;/script&gt;&lt;script&gt;window.rkPwned = 1&lt;/script&gt;" in html_text
                assert '<div class="rk-pair">' in html_text
    assert (out / "assets" / "plotly.min.js").stat().st_size > 1_000_000  # a copy: no CDN
    # two runs: their comparison, as the served page draws it (rk.compare over the whole runs)
    assert '<a class="rk-compare-link" href="runs/compare.html">' in index
    compared = (out / "runs" / "compare.html").read_text()
    assert "<caption>A = &lt;img src=x onerror=alert(1)&gt;, B = a: 4 tasks paired" in compared
    assert "<img" not in compared
    assert re.search(r"<p><b>tasks B won on reward: \d+</b></p>", compared)  # the flips, as the served page lists them
    assert "<p><b>tasks B lost on reward: " in compared and 'class="rk-table rk-flips-lost"' in compared
    (forest,) = _data(out, "COMPARE", "compare")["charts"]
    assert forest["layout"]["title"]["text"] == "a vs &lt;img src=x onerror=alert(1)&gt; · 4 tasks paired"


def test_the_export_holds_no_secret_and_no_path_of_the_machine(root, exported):
    out, _ = exported
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert SECRET not in text and str(root) not in text and str(out) not in text, path
            if path.name != "plotly.min.js":
                assert "token=" not in text and "http://" not in text and "https://" not in text, path


def test_a_run_too_large_is_refused_unless_a_filter_or_a_limit_chooses(root, tmp_path, monkeypatch):
    monkeypatch.setattr(export_module, "MAX_WHOLE", 5)
    runner = CliRunner()
    refused = runner.invoke(cli, ["view", str(root / "a"), "--export", str(tmp_path / "x")])
    assert refused.exit_code == 2 and not (tmp_path / "x").exists()
    said = " ".join(refused.output.split())
    assert "run a holds 8 rollouts (0.0 MB of traces), more than an export takes whole (5 rollouts, 100 MB;" in said
    assert "it takes about 14 MB per 1,000 short rollouts, about 4 times the size of their traces): pick some with --where" in said
    assert "--limit N" in refused.output
    monkeypatch.setattr(export_module, "MAX_WHOLE", 100)
    monkeypatch.setattr(export_module, "MAX_TRACE_BYTES", 1000)  # few rollouts, long traces: refused as well
    heavy = runner.invoke(cli, ["view", str(root / "a"), "--export", str(tmp_path / "x")])
    assert heavy.exit_code == 2 and "more than an export takes whole (100 rollouts, 0 MB;" in heavy.output
    limited = runner.invoke(cli, ["view", str(root), "--export", str(tmp_path / "l"), "--limit", "3"])
    assert limited.exit_code == 0, limited.output
    assert "run a: 3 of 8 rollouts" in limited.output and f"run {MARKUP}: 3 of 4 rollouts" in limited.output
    run = open_run(root / "a")
    wanted = run.sql("select _ordinal from rollouts where task_key >= 'arith-0-005' order by _ordinal")["_ordinal"].tolist()
    assert 0 < len(wanted) < 8
    chosen = runner.invoke(cli, ["view", str(root / "a"), "--export", str(tmp_path / "w"), "--where", "task_key >= 'arith-0-005'"])
    assert chosen.exit_code == 0, chosen.output
    assert _data(tmp_path / "w", 0)["pages"] == [f"{n}.html" for n in wanted]
    assert sorted(p.name for p in (tmp_path / "w" / "runs" / "0").iterdir()) == sorted(f"{n}.html" for n in wanted)


def test_bad_input_is_named(root, tmp_path):
    runner = CliRunner()
    alone = runner.invoke(cli, ["view", str(root / "a"), "--limit", "3"])
    assert alone.exit_code == 2 and "--where and --limit choose what --export writes" in alone.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    full = runner.invoke(cli, ["view", str(root / "a"), "--export", str(tmp_path / "full")])
    assert full.exit_code == 2 and "is not an empty folder: export into a new or empty folder" in full.output
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    bad = runner.invoke(cli, ["view", str(root), "--export", str(tmp_path / "b"), "--where", "no_such > 1"])
    assert bad.exit_code == 2 and "no_such" in bad.output
    assert not (tmp_path / "b").exists()  # refused before the first run was written


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_export_opens_from_disk_with_no_error_no_request_and_no_payload_run(root, exported, tmp_path):
    playwright_sync = pytest.importorskip("playwright.sync_api")
    from test_browser import CHROMIUM, CHROMIUM_ARGS

    out, _ = exported
    keyed = _hostile_keys(root / MARKUP, tmp_path)  # the grid's cells, which the page's script writes
    expect = playwright_sync.expect
    expect.set_options(timeout=60_000)
    console: list[str] = []
    requests: list[str] = []
    dialogs: list[str] = []
    with playwright_sync.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                       headless=True, args=CHROMIUM_ARGS,
                                                       viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            page.on("pageerror", lambda exc: console.append(f"error: uncaught {exc}"))
            page.on("request", lambda request: requests.append(request.url))
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.goto((out / "index.html").as_uri())
            expect(page.locator(".rk-runs-table tbody tr")).to_have_count(2)
            page.locator(".rk-run-link", has_text=MARKUP).click()  # the hostile run: its name is text
            expect(page.locator(".rk-grid-status")).to_have_text("4 of 4 rollouts · page 1 of 1")
            expect(page.locator(".js-plotly-plot")).to_have_count(2)
            page.locator(".rk-grid-filter").fill("arith-0-002")
            expect(page.locator(".rk-grid-table tbody tr")).to_have_count(1)
            page.locator("a.rk-rollout-link").click()
            _bars_at_the_traces_times(page, open_run(root / MARKUP)[2], expect)
            page.goto((out / "index.html").as_uri())
            page.locator("a.rk-compare-link").click()
            expect(page.locator(".rk-compare-signals")).to_contain_text("4 tasks paired")
            expect(page.locator(".js-plotly-plot .gtitle")).to_have_text(f"a vs {MARKUP} · 4 tasks paired")
            page.goto((out / "index.html").as_uri())
            page.get_by_role("link", name="a", exact=True).click()
            page.locator(".rk-grid-table th", has_text="reward").click()  # sorted: still text, still links
            expect(page.locator(".rk-grid-table tbody tr")).to_have_count(8)
            assert page.evaluate("() => [window.rkPwned, document.querySelectorAll('img').length]") == [None, 0]
            page.goto((keyed / "runs" / "0.html").as_uri())
            expect(page.locator(".rk-grid-table tbody tr").first.locator("td").first).to_have_text(MARKUP + SCRIPTED)
            expect(page.locator(".rk-grid-table tbody tr")).to_have_count(4)
            assert page.evaluate("() => [window.rkPwned, document.querySelectorAll('img').length]") == [None, 0]
        finally:
            context.close()
    errors = [line for line in console if line.startswith("error")]
    assert errors == [] and dialogs == []
    assert requests and [u for u in requests if not u.startswith((out.as_uri() + "/", keyed.as_uri() + "/"))] == []


def _hostile_keys(run: Path, tmp_path: Path) -> Path:
    """The export of `run`'s traces with markup for task keys and stop conditions."""
    lines = []
    for trace in rk.load(run):
        data = json.loads(trace.model_dump_json())
        data["task"]["key"], data["stop_condition"] = MARKUP + SCRIPTED, SCRIPTED
        lines.append(json.dumps(data))
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "keyed.jsonl").write_text("\n".join(lines) + "\n")
    export_module.export([tmp_path / "keys" / "keyed.jsonl"], tmp_path / "keyed")
    return tmp_path / "keyed"


def _bars_at_the_traces_times(page, trace: rk.Trace, expect) -> None:  # type: ignore[no-untyped-def]
    """Each model call's bar starts and ends, in pixels, where its times put it on the track; a click scrolls there."""
    from rollkit.notebook.timeline import anchor

    t0 = min([s.start for s in trace.phases.values()] + [c.start for c in trace.model_calls]
             + [s.start for s in trace.segments])
    last = max([s.end for s in trace.phases.values()] + [c.end for c in trace.model_calls])
    bars = page.locator(".rk-tl-bar.rk-tl-model")
    expect(bars).to_have_count(len(trace.model_calls))
    track = page.locator('.rk-tl-lane[data-lane="model calls"] .rk-tl-track').bounding_box()
    for bar, call in zip(bars.all(), trace.model_calls):
        box = bar.bounding_box()
        assert box["x"] - track["x"] == pytest.approx((call.start - t0) / (last - t0) * track["width"], abs=1.0)
        width = (call.end - call.start) / (last - t0) * track["width"]
        assert box["width"] == pytest.approx(max(width, 3.0), abs=1.0)  # 3 px at least (CSS min-width)
    bars.last.click()
    target = anchor(trace, trace.messages.index(trace.model_calls[-1].reply))
    assert page.evaluate("() => location.hash") == f"#{target}"
    expect(page.locator(f"#{target}")).to_be_in_viewport()


def test_trace_files_of_other_tools_export_as_runs(root, tmp_path):
    """A trace file in a folder of runs (rollkit's, inspect-ai's), and one given itself, export as the page shows them."""
    folder = tmp_path / "files"
    folder.mkdir()
    traces = rk.load(root / "a")
    rk.save(traces, folder / "c.jsonl")
    rk.save(traces[:3], folder / "d.json", format="inspect")
    runner = CliRunner()
    done = runner.invoke(cli, ["view", str(folder), "--export", str(tmp_path / "f")])
    assert done.exit_code == 0, done.output
    assert "run c.jsonl: 8 of 8 rollouts" in done.output and "run d.json: 3 of 3 rollouts" in done.output
    given = runner.invoke(cli, ["view", str(folder / "d.json"), "--export", str(tmp_path / "g"), "--limit", "2"])
    assert given.exit_code == 0 and "run d.json: 2 of 3 rollouts" in given.output
    keys = [t.task.key for t in traces[:2]]
    data = _data(tmp_path / "g", 0)
    assert [row[data["columns"].index("task_key")] for row in data["rows"]] == keys


def test_a_run_with_no_finished_rollout_yet_is_left_out_and_said(root, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    os.symlink(root / "a", folder / "a", target_is_directory=True)
    (folder / "empty").mkdir()
    (folder / "empty" / "manifest.json").write_text((root / "a" / "manifest.json").read_text())  # a run just started
    (folder / "torn.jsonl").write_text('{"id": "x", "task": \n')
    runner = CliRunner()
    done = runner.invoke(cli, ["view", str(folder), "--export", str(tmp_path / "o")])
    assert done.exit_code == 0, done.output
    assert "run a: 8 of 8 rollouts" in done.output and "run empty: not exported (no finished rollout yet)" in done.output
    assert "run torn.jsonl: not exported (not readable: " in done.output
    assert not (tmp_path / "o" / "runs" / "compare.html").exists()  # one run exported: nothing to compare
    alone = runner.invoke(cli, ["view", str(folder / "empty"), "--export", str(tmp_path / "p")])
    assert alone.exit_code == 2 and "no run to export: empty: no finished rollout yet" in alone.output
