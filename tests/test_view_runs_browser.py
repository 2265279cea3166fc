"""`rollkit view FOLDER` for a folder of runs in headless Chromium (issue
52; the kernel-level tests are tests/test_view_runs.py): the runs list with
two runs, a third that starts while the page is open (a real `rk.evaluate`
subprocess whose model answers only when the test opens its gate, as
tests/test_view.py) and finishes; two runs picked and compared (the
forest plot, cost and reward per dollar); a run's address, its grid turned
a page, sorted, filtered and searched; a rollout's own address and its
timeline (a bar clicked scrolls to its message). Every page:
no error in the console (uncaught ones counted: test_browser._page) and no
request to any host but the viewer's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from test_browser import CHROMIUM, _page
from test_view import RUNNER, _env, _Served, _stop, _tree, _url

import rollkit as rk
from rollkit.examples.arithmetic import arithmetic_tasks, demo_agent
from rollkit.notebook.timeline import anchor
from rollkit.tables.lazyrun import open_run

playwright_sync = pytest.importorskip("playwright.sync_api")
pytest.importorskip("voila")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("runs")
    rk.prices({"toy-calculator": {"input": 1.0, "output": 2.0}})
    try:
        rk.evaluate(demo_agent(), arithmetic_tasks(12), repeats=3, out=root / "a", progress=False)  # 36: two pages of 25
    finally:
        rk.prices({"toy-calculator": None})
    rk.evaluate(demo_agent(model=rk.ScriptedModel("The answer is 7.", name="sure")), arithmetic_tasks(12),
                out=root / "b", progress=False)
    # The manifest keeps whole seconds and both runs can start in one on a quiet
    # machine (the list then orders them by name): a is made a minute older.
    manifest = root / "a" / "manifest.json"
    data = json.loads(manifest.read_text())
    started = json.loads((root / "b" / "manifest.json").read_text())["started"]
    data["started"] = (datetime.fromisoformat(started) - timedelta(minutes=1)).isoformat(timespec="seconds")
    manifest.write_text(json.dumps(data))
    return root


def _served(root: Path, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**_env(), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    return subprocess.Popen([sys.executable, "-m", "rollkit", "view", str(root), "--poll", "0.2"], env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _kernels(pid: int) -> list[int]:
    """The kernels under the `rollkit view` process `pid`."""
    found = []
    for child in _tree(pid):
        try:
            if b"ipykernel_launcher" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return found


def _clean(console: list[str], aborted: list[str]) -> None:
    errors = [line for line in console if line.startswith("error:")]
    assert errors == [] and aborted == [], (errors, aborted)


def test_the_runs_list_follows_a_run_that_starts_and_compares_two_runs(folder, tmp_path):
    expect = playwright_sync.expect
    root = tmp_path / "runs"
    root.mkdir()
    for name in ("a", "b"):
        os.symlink(folder / name, root / name, target_is_directory=True)
    gate = tmp_path / "gate"
    gate.mkdir()
    viewer = _served(root, tmp_path)
    runner = None
    console: list[str] = []
    aborted: list[str] = []
    try:
        url = _url(viewer, timeout=120)
        with _page(_Served(url, []), tmp_path, "runs-list", console=console, aborted=aborted) as page:
            rows = page.locator(".rk-runs-table tbody tr")
            expect(rows).to_have_count(2)
            expect(rows.nth(0)).to_have_attribute("data-run", "b")  # started after a: newest first
            expect(rows.nth(1)).to_contain_text("36 / 36")
            expect(rows.nth(1)).to_contain_text("finished")
            runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(root / "live"), str(gate)], env=_env(),
                                      start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            live = page.locator('.rk-runs-table tr[data-run="live"]')
            expect(live).to_contain_text("running")
            expect(rows.nth(0)).to_have_attribute("data-run", "live")
            expect(live).to_contain_text("0 / 6")
            for n in range(6):
                (gate / str(n)).touch()
            expect(live).to_contain_text("6 / 6")
            expect(live).to_contain_text("finished")
            assert runner.wait(timeout=60) == 0
            page.locator(".rk-runs-pick-a select").select_option("a")
            page.locator(".rk-runs-pick-b select").select_option("b")
            link = page.locator("a.rk-compare-link")
            expect(link).to_have_text("compare a and b")
            link.click()
            forest = page.locator(".rk-chart-forest .js-plotly-plot")
            expect(forest.locator(".gtitle")).to_contain_text("12 tasks paired")
            costs = page.locator(".rk-compare-costs")
            expect(costs.locator("tbody tr").nth(0)).to_contain_text("A: ")
            cost = rk.compare(folder / "a", folder / "b").cost_a
            expect(costs.locator("tbody tr").nth(0).locator("td").nth(1)).to_have_text(f"${cost.total:,.4f}")
            expect(costs.locator("tbody tr").nth(0).locator("td").nth(4)).to_have_text(f"{cost.reward_per_dollar:.4g}")
            expect(page.locator(".rk-compare-cost")).to_contain_text("B: 12 of 12 rollouts have no price")
            assert "run=a&run=b" in page.url and "token=" in page.url
            # The pages left shut their kernels down (Voila's beacon, refused before rollkit set its
            # _xsrf cookie): one kernel is left, this page's.
            deadline = time.monotonic() + 60
            while len(_kernels(viewer.pid)) != 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(_kernels(viewer.pid)) == 1
        _clean(console, aborted)
    finally:
        for n in range(6):
            (gate / str(n)).touch()
        if runner is not None:
            _stop(runner)
        _stop(viewer)


def test_a_runs_address_shows_its_grid_paged_sorted_filtered_searched_and_a_rollouts_address(folder, tmp_path):
    expect = playwright_sync.expect
    viewer = _served(folder, tmp_path)
    console: list[str] = []
    aborted: list[str] = []
    run = open_run(folder / "a")
    try:
        url = _url(viewer, timeout=120)
        with _page(_Served(url + "&run=a", []), tmp_path, "run-grid", console=console, aborted=aborted) as page:
            status = page.locator(".rk-run-grid .rk-browse-status")
            expect(status).to_contain_text("36 of 36 rollouts · page 1 of 2")
            rows = page.locator(".rk-grid-table tbody tr")
            expect(rows).to_have_count(25)
            page.locator(".rk-run-grid button.rk-next").click()
            expect(status).to_contain_text("page 2 of 2")
            expect(rows).to_have_count(11)
            page.locator(".rk-run-grid .rk-sort select").select_option("reward")
            expect(status).to_contain_text("page 1 of 2")
            lowest = run.sql("select id from rollouts order by reward, _ordinal limit 1")["id"][0]
            expect(rows.nth(0).locator("a.rk-rollout-link")).to_have_text(lowest)
            expect(rows.nth(0).locator("td").nth(2)).to_have_text("0.000")
            wrong = run.sql("select count(*) as n from rollouts where reward < 1")["n"][0]
            box = page.locator(".rk-run-grid .rk-filter input")
            box.fill("reward < 1")
            box.press("Enter")
            expect(status).to_contain_text(f"{wrong} of 36 rollouts")
            box.fill("")
            box.press("Enter")
            search = page.locator(".rk-run-grid .rk-search input")
            search.fill(" + ")
            search.press("Enter")
            expect(status.locator("code.rk-searched")).to_have_text(" + ")  # as typed, not " \\+ "
            expect(status).to_contain_text("24 of 36 rollouts")  # the additions and subtractions (the toy adds)
            first = rows.nth(0).locator("a.rk-rollout-link")
            rollout = first.text_content()
            first.click()
            shown = page.locator(".rk-rollout-page")
            expect(shown.locator("h3")).to_have_text(f"rollout {rollout} of run a")
            expect(shown.locator(".rk-assistant").last).to_contain_text("The answer is")
            expect(shown.locator(".rk-matches mark").first).to_contain_text("+")  # opened from the search
            assert f"rollout={rollout}" in page.url and "token=" in page.url and "q=+%2B+" in page.url
            # its timeline (issue 53): a bar per model call; clicking the last scrolls to its reply
            trace = run.trace(rollout)
            bars = shown.locator(".rk-tl-bar.rk-tl-model")
            expect(bars).to_have_count(len(trace.model_calls))
            bars.last.click()
            target = anchor(trace, trace.messages.index(trace.model_calls[-1].reply))
            expect(page.locator(f"#{target}")).to_be_in_viewport()
            assert page.evaluate("() => location.hash") == f"#{target}"
        _clean(console, aborted)
    finally:
        _stop(viewer)
