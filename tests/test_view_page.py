"""The page of `rollkit view A B` (rollkit.notebook.viewpage): per run a
reward distribution and a phase-timing chart, for two runs a forest plot of
B - A with wins / ties / losses beside it, the comparison as an HTML table,
and the flips (tasks B won or lost) opening both transcripts side by side.

Two finished runs of the 12 arithmetic tasks: A is the toy calculator
(wrong on the 4 subtraction tasks), B the careful one except that it answers
the 4 addition tasks with markup and no calculator (wrong): B wins 4, ties 4
(multiplication), loses 4. The kernel-level tests check the widgets' numbers
against rk.compare; the browser test (headless Chromium on the page Voila
serves, as tests/test_view.py) reads plotly's data from the DOM, opens a lost
flip, sees the model's markup as text, and that the console has no error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import rollkit as rk
from rollkit.examples.arithmetic import _toy_reply, arithmetic_tasks, demo_agent
from rollkit.notebook import plots
from rollkit.notebook.viewpage import MAX_FLIPS, CompareView, RunCharts, view

MARKUP = "I guess <b>7</b> <img src=x onerror=alert(1)>"


def _mixed(request):  # type: ignore[no-untyped-def]
    question = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    if request.messages[-1].role != "tool" and "buys" in question:
        return MARKUP
    return _toy_reply(request, careful=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("view")
    rk.evaluate(demo_agent(), arithmetic_tasks(12), out=root / "a", progress=False)
    rk.evaluate(demo_agent(model=rk.ScriptedModel(_mixed, name="mixed")), arithmetic_tasks(12), out=root / "b",
                progress=False)
    return root / "a", root / "b"


def _stop_monitors(page) -> None:  # type: ignore[no-untyped-def]
    for child in page.children:
        if hasattr(child, "stop"):
            child.stop()


ADD = [f"arith-0-{i:03d}" for i in range(0, 12, 3)]
SUB = [f"arith-0-{i:03d}" for i in range(1, 12, 3)]


def test_two_finished_runs_are_compared_at_once_as_a_forest_a_table_and_flips(runs):
    a, b = runs
    page = view([a, b])
    _stop_monitors(page)
    compared = page.children[-1]
    assert isinstance(compared, CompareView)
    expected = rk.compare(a, b, labels=(str(a), str(b)))
    reward = expected.signal("reward")
    assert (reward.wins, reward.ties, reward.losses) == (4, 4, 4)
    # the forest: one point per compared signal, at B - A, its interval as the error bar
    (points,) = compared.figure.data
    shown = [s for s in expected.signals if s.diff is not None]
    assert list(points.y) == [s.signal for s in shown]
    assert list(points.x) == pytest.approx([s.diff for s in shown])
    assert list(points.error_x.array) == pytest.approx([s.high - s.diff for s in shown])
    beside = [x.text for x in compared.figure.layout.annotations]
    assert beside == [f"{s.wins} / {s.ties} / {s.losses}" for s in shown] + ["<b>W / T / L</b>"]
    # the table: a real one, a row per signal
    table = compared.result.value
    assert table.startswith('<table class="rk-table rk-compare-signals">')
    assert table.count("<tr>") == 1 + len(expected.signals)
    assert "<td>reward</td>" in table and '<td class="rk-num">4 / 4 / 4</td>' in table
    assert "paired sign-flip permutation test" in table
    # the flips: B won the subtractions, lost the additions
    signal, won, lost = compared.flipped()
    assert signal == "reward"
    assert [r["key"] for r in won] == SUB and [r["key"] for r in lost] == ADD
    titles = [w.value for w in compared.flips.children if hasattr(w, "value")]
    assert titles == ["<b>tasks B won on reward: 4</b>", "<b>tasks B lost on reward: 4</b>"]


def test_a_flip_opens_both_transcripts_side_by_side_escaped(runs):
    a, b = runs
    page = view([a, b])
    _stop_monitors(page)
    compared = page.children[-1]
    lost_grid = compared.flips.children[3]
    buttons = [w for w in lost_grid.children if "rk-flip-open" in w._dom_classes]
    assert len(buttons) == 4
    buttons[1].click()  # the second loss: arith-0-003
    left, right = compared.side.children
    assert "A: " in left.value and "arith-0-003" in left.value and "The answer is" in left.value
    assert "&lt;b&gt;7&lt;/b&gt; &lt;img src=x onerror=alert(1)&gt;" in right.value
    assert "<img" not in right.value and "<b>7" not in right.value
    trace_a, trace_b = compared.open_pair("arith-0-003")
    assert (trace_a.task.key, trace_b.task.key) == ("arith-0-003", "arith-0-003")
    assert trace_a.scored_reward == 1.0 and trace_b.scored_reward == 0.0
    with pytest.raises(KeyError, match="no task 'nope' in this comparison"):
        compared.open_pair("nope")


def test_flips_beyond_the_cap_are_counted(runs, monkeypatch):
    import rollkit.notebook.viewpage as viewpage

    monkeypatch.setattr(viewpage, "MAX_FLIPS", 3)
    compared = CompareView(*runs)
    won_grid = compared.flips.children[1]
    assert sum("rk-flip-open" in w._dom_classes for w in won_grid.children) == 3
    assert compared.flips.children[2].value == "<p>and 1 more</p>"
    assert MAX_FLIPS == 50


def test_two_runs_without_a_task_in_common_say_so(runs, tmp_path):
    other = tmp_path / "other"
    rk.evaluate(demo_agent(), arithmetic_tasks(2, seed=9), out=other, progress=False)
    compared = CompareView(runs[0], other)
    assert "have no task in common" in compared.result.value
    assert compared.comparison is None and compared.chart.children == () and compared.flips.children == ()
    with pytest.raises(RuntimeError, match=r"compare the two runs first"):
        compared.open_pair("arith-0-000")


def test_run_charts_count_the_rewards_and_summarise_the_phases(runs):
    a, _ = runs
    charts = RunCharts(a)
    rewards, phases = charts.figures
    frame = rk.open_run(a).rollouts()
    assert [t.name for t in rewards.data] == ["reward", "reward.correct"]  # the scored total, then each named one
    for bars in rewards.data:
        assert list(bars.x) == [0.0, 1.0] and list(bars.y) == [4, 8]
    median, p95 = phases.data
    assert list(median.y)[:2] == ["boot", "setup"] and "waiting for the user" not in median.y
    model = list(median.y).index("agent · model")
    assert median.x[model] == pytest.approx(frame["model_time"].quantile(0.5) * 1000)
    assert p95.x[model] == pytest.approx(frame["model_time"].quantile(0.95) * 1000)


def test_reward_distribution_bins_many_values_and_counts_the_missing():
    import pandas as pd

    values = [i / 99 for i in range(100)] + [None]  # 100 distinct values from 0 to 1, one missing
    frame = pd.DataFrame({"id": [str(i) for i in range(101)], "phase.agent": 0.0, "reward": values})
    fig = plots.reward_distribution(frame, bins=10)
    (bars,) = fig.data
    assert len(bars.x) == 10 and list(bars.y) == [10] * 10
    assert bars.name == "reward (1 without)"
    assert bars.x[0] == pytest.approx(0.05) and bars.width == pytest.approx(0.1)


def test_a_folder_with_no_trace_yet_says_its_charts_come_later(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    charts = RunCharts(folder)
    assert charts.figures == []
    assert "no finished rollout yet" in charts.note.value


# ---- in a real browser -------------------------------------------------------------------


@pytest.mark.slow
def test_view_page_in_a_browser_draws_its_charts_and_opens_a_flip(runs, tmp_path):
    playwright_sync = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("voila")
    from test_browser import CHROMIUM, _page
    from test_view import _env, _Served, _stop, _url

    if not os.path.exists(CHROMIUM):
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    expect = playwright_sync.expect
    a, b = runs
    expected = rk.compare(a, b, labels=(str(a), str(b)))
    shown = [s for s in expected.signals if s.diff is not None]
    env = {**_env(), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    viewer = subprocess.Popen([sys.executable, "-m", "rollkit", "view", str(a), str(b)], env=env,
                              start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    console: list[str] = []
    aborted: list[str] = []  # requests off this machine the page tried (a font stylesheet), refused by the test
    try:
        url = _url(viewer, timeout=120)
        with _page(_Served(url, []), tmp_path, "view-page", console=console, aborted=aborted) as page:
            page.set_viewport_size({"width": 1280, "height": 3600})  # Voila scrolls inside its page: show it all
            rewards = page.locator(".rk-chart-rewards .js-plotly-plot")
            expect(rewards).to_have_count(2)
            for i in range(2):
                expect(rewards.nth(i).locator(".gtitle")).to_contain_text("reward distribution · 12 rollouts")
                # two signals (reward, reward.correct), two values each: 0 and 1
                expect(rewards.nth(i).locator(".bars path")).to_have_count(4)
            # plotly's graph div (in the chart's Output): its `data` is what plotly drew
            read = "el => el.data.map(t => [Array.from(t.x), Array.from(t.y)])"
            assert rewards.nth(0).evaluate(read) == [[[0, 1], [4, 8]], [[0, 1], [4, 8]]]
            phases = page.locator(".rk-chart-phases .js-plotly-plot")
            expect(phases.nth(1).locator(".gtitle")).to_contain_text("phase timing · 12 rollouts")
            medians = phases.nth(1).evaluate(read)[0]
            assert medians[1][:2] == ["boot", "setup"] and all(x >= 0 for x in medians[0])
            forest = page.locator(".rk-chart-forest .js-plotly-plot")
            expect(forest.locator(".gtitle")).to_contain_text("12 tasks paired")
            expect(forest.locator(".scatterlayer .point")).to_have_count(len(shown))
            xs, ys = forest.evaluate(read)[0]
            assert ys == [s.signal for s in shown] and xs == pytest.approx([s.diff for s in shown])
            expect(forest.locator(".annotation-text").first).to_have_text(
                f"{shown[0].wins} / {shown[0].ties} / {shown[0].losses}")
            table = page.locator("table.rk-compare-signals")
            expect(table.locator("tbody tr")).to_have_count(len(expected.signals))
            expect(table.locator("tbody tr").first.locator("td").nth(8)).to_have_text("4 / 4 / 4")
            page.screenshot(path=str(tmp_path / "view-page-charts.png"), full_page=True)
            page.locator(".rk-flips-lost button.rk-flip-open").first.click()
            left, right = page.locator(".rk-side-a"), page.locator(".rk-side-b")
            expect(left).to_contain_text("arith-0-000")
            expect(left.locator(".rk-assistant").last).to_contain_text("The answer is")
            expect(right.locator(".rk-assistant").last).to_contain_text(MARKUP)  # the markup as text
            expect(page.locator(".rk-side img")).to_have_count(0)
            expect(right.locator("b", has_text="7")).to_have_count(0)
        # No error in the console (uncaught ones included: tests/test_browser.py's _page) and
        # nothing asked of another host.
        errors = [line for line in console if line.startswith("error:")]
        assert errors == [] and aborted == [], (errors, aborted)
        assert (tmp_path / "view-page-charts.png").stat().st_size > 10_000
    finally:
        _stop(viewer)


def test_a_task_only_one_run_has_opens_with_the_other_half_saying_so(runs, tmp_path):
    more = tmp_path / "more"
    rk.evaluate(demo_agent(), arithmetic_tasks(13), out=more, progress=False)  # the same 12 and arith-0-012
    compared = CompareView(runs[0], more)
    assert compared.comparison.only_b == ["arith-0-012"]
    trace_a, trace_b = compared.open_pair("arith-0-012")
    assert trace_a is None and trace_b.task.key == "arith-0-012"
    left, right = compared.side.children
    assert "run A has no rollout of arith-0-012" in left.value and "arith-0-012" in right.value


def test_a_followed_run_gets_its_charts_when_it_ends(tmp_path):
    from rollkit.notebook.monitor import RunMonitor

    folder = tmp_path / "live"
    folder.mkdir()
    page = view([folder])
    _stop_monitors(page)
    _, _, monitor, charts, grid = page.children
    assert isinstance(monitor, RunMonitor) and charts.figures == []
    assert "no finished rollout yet" in charts.note.value
    assert "the rollouts' grid comes when the run ends" in grid.children[0].value
    rk.evaluate(demo_agent(), arithmetic_tasks(3), out=folder, progress=False)  # written "by another process"
    monitor.poll()  # what the follow task does: the run's end redraws the charts
    assert monitor.state.final == "done"
    assert charts.figures[0].layout.title.text == "reward distribution · 3 rollouts"
    assert charts.note.value == ""
    assert grid.children[0].total == 3 and grid.children[0].grid.value.count("rk-rollout-link") == 3
