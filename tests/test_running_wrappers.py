"""`rk.evaluate` / `rk.ab_test` with `monitor=True`: the notebook layer wraps
the runs layer's functions, so the runs layer never reaches up for a widget.

Checked: the wrappers take every argument the runs functions take (their
signatures cannot drift apart), a monitor is shown only once the arguments
are checked, it is fed by the run, and the caller's own callbacks still run.
"""

from __future__ import annotations

import inspect

import IPython.display
import pytest

import rollkit as rk
from rollkit.core.plugins import POINTS
from rollkit.examples import arithmetic_tasks, careful_calculator_model, demo_agent, toy_calculator_model
from rollkit.notebook.decide import ABMonitor
from rollkit.notebook.monitor import RunMonitor
from rollkit.notebook.runbrowser import RunBrowser
from rollkit.runs import ab as runs_ab
from rollkit.runs import evaluation as runs_evaluation
from rollkit.runs.ab import ABTestError
from rollkit.runs.evaluation import EvaluateArgumentError


@pytest.fixture
def shown(monkeypatch):
    displayed: list = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: displayed.append(obj))
    return displayed


def _agent(model):
    return rk.Agent(model=model, limits=rk.RolloutLimits(max_turns=4))


@pytest.mark.parametrize("name, runs_fn", [
    ("evaluate", runs_evaluation.evaluate), ("evaluate_async", runs_evaluation.evaluate_async),
    ("ab_test", runs_ab.ab_test), ("ab_test_async", runs_ab.ab_test_async),
])
def test_the_top_level_name_is_the_runs_function_plus_monitor(name, runs_fn):
    wrapper = getattr(rk, name)
    assert wrapper.__module__ == "rollkit.notebook.running"
    wrapped = inspect.signature(wrapper).parameters
    assert [p for p in wrapped if p != "monitor"] == list(inspect.signature(runs_fn).parameters)
    assert wrapped["monitor"].default is False and wrapped["monitor"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "monitor=True" in wrapper.__doc__
    assert "monitor" not in inspect.signature(runs_fn).parameters  # the runs layer draws nothing


def test_no_plug_point_is_left_for_the_runs_layer_to_reach_a_widget():
    assert not {"monitor", "ab_monitor", "run_browser"} & set(POINTS)


async def test_evaluate_async_shows_nothing_for_bad_arguments_then_a_monitor_fed_by_the_run(shown):
    with pytest.raises(EvaluateArgumentError, match="repeats"):
        rk.evaluate_async(demo_agent(), arithmetic_tasks(2), repeats=0, monitor=True)
    assert shown == []
    result = await rk.evaluate_async(demo_agent(), arithmetic_tasks(3), repeats=2, monitor=True)
    assert len(shown) == 1 and isinstance(shown[0], RunMonitor)
    assert shown[0].state.done == len(result) == 6 and shown[0].state.final == "done"


async def test_sync_evaluate_with_a_monitor_in_a_loop_is_refused_before_anything_is_shown(shown):
    with pytest.raises(rk.UsageError, match="rk.evaluate_async"):
        rk.evaluate(demo_agent(), arithmetic_tasks(2), monitor=True)
    assert shown == []


def test_ab_test_monitor_is_drawn_once_the_test_starts_and_fed_every_pair(shown):
    with pytest.raises(ABTestError):
        rk.ab_test(_agent(toy_calculator_model()), _agent(careful_calculator_model()), arithmetic_tasks(4),
                   alpha=2, monitor=True)
    assert shown == []
    plans, pairs = [], []
    result = rk.ab_test(_agent(toy_calculator_model()), _agent(careful_calculator_model()), arithmetic_tasks(40),
                        monitor=True, on_start=plans.append, on_pair=pairs.append)
    assert len(shown) == 1 and isinstance(shown[0], ABMonitor)
    assert plans == [{"signal": "reward", "alpha": 0.05, "margin": None, "planned": 40, "method": runs_ab.METHOD}]
    assert [s.pairs for s in pairs] == [s.pairs for s in result.history]
    assert list(shown[0].figure.data[1].y) == [s.low for s in result.history]


async def test_ab_test_async_monitor_is_the_same(shown):
    result = await rk.ab_test_async(_agent(toy_calculator_model()), _agent(careful_calculator_model()),
                                    arithmetic_tasks(30), monitor=True)
    assert len(shown) == 1 and len(shown[0].states) == result.pairs


def test_a_search_opens_in_the_trace_browser_with_its_hits(tmp_path):
    traces = rk.evaluate(demo_agent(), arithmetic_tasks(4), progress=False).traces
    path = rk.save(traces, tmp_path / "t.jsonl")
    run = rk.open_run(path)
    hits = run.search(traces[2].messages[1].content)  # the task's own question: one rollout's
    browser = rk.notebook.TraceBrowser(hits)
    assert isinstance(browser, RunBrowser)
    assert hits.ids == [traces[2].id] and len(browser.table.options) == 1
