"""Plots from traces and frames, and the live ones fed by rollout events."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest

import rollkit as rk
from conftest import ticking
from rollkit.core.clock import FakeClock
from rollkit import frames, plots
from rollkit.examples import arithmetic_tasks, demo_agent

from helpers.sample_traces import assorted_traces


async def _two_segments() -> rk.Trace:
    """Two segments of two turns each, on a fake clock where each model call
    takes 0.25 s: agent time 0.25 a turn, exactly."""
    clock = FakeClock()
    agent = demo_agent(limits={"max_turns": 6, "max_total_tokens": 500}, timeouts={"agent": 60}, clock=clock)
    ticking(agent.model, clock, 0.25)
    rollout = agent.rollout(arithmetic_tasks(1)[0], user=True)
    await rollout.open()
    await rollout.step()
    await rollout.step("Now 7 boxes with 6 pens each?")
    return await rollout.close()


def _shapes_at(fig: go.Figure, **where: object) -> list[object]:
    return [s for s in fig.layout.shapes if all(getattr(s, k) == v for k, v in where.items())]


async def test_budget_burn_draws_cumulative_values_limits_and_segments() -> None:
    trace = await _two_segments()
    fig = plots.budget_burn(trace)
    by_name = {d.name: d for d in fig.data}
    assert list(by_name["turns"].x) == [1, 2, 3, 4]
    assert list(by_name["total"].y) == [c.cum_total_tokens for c in trace.turns]
    assert list(by_name["agent time"].y) == [0.25, 0.5, 0.75, 1.0]  # charged per turn, on the fake clock
    # limits as dashed horizontal lines in their own rows
    assert len(_shapes_at(fig, yref="y", y0=6, y1=6)) == 1
    assert len(_shapes_at(fig, yref="y2", y0=500, y1=500)) == 1
    assert len(_shapes_at(fig, yref="y3", y0=60.0, y1=60.0)) == 1
    assert len(fig.layout.shapes) == 1 + 3  # boundaries, then one line per limit that is set
    # the second segment starts after turn 2
    assert plots.segment_boundaries(fig) == [2.5]
    assert fig.layout.shapes[0].path == "M2.5,0 L2.5,1" and fig.layout.shapes[0].visible


async def test_waiting_for_the_user_costs_no_agent_time_on_the_chart() -> None:
    """L9 on the chart, on a fake clock where the agent's model takes 0.25 s
    a call: between segments the wall clock runs (another rollout, whose
    model takes 5 s, runs to its end meanwhile) but agent time does not."""
    clock = FakeClock()
    agent = demo_agent(clock=clock)
    ticking(agent.model, clock, 0.25)
    rollout = agent.rollout(arithmetic_tasks(1)[0], user=True)
    await rollout.open()
    await rollout.step()
    slow = rk.Agent(model=ticking(rk.ScriptedModel(lambda r: "done"), clock, 5.0), clock=clock)
    await slow.run(rk.Task(prompt="meanwhile"))
    await rollout.step("Now 7 boxes with 6 pens each?")
    trace = await rollout.close()
    first, second = trace.segments
    assert second.start - first.end == 5.0  # the user's wait, in wall time
    turns = [first.turns_added, second.turns_added]
    assert (first.charged, second.charged) == (0.25 * turns[0], 0.25 * turns[1]) and min(turns) > 0
    # the chart's agent time climbs 0.25 a turn: the wait is not in it
    agent_time = list(plots.budget_burn(trace).data[4].y)
    assert agent_time == [0.25 * (i + 1) for i in range(trace.num_turns)]


async def test_live_budget_burn_grows_one_point_per_turn_from_events() -> None:
    agent = demo_agent(limits={"max_turns": 6})
    rollout = agent.rollout(arithmetic_tasks(1)[0], user=True)
    live = plots.LiveBudgetBurn(rollout)
    assert isinstance(live.figure, go.FigureWidget)
    seen: list[int] = []
    rollout.subscribe(lambda e: seen.append(live.points) if e.kind == "turn" else None)
    await rollout.open()
    await rollout.step()
    assert seen == [1, 2]  # updated inside each turn's event, not afterwards
    await rollout.step("And 3 boxes with 4 pens each?")
    assert live.figure.data[0].x == (1, 2, 3, 4)
    assert live.figure.data[3].y == tuple(c.cum_total_tokens for c in rollout.trace.turns)
    assert plots.segment_boundaries(live.figure) == [2.5]
    live.close()
    await rollout.step("And 2 boxes with 2 pens each?")
    assert live.points == 4  # unsubscribed: no more updates
    await rollout.close()


async def test_live_budget_burn_catches_up_with_an_ongoing_rollout() -> None:
    rollout = demo_agent().rollout(arithmetic_tasks(1)[0])
    await rollout.open()
    await rollout.step()
    live = plots.LiveBudgetBurn(rollout)
    assert live.points == 2
    assert live.figure.data[0].y == (1, 2)
    await rollout.close()


async def test_phase_timeline_shows_phases_segments_and_calls() -> None:
    trace = await _two_segments()
    fig = plots.phase_timeline(trace)
    bars = {d.name: d for d in fig.data}
    for phase in ("boot", "setup", "agent", "finalize", "scoring"):
        assert list(bars[phase].y) == [phase]
        assert bars[phase].x[0] == pytest.approx(trace.phases[phase].duration)
    assert bars["boot"].base[0] == 0.0
    assert list(bars["segments"].y) == ["agent: segments"] * 2
    assert len(bars["model calls"].x) == len(trace.model_calls)


async def test_live_phase_timeline_follows_phase_events() -> None:
    rollout = demo_agent().rollout(arithmetic_tasks(1)[0])
    live = plots.LivePhaseTimeline(rollout)
    assert all(len(d.y) == 0 for d in live.figure.data)
    await rollout.open()
    names = {d.name: d for d in live.figure.data}
    assert list(names["boot"].y) == ["boot"] and list(names["setup"].y) == ["setup"]
    assert len(names["agent"].y) == 0
    await rollout.step()
    await rollout.close()
    assert list(names["scoring"].y) == ["scoring"]
    assert names["scoring"].x[0] == pytest.approx(rollout.trace.phases["scoring"].duration)
    live.close()


async def test_phase_durations_split_agent_into_model_and_harness() -> None:
    traces = list((await assorted_traces()).values())
    fig = plots.phase_durations(traces)
    bars = {d.name: d for d in fig.data}
    assert list(bars) == ["boot", "setup", "agent · model", "agent · harness", "finalize", "scoring"]
    assert list(bars["agent · model"].y) == pytest.approx([t.model_time * 1000 for t in traces])
    assert list(bars["agent · harness"].y) == pytest.approx([t.harness_time * 1000 for t in traces])
    assert fig.layout.barmode == "stack"
    # the same from a frame
    again = plots.phase_durations(frames.rollouts(traces))
    assert list(again.data[2].y) == list(bars["agent · model"].y)


def _box_values(fig: go.Figure) -> dict[str, list[float]]:
    box = fig.data[0]
    out: dict[str, list[float]] = {}
    for name, value in zip(box.x, box.y):
        out.setdefault(name, []).append(value)
    return out


def _counts(fig: go.Figure) -> dict[str, dict[str, int]]:
    return {d.name: dict(zip(d.x, d.y)) for d in fig.data if d.type == "bar"}


async def test_rewards_plot_counts_missing_instead_of_drawing_zero() -> None:
    kinds = await assorted_traces()
    traces = [kinds["ok"], kinds["wrong"], kinds["failed"], kinds["raised"]]
    fig = plots.rewards(traces)
    values = _box_values(fig)
    assert sorted(values["reward.correct"]) == [0.0, 1.0, 1.0]  # the failed run is not a 0
    assert "metric.broken" not in values
    counts = _counts(fig)
    assert counts["missing"]["reward.correct"] == 1
    assert counts["present"]["reward.correct"] == 3
    assert counts["missing"]["metric.broken"] == 4
    assert not any(math.isnan(v) for v in fig.data[0].y)


async def test_live_rewards_grow_as_watched_rollouts_close() -> None:
    kinds = await assorted_traces()
    live = plots.LiveRewards([kinds["ok"]])
    assert live.rollouts == 1
    tasks = arithmetic_tasks(2)
    rollouts = [demo_agent().rollout(t) for t in tasks]
    broken = rk.Agent(model=rk.ScriptedModel([], name="broken")).rollout(tasks[0])
    for rollout in (*rollouts, broken):
        live.watch(rollout)
    for rollout in (*rollouts, broken):
        await rollout.open()
        await rollout.step()
        await rollout.close()
    assert live.rollouts == 4
    assert sorted(_box_values(live.figure)["reward.correct"]) == [0.0, 1.0, 1.0]
    counts = _counts(live.figure)
    assert counts["present"]["reward.correct"] == 3 and counts["missing"]["reward.correct"] == 1
    assert live.figure.layout.title.text == "rewards and metrics · 4 rollouts"
    live.close()
    extra = demo_agent().rollout(tasks[0])
    live.watch(extra)
    live.close()
    await extra.open()
    await extra.close()
    assert live.rollouts == 4


def test_plots_name_what_is_wrong_with_their_input() -> None:
    with pytest.raises(TypeError, match="budget_burn draws one rk.Trace, got list"):
        plots.budget_burn([])
    with pytest.raises(ValueError, match=r"pass traces, or the frame rk.frames.rollouts\(traces\) made"):
        import pandas as pd

        plots.rewards(pd.DataFrame({"x": [1]}))


def test_empty_input_gives_an_empty_figure() -> None:
    assert all(len(d.x) == 0 for d in plots.rewards([]).data)
    assert all(len(d.y) == 0 for d in plots.phase_durations([]).data)


EVIL = '<a href="https://evil.example">k</a>'
EVIL_SHOWN = "&lt;a href=&quot;https://evil.example&quot;&gt;k&lt;/a&gt;"


class EvilSignals(rk.Task):
    @rk.reward(name="<b>r</b>")
    def bold(self) -> float:
        return 1.0

    @rk.metric(name=EVIL)
    def linked(self) -> float:
        return 0.5


def _strings(value: object) -> list[str]:
    """Every string anywhere in a figure's plotly JSON."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    if hasattr(value, "tolist"):  # numpy arrays
        return _strings(value.tolist())
    return []


