"""One definition of how a run ended (rollkit.core.outcome), read the same
by every layer: the evaluation summary, the run monitor (from a trace and
from its saved line), the stop-reasons chart, the frames and the trace's
HTML; and the constructors importers map their sources' terms with."""

from __future__ import annotations

import json

import pytest

import rollkit as rk
from rollkit.notebook import display, plots
from rollkit.analysis import frames
from rollkit.runs.evaluation import _summarize
from rollkit.runs.live import finished_from_line, finished_from_trace


async def _five_ways() -> dict[str, rk.Trace]:
    """One real rollout ending each way."""
    task = rk.Task(prompt="hi")
    ok = await rk.Agent(model=rk.ScriptedModel(["hello"])).run(task)
    stopped = await rk.Agent(model="echo", limits={"max_turns": 1}).run(
        rk.Task(prompt="hi"), user=rk.ScriptedUser(["again", "and again"]))
    failed = await rk.Agent(model=rk.ScriptedModel([], name="broken")).run(task)
    aborting = rk.Agent(model=rk.ScriptedModel(["hello"])).rollout(task, user=True)
    await aborting.open()
    aborted = await aborting.abort()
    open_ = rk.Agent(model=rk.ScriptedModel(["hello"])).rollout(task, user=True)
    await open_.open()
    await open_.step()
    incomplete = open_.trace.model_copy(deep=True)
    await open_.close()
    return {"ok": ok, "stopped": stopped, "failed": failed, "aborted": aborted, "incomplete": incomplete}


async def test_each_way_a_run_ends_has_one_outcome_every_layer_reads_the_same():
    traces = await _five_ways()
    outcomes = {name: trace.outcome for name, trace in traces.items()}
    assert {name: o.kind for name, o in outcomes.items()} == {n: n for n in traces}
    assert {name: o.label for name, o in outcomes.items()} == {
        "ok": "ok", "stopped": "stopped: max_turns", "failed": "failed: ProviderError", "aborted": "aborted",
        "incomplete": "incomplete"}
    assert {name: o.scored for name, o in outcomes.items()} == {
        "ok": True, "stopped": True, "failed": False, "aborted": False, "incomplete": False}
    failed = outcomes["failed"]
    assert (failed.error_type, failed.boundary, failed.phase) == ("ProviderError", "provider", "agent")
    assert "ScriptedModel 'broken' has no reply #1" in failed.message
    assert outcomes["aborted"].phase is None and outcomes["aborted"].is_failure  # aborted between segments
    assert not outcomes["stopped"].is_failure

    order = list(traces)
    # The monitor, from the trace and from its saved JSON line.
    assert [finished_from_trace(traces[n]).outcome for n in order] == [outcomes[n].label for n in order]
    lines = [traces[n].model_dump_json() for n in order]
    assert [finished_from_line(line, None).outcome for line in lines] == [outcomes[n].label for n in order]
    assert [rk.Outcome.of_record(json.loads(line)) for line in lines] == [outcomes[n] for n in order]
    # The evaluation summary counts by the same labels.
    summary = _summarize(list(traces.values()))
    for label in ("ok", "stopped: max_turns", "failed: ProviderError", "aborted", "incomplete"):
        assert f"\n{label} " in summary
    # The rollouts frame, the HTML verdict and the chart's colours.
    assert list(frames.rollouts(list(traces.values()))["outcome"]) == [outcomes[n].label for n in order]
    verdicts = [display.status_html(traces[n]) for n in order]
    assert [v.split(">", 1)[1].split("<", 1)[0] for v in verdicts] == ["ok", "stopped", "failed", "aborted", "not closed"]
    bar = plots.stop_reasons(list(traces.values())).data[0]
    colours = dict(zip(bar.x, bar.marker.color))
    assert colours == {"done": "#59a14f", "max_turns": "#f28e2b", "ProviderError": "#e15759", "aborted": "#e15759",
                       "incomplete": "#e15759"}


async def test_a_stop_named_like_an_error_is_still_a_stop():
    """The chart used to call anything ending in "Error" a failure."""

    class Halting(rk.Task):
        @rk.stop
        def SyntaxError(self, response: rk.Response) -> bool:  # noqa: N802 - a user's odd hook name
            return True

    trace = await rk.Agent(model=rk.ScriptedModel(["hello"])).run(Halting(prompt="hi"))
    assert trace.outcome.label == "stopped: SyntaxError" and trace.outcome.scored
    bar = plots.stop_reasons([trace]).data[0]
    assert list(bar.x) == ["SyntaxError"] and list(bar.marker.color) == ["#4e79a7"]


@pytest.mark.parametrize("outcome", [
    rk.Outcome.ok(),
    rk.Outcome.ok(scored=False),
    rk.Outcome.stopped("max_turns"),
    rk.Outcome.failed("ProviderError", "provider", message="the provider's infrastructure failed"),
    rk.Outcome.failed("SandboxError", "runtime", message="container died", phase="setup"),
    rk.Outcome.aborted("agent"),
    rk.Outcome.incomplete(),
])
async def test_an_importer_records_an_outcome_and_every_reader_gets_it_back(outcome):
    trace = await rk.Agent(model=rk.ScriptedModel(["hello"])).run(rk.Task(prompt="hi"))
    trace.rewards = {"correct": 1.0}  # what the source scored
    outcome.record(trace)
    assert trace.outcome == outcome
    again = rk.Trace.model_validate_json(trace.model_dump_json())
    assert again.outcome == outcome and rk.Outcome.of_record(json.loads(trace.model_dump_json())) == outcome
    assert trace.ok is (outcome.kind in ("ok", "stopped"))
    assert trace.scored is outcome.scored
    assert trace.scored_reward == (1.0 if outcome.scored else None)  # a failure's score is never shown


def test_outcome_constructors_refuse_what_is_not_an_outcome():
    with pytest.raises(ValueError, match="an outcome is one of ok, stopped, failed, aborted, incomplete, not 'done'"):
        rk.Outcome("done")
    with pytest.raises(ValueError, match="a stopped outcome names its reason"):
        rk.Outcome.stopped("")
    with pytest.raises(ValueError, match=r"a failed outcome names its error type and boundary, e.g. \('ProviderError'"):
        rk.Outcome.failed("", "provider")
