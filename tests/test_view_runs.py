"""`rollkit view FOLDER` for a folder of runs, in the kernel (issue 52):
the runs list (rollkit.notebook.runslist), the page's addresses (a run, two
runs, one rollout: rollkit.notebook.viewpage.Address), the rollouts' grid
on the run browser's engine (rollkit.notebook.runbrowser.RunGrid), and the
defects: the header's rollouts/s, cost and reward per dollar on the
comparison, no FigureWidget on the page (anywidget's "Failed to initialize
model"), the search shown as typed. The browser tests of the same page are
tests/test_view_runs_browser.py.

The folder: run `a` (the toy calculator, priced while it ran), run `b`
(the careful model that answers the additions with markup, no price),
`c.jsonl` (a's traces), `d.json` (b's as an inspect-ai log) and `e` (a
verifiers output folder, from tests/fixtures).
"""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path
from urllib.parse import quote_plus, urlencode

import pytest

import rollkit as rk
from rollkit.examples.arithmetic import _toy_reply, arithmetic_tasks, demo_agent
from rollkit.notebook.runbrowser import RunBrowser, RunGrid
from rollkit.notebook.runslist import RunsList
from rollkit.notebook.viewpage import Address, CompareView, view
from rollkit.tables.lazyrun import open_run
from rollkit.runs.live import Finished, RunState
from rollkit.tables.runfolder import runs_in

VERIFIERS = Path(__file__).parent / "fixtures" / "verifiers" / "tool-test--gpt-4.1-mini" / "5cde0948"
TOKEN = "t0k&n<"  # what a link must carry back, url-encoded
QUERY = urlencode({"token": TOKEN})  # the address the page was opened at
MARKUP = "<img src=x onerror=alert(1)>"