def _assert_no_html_from_the_trace(fig: object) -> list[str]:
    strings = _strings(fig.to_plotly_json())  # type: ignore[attr-defined]
    assert not [s for s in strings if "<a " in s or "<b>r" in s or "evil.example\">" in s]
    return strings


async def test_strings_from_traces_enter_figures_escaped() -> None:
    """Plotly renders links, bold and styles in titles, labels and hover
    text: a task id or signal name from a trace must be shown, not rendered."""
    trace = await rk.Agent(model="echo").run(EvilSignals(prompt="hi", id=EVIL))
    assert trace.task.key == EVIL
    for fig in (plots.budget_burn(trace), plots.phase_timeline(trace)):
        strings = _assert_no_html_from_the_trace(fig)
        assert fig.layout.title.text.endswith(f" · {EVIL_SHOWN}")
        assert any(EVIL_SHOWN in s for s in strings)

    durations = plots.phase_durations([trace], by="task_key")
    _assert_no_html_from_the_trace(durations)
    assert list(durations.data[0].x) == [EVIL_SHOWN]

    chart = plots.rewards([trace])
    _assert_no_html_from_the_trace(chart)
    names = ["reward.&lt;b&gt;r&lt;/b&gt;", f"metric.{EVIL_SHOWN}", "metric.tool_call_success_rate"]
    assert _counts(chart)["present"] == {names[0]: 1, names[1]: 1, names[2]: 0}  # the chat harness made no tool call
    assert list(chart.layout.xaxis.categoryarray) == names

    live = plots.LiveRewards([trace])
    _assert_no_html_from_the_trace(live.figure)
    assert _box_values(live.figure) == {names[0]: [1.0], names[1]: [0.5]}
    assert list(live.figure.layout.xaxis.categoryarray) == names


async def test_phase_timeline_names_rows_by_phase_not_by_the_stored_name() -> None:
    trace = await demo_agent().run(arithmetic_tasks(1)[0])
    forged = trace.model_copy(deep=True)
    forged.phases["boot"].name = "<b>boot</b>"
    bars = {d.name: d for d in plots.phase_timeline(forged).data}
    assert list(bars["boot"].y) == ["boot"]
    assert bars["boot"].hovertext[0].startswith("boot: ")


def test_phase_durations_by_an_unknown_column_names_the_columns() -> None:
    with pytest.raises(ValueError, match=r"no column 'operation'; pick one of: id, example_id, repeat, rollout_id, task_key"):
        plots.phase_durations([], by="operation")