def _mixed(request):  # type: ignore[no-untyped-def]
    question = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    if request.messages[-1].role != "tool" and "buys" in question:
        return f"I guess <b>7</b> {MARKUP}"
    return _toy_reply(request, careful=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("runs")
    rk.prices({"toy-calculator": {"input": 1.0, "output": 2.0}})
    try:
        rk.evaluate(demo_agent(), arithmetic_tasks(12), out=root / "a", progress=False)
    finally:
        rk.prices({"toy-calculator": None})
    rk.evaluate(demo_agent(model=rk.ScriptedModel(_mixed, name="mixed")), arithmetic_tasks(12), out=root / "b",
                progress=False)
    rk.save(rk.load(root / "a"), root / "c.jsonl")
    rk.save(rk.load(root / "b"), root / "d.json", format="inspect")
    shutil.copytree(VERIFIERS, root / "e")  # a verifiers output folder: its results.jsonl, named by the folder
    (root / "notes.txt").write_text("not a run")
    # the runs' start times, a apart from b by a minute: the list's order is theirs, not the names'
    for name, started in (("a", "2026-01-01T10:00:00+00:00"), ("b", "2026-01-01T10:01:00+00:00")):
        manifest = json.loads((root / name / "manifest.json").read_text())
        (root / name / "manifest.json").write_text(json.dumps({**manifest, "started": started}))
    for n, name in enumerate(("c.jsonl", "d.json", "e/results.jsonl")):
        os.utime(root / name, (n, n))  # a file's time is its start: older than a and b
    return root


def _stop(page) -> None:  # type: ignore[no-untyped-def]
    for child in page.children:
        if hasattr(child, "stop"):
            child.stop()


def test_runs_in_lists_run_folders_and_trace_files_not_tables_or_other_files(folder):
    assert runs_in(folder) == {"a": folder / "a", "b": folder / "b", "c.jsonl": folder / "c.jsonl",
                               "d.json": folder / "d.json", "e": folder / "e" / "results.jsonl"}
    assert runs_in(folder / "a") == {}  # a run folder is one run, not a folder of runs


def test_the_runs_list_is_newest_first_with_tasks_rollouts_reward_interval_cost_and_status(folder):
    listed = RunsList(folder, link=Address(QUERY).url, follow=False)
    assert [row.name for row in listed.rows] == ["b", "a", "e", "d.json", "c.jsonl"]
    a = rk.load(folder / "a")
    row = next(r for r in listed.rows if r.name == "a")
    rewards = [t.scored_reward for t in a]
    mean = sum(rewards) / len(rewards)
    assert (row.tasks, row.done, row.total, row.status, row.model) == (12, 12, 12, "finished", "toy-calculator")
    assert row.reward == pytest.approx(mean) and row.half is not None and row.half > 0
    assert row.cost == pytest.approx(sum(t.cost_usd for t in a)) and row.cost > 0
    assert row.per_dollar == pytest.approx(mean / (row.cost / 12))
    unpriced = next(r for r in listed.rows if r.name == "b")
    assert unpriced.cost is None and unpriced.per_dollar is None
    from_file = next(r for r in listed.rows if r.name == "c.jsonl")
    assert (from_file.tasks, from_file.done, from_file.reward) == (12, 12, pytest.approx(mean))
    inspect_log = next(r for r in listed.rows if r.name == "d.json")
    assert (inspect_log.done, inspect_log.status) == (12, "finished")
    verifiers = rk.load(VERIFIERS / "results.jsonl")
    listed_verifiers = next(r for r in listed.rows if r.name == "e")
    assert (listed_verifiers.done, listed_verifiers.model) == (len(verifiers), verifiers[0].agent["model"])
    table = listed.table.value
    assert table.index('data-run="b"') < table.index('data-run="a"') < table.index('data-run="c.jsonl"')
    assert f"{mean:.3f} ± {row.half:.3f}" in table and f"${row.cost:,.4f}" in table
    token = "token=t0k%26n%3C"
    assert f'href="?{token}&amp;run=a"' in table
    assert listed.compare_link.value == (f'<a class="rk-compare-link" href="?{token}&amp;run=a&amp;run=b">'
                                         "compare a and b</a>")
    listed.pick_a.value = "b"
    assert "pick two runs" in listed.compare_link.value


def test_a_run_that_starts_appears_running_then_finished(folder, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(folder / "a", root / "a")
    listed = RunsList(root, link=Address().url, follow=False)
    assert [r.name for r in listed.rows] == ["a"]
    # A run "by another process" half way through: its manifest, its live lines but the last, 6 of 12 traces.
    live = root / "new"
    live.mkdir()
    shutil.copy(folder / "b" / "manifest.json", live)
    lines = (folder / "b" / "live.jsonl").read_text().splitlines(keepends=True)
    traces = (folder / "b" / "traces.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["e"] == "final"
    (live / "live.jsonl").write_text("".join(lines[:-1]))
    (live / "traces.jsonl").write_text("".join(traces[:6]))
    assert listed.refresh() is True
    row = listed.rows[0]  # b's manifest: started after a
    assert (row.name, row.done, row.total, row.status) == ("new", 6, 12, "running")
    assert '<tr data-run="new">' in listed.table.value and "running" in listed.table.value
    with open(live / "traces.jsonl", "a") as f:
        f.write("".join(traces[6:]))
    with open(live / "live.jsonl", "a") as f:
        f.write(lines[-1])
    assert listed.refresh() is True
    assert (listed.rows[0].done, listed.rows[0].status) == (12, "finished")
    assert listed.refresh() is False  # nothing new: no redraw
    # Seen finished, a run is summed up from its tables: the same numbers as followed line by line.
    (summed,) = [r for r in RunsList(root, link=Address().url, follow=False).rows if r.name == "new"]
    followed = listed.rows[0]
    assert (summed.done, summed.total, summed.status, summed.tasks) == (12, 12, "finished", 12)
    assert (summed.reward, summed.half) == (pytest.approx(followed.reward), pytest.approx(followed.half))
    assert (summed.cost, summed.per_dollar) == (followed.cost, followed.per_dollar) == (None, None)


def test_a_run_name_with_markup_is_escaped_in_the_list_and_its_link(folder, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(folder / "a", root / MARKUP)
    listed = RunsList(root, link=Address().url, follow=False)
    table = listed.table.value
    assert "<img" not in table and html.escape(MARKUP) in table
    assert 'href="?run=%3Cimg+src%3Dx+onerror%3Dalert%281%29%3E"' in table


def test_the_page_of_a_folder_of_runs_is_its_list_and_each_address_opens_what_it_names(folder):
    page = view([folder], query=f"{QUERY}")
    _stop(page)
    assert isinstance(page.children[1], RunsList)
    page = view([folder], query=f"{QUERY}&run=a")
    _stop(page)
    grids = [c.children[0] for c in page.children if hasattr(c, "children") and c.children
             and isinstance(c.children[0], RunGrid)]
    assert len(grids) == 1 and grids[0].total == 12
    ids = open_run(folder / "a").rollouts().id.tolist()
    assert f'href="?token=t0k%26n%3C&amp;run=a&amp;rollout={ids[0]}"' in grids[0].grid.value
    assert 'href="?token=t0k%26n%3C"' in page.children[1].value  # back to the list
    # one rollout: its timeline beside its transcript (tests/test_timeline.py), escaped
    page = view([folder], query=f"{QUERY}&run=b&rollout={rk.load(folder / 'b')[0].id}")
    (shown,) = page.children[2:]
    assert "rollout" in shown.value and html.escape(MARKUP) in shown.value and "<img" not in shown.value
    assert '<div class="rk-rollout"><div class="rk-tl-col"><div class="rk-timeline">' in shown.value
    assert shown.value.count('class="rk-tl-bar rk-tl-model"') == rk.load(folder / "b")[0].num_turns
    # opened from a search: the matching messages first, each match marked, escaped
    searched = view([folder], query=f"run=b&rollout={rk.load(folder / 'b')[0].id}&q=<IMG src").children[2].value
    assert "<div class='rk-matches'>" in searched and "<mark>&lt;img src</mark>=x" in searched
    missing = view([folder], query="run=a&rollout=nope").children[2].value
    assert "run a has no rollout &#x27;nope&#x27;" in missing
    # a name is looked up among the runs, never read as a path
    assert "no run named &#x27;../a&#x27; here; the runs: a, b, c.jsonl, d.json, e" in view([folder], query="run=../a").children[2].value
    # a trace file of the folder, and a verifiers folder, open with a summary and a grid
    page = view([folder], query="run=c.jsonl")
    assert any(isinstance(c, RunGrid) and c.total == 12 for c in page.children)
    page = view([folder], query="run=e")
    assert any(isinstance(c, RunGrid) and c.total == len(rk.load(VERIFIERS / "results.jsonl")) for c in page.children)


def test_two_runs_compare_with_cost_and_reward_per_dollar_where_prices_are_known(folder):
    page = view([folder], query="run=a&run=b")
    _stop(page)
    compared = page.children[-1]
    assert isinstance(compared, CompareView)
    cost_a = compared.comparison.cost_a
    assert cost_a.total > 0 and compared.comparison.cost_b.total is None
    costs = compared.costs.value
    assert f"<td class=\"rk-num\">${cost_a.total:,.4f}</td>" in costs
    assert f"<td class=\"rk-num\">{cost_a.reward_per_dollar:.4g}</td>" in costs
    assert "B: 12 of 12 rollouts have no price (give one with rk.prices)" in costs


def test_the_page_holds_no_figure_widget_only_plotly_outputs(folder):
    """anywidget gives a model 2 s to start, and a FigureWidget ships 5 MB of
    plotly.js as its state: a page of five logged "[anywidget] Failed to
    initialize model". No widget on any page is an anywidget."""
    import anywidget
    import ipywidgets as widgets

    for query in ("run=a&run=b", "run=a", "run=c.jsonl"):
        page = view([folder], query=query)
        _stop(page)
        seen, charts, stack = [], [], [page]
        while stack:
            widget = stack.pop()
            seen.append(widget)
            stack.extend(getattr(widget, "children", ()))
            if isinstance(widget, widgets.Output) and any(c.startswith("rk-chart") for c in widget._dom_classes):
                charts.append(widget)
        assert not [w for w in seen if isinstance(w, anywidget.AnyWidget)], query
        assert len(charts) == (5 if query == "run=a&run=b" else 2)
        (output,) = charts[0].outputs
        assert output["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"]


def test_the_grid_pages_sorts_filters_and_searches_on_the_run_browsers_engine(folder):
    run = open_run(folder / "a")
    grid = RunGrid(run, link=lambda rollout, searched: f"#{rollout}" if searched is None else f"?{quote_plus(searched)}",
                   page_size=5)
    assert isinstance(grid, RunBrowser)  # one engine: RunBrowser's queries
    ids = run.sql("select id from rollouts order by _ordinal")["id"].tolist()
    assert grid.grid.value.count("<tr data-row=") == 5 and "page 1 of 3" in grid.status.value
    grid.page(2)
    assert [f'href="#{i}"' in grid.grid.value for i in ids[10:]] == [True, True]
    grid.sort("reward", descending=False)
    lowest = run.sql("select id from rollouts order by reward, _ordinal limit 5")["id"].tolist()
    assert [f'href="#{i}"' in grid.grid.value for i in lowest] == [True] * 5
    grid.where("reward < 1")
    assert f"<b>{run.sql('select count(*) as n from rollouts where reward < 1')['n'][0]}</b> of 12" in grid.status.value
    grid.where("")
    grid.search(" + ")  # in the calculator's calls: additions, and the subtractions the toy adds
    assert "<b>8</b> of 12" in grid.status.value
    # what the user typed, not the escaped regular expression (" \\+ ")
    assert "matching <code class='rk-searched'> + </code>" in grid.status.value
    assert 'href="#' not in grid.grid.value  # the test's link: rollout#searched
    assert grid.grid.value.count('href="?+%2B+"') == 5  # each link of the page carries the phrase searched
    grid.search("")
    assert "<b>12</b> of 12" in grid.status.value and "matching" not in grid.status.value


def test_a_search_shows_what_was_typed_in_the_notebook_browser_too(folder):
    run = open_run(folder / "a")
    browser = RunBrowser(run)
    browser.search("3 + 4 (x)")
    assert "matching <code class='rk-searched'>3 + 4 (x)</code>" in browser.status.value
    browser.search(re=r"\d+ \+ \d+")
    assert r"matching <code class='rk-searched'>\d+ \+ \d+</code>" in browser.status.value
    hits = RunBrowser(run.search(" + "))  # a search's hits handed over
    assert "matching <code class='rk-searched'> + </code>" in hits.status.value


def _finished(end: float, duration: float) -> Finished:
    return Finished("r", "t", "ok", None, {"reward": 1.0}, duration, end)


def test_rollouts_per_second_is_over_the_run_not_the_gaps_within_a_burst():
    """256 in flight finish in bursts 15 ms long once a second: about 256 a
    second, not the 17,000 a second the gaps within a burst make."""
    from rollkit.notebook.monitor import RunMonitor

    state = RunState()
    for second in range(1, 5):
        for i in range(256):
            state.add(_finished(100.0 + second + i * 0.015 / 256, 1.0))
    last_end = 104 + 255 * 0.015 / 256
    assert state.rate() == pytest.approx(1024 / (last_end - 100))  # 255.0: the first started at 100
    assert "255.0 rollouts/s" in RunMonitor._counts_html(state)


def test_the_headers_rate_of_a_real_run_is_its_rollouts_over_its_time(folder):
    from rollkit.runs.live import FolderFollower

    state = RunState()
    FolderFollower(folder / "a", state).poll()
    spans = [[s.start for s in t.phases.values()] + [s.end for s in t.phases.values() if s.end is not None]
             for t in rk.load(folder / "a")]
    first, last = min(min(s) for s in spans), max(max(s) for s in spans)
    assert state.rate() == pytest.approx(12 / (last - first))
