"""The DataFrame builders (rollkit.analysis.frames): one row per rollout, turn,
phase and signal, missing kept missing, empty input giving empty frames with
the columns, and the eager frames equal to the store's (both builds)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import rollkit as rk
from rollkit import frames
from rollkit.examples import arithmetic_tasks, demo_agent

from helpers.sample_traces import assorted_traces


@pytest.fixture
async def kinds() -> dict[str, rk.Trace]:
    return await assorted_traces()


@pytest.mark.parametrize(
    ("build", "columns"),
    [
        (frames.rollouts, frames.ROLLOUT_COLUMNS),
        (frames.turns, frames.TURN_COLUMNS),
        (frames.phases, frames.PHASE_COLUMNS),
        (frames.signals, frames.SIGNAL_COLUMNS),
    ],
)
def test_empty_list_gives_empty_frame_with_the_columns(build, columns) -> None:
    frame = build([])
    assert isinstance(frame, pd.DataFrame)
    assert len(frame) == 0
    assert tuple(frame.columns) == tuple(columns)


@pytest.mark.parametrize("build", [frames.rollouts, frames.turns, frames.phases, frames.signals])
def test_builder_names_a_non_trace_item(build) -> None:
    with pytest.raises(TypeError, match=r"item 1 is dict, not a rollkit Trace"):
        build([rk.Trace(task=rk.core.trace.TaskRef(type="T", key="k")), {"id": "x"}])


async def test_rollouts_one_row_per_rollout_with_values(kinds) -> None:
    traces = list(kinds.values())
    frame = frames.rollouts(traces).set_index("id")
    assert list(frame.index) == [t.id for t in traces]
    ok = frame.loc[kinds["ok"].id]
    assert ok["reward"] == 1.0 and ok["reward.correct"] == 1.0
    assert ok["turns"] == kinds["ok"].num_turns == 2
    assert ok["total_tokens"] == kinds["ok"].num_total_tokens
    assert ok["metric.used_calculator"] == 1.0
    assert ok["phase.agent"] == pytest.approx(kinds["ok"].phases["agent"].duration)
    assert ok["model_time"] + ok["harness_time"] == pytest.approx(ok["agent_time"])
    assert frame.loc[kinds["wrong"].id, "reward"] == 0.0
    assert frame.loc[kinds["stopped"].id, "stop"] == "max_turns"


async def test_rollouts_failed_run_has_missing_reward_not_zero(kinds) -> None:
    """L23: a failed run is not scored, so its reward is NaN, never 0."""
    row = frames.rollouts(list(kinds.values())).set_index("id").loc[kinds["failed"].id]
    assert row["ok"] is False or row["ok"] == False  # noqa: E712 - object column
    assert row["error_type"] == "ProviderError"
    assert row["error_phase"] == "agent"
    assert math.isnan(row["reward"])
    assert math.isnan(row["reward.correct"])
    assert math.isnan(row["phase.scoring"])  # scoring never started


async def test_rollouts_signal_that_raised_stays_a_missing_column(kinds) -> None:
    frame = frames.rollouts([kinds["ok"], kinds["raised"]]).set_index("id")
    assert "metric.broken" in frame.columns
    assert math.isnan(frame.loc[kinds["raised"].id, "metric.broken"])
    assert math.isnan(frame.loc[kinds["ok"].id, "metric.broken"])  # never had it
    assert frame.loc[kinds["raised"].id, "reward"] == 1.0


async def test_turns_carry_cumulative_budget_and_limits(kinds) -> None:
    trace = kinds["ok"]
    frame = frames.turns([trace, kinds["failed"]])
    assert len(frame) == trace.num_turns  # the failed run committed no turn
    assert list(frame["turn"]) == [1, 2]
    assert list(frame["cum_total_tokens"]) == [c.cum_total_tokens for c in trace.turns]
    assert list(frame["cum_input_tokens"]) == [c.cum_input_tokens for c in trace.turns]
    assert list(frame["max_turns"]) == [6, 6]
    assert frame["max_total_tokens"].isna().all()  # no limit stays missing
    assert frame["agent_budget"].isna().all()


async def test_phases_one_row_per_span_in_lifecycle_order(kinds) -> None:
    frame = frames.phases([kinds["ok"], kinds["failed"]])
    ok = frame[frame["id"] == kinds["ok"].id]
    assert list(ok["phase"]) == ["boot", "setup", "agent", "finalize", "scoring"]
    assert ok["offset"].iloc[0] == 0.0
    assert (ok["duration"] >= 0).all()
    failed = frame[frame["id"] == kinds["failed"].id]
    assert list(failed["phase"]) == ["boot", "setup", "agent"]  # not finalized, not scored


async def test_signals_say_why_each_value_is_missing(kinds) -> None:
    frame = frames.signals(list(kinds.values()))

    def rows(kind: str) -> pd.DataFrame:
        return frame[frame["id"] == kinds[kind].id].set_index("name")

    ok = rows("ok")
    assert ok.loc["correct", "kind"] == "reward"
    assert ok.loc["correct", "value"] == 1.0 and ok.loc["correct", "weight"] == 1.0
    assert not ok["missing"].any()

    failed = rows("failed")
    # A failed run gets the signals its task type has elsewhere, all missing.
    assert {"correct", "used_calculator"} <= set(failed.index)
    assert set(failed["why_missing"]) == {"run failed"}
    assert failed["value"].isna().all()
    assert failed.loc["correct", "error"].startswith("ProviderError: ")

    raised = rows("raised")
    assert raised.loc["broken", "why_missing"] == "scoring raised"
    assert "cannot measure this" in raised.loc["broken", "error"]
    assert raised.loc["correct", "missing"] == False  # noqa: E712

    timed_out = rows("timed_out")
    assert timed_out.loc["slow", "why_missing"] == "scoring timed out"
    assert timed_out.loc["slow", "error"] == "scoring timed out after 0.05s"

    assert set(rows("aborted")["why_missing"]) == {"run aborted"}


async def test_signals_of_a_lone_failed_run_still_show_a_row(kinds) -> None:
    frame = frames.signals([kinds["failed"]])
    assert len(frame) == 1
    assert frame.loc[0, "why_missing"] == "run failed"
    assert frame.loc[0, "name"] is None


async def test_saved_traces_build_the_same_frames(kinds, tmp_path) -> None:
    traces = list(kinds.values())
    loaded = rk.load(rk.save(traces, tmp_path))
    for build in (frames.rollouts, frames.turns, frames.phases, frames.signals):
        pd.testing.assert_frame_equal(build(traces), build(loaded))


async def test_thousands_of_traces_build_every_row() -> None:
    agent = demo_agent()
    base = [await agent.run(t) for t in arithmetic_tasks(6)]
    traces = [t.model_copy(update={"id": f"{i:05d}-{j}"}) for i in range(400) for j, t in enumerate(base)]
    runs = frames.rollouts(traces)
    assert len(runs) == 2400
    assert runs["id"].is_unique
    assert len(frames.turns(traces)) == sum(t.num_turns for t in traces)
    assert len(frames.phases(traces)) == 2400 * 5
    # correct, used_calculator, reply_words and the harness's tool_call_success_rate
    assert len(frames.signals(traces)) == 2400 * 4


@pytest.mark.parametrize(
    "columns", [frames.ROLLOUT_COLUMNS, frames.TURN_COLUMNS, frames.PHASE_COLUMNS, frames.SIGNAL_COLUMNS]
)
def test_batch_ids_follow_the_trace_id_in_every_frame(columns) -> None:
    assert columns[:4] == ("id", "example_id", "repeat", "rollout_id")


async def test_batch_ids_come_from_trace_info_and_stay_missing_without_it(kinds) -> None:
    """A batch evaluation writes example_id, repeat and rollout_id to
    trace.info; every frame carries them, missing where a trace has none."""
    batch = kinds["ok"].model_copy(deep=True)
    batch.info.update(example_id="arith-0-000", repeat=2, rollout_id="arith-0-000#2")
    plain = kinds["failed"]
    for build in (frames.rollouts, frames.turns, frames.phases, frames.signals):
        frame = build([batch, plain])
        ours = frame[frame["id"] == batch.id]
        assert len(ours) > 0
        assert set(ours["example_id"]) == {"arith-0-000"}, build.__name__
        assert set(ours["repeat"]) == {2}, build.__name__
        assert set(ours["rollout_id"]) == {"arith-0-000#2"}, build.__name__
        theirs = frame[frame["id"] == plain.id]
        if len(theirs):  # the failed run committed no turn
            assert theirs["example_id"].isna().all() and theirs["rollout_id"].isna().all()
            assert theirs["repeat"].isna().all()


async def test_rollouts_reward_is_missing_when_scoring_never_ran(kinds) -> None:
    """Rewards on a trace whose scoring phase never ran are not a score (Trace.scored)."""
    ok = kinds["ok"]
    unscored = ok.model_copy(update={"id": "unscored", "phases": {k: v for k, v in ok.phases.items() if k != "scoring"}})
    frame = frames.rollouts([ok, unscored]).set_index("id")
    assert frame.loc[ok.id, "reward"] == 1.0
    assert math.isnan(frame.loc["unscored", "reward"])
    assert math.isnan(frame.loc["unscored", "reward.correct"])  # its value is no score either
    assert math.isnan(frame.loc["unscored", "metric.used_calculator"])
    assert frame.loc[ok.id, "reward.correct"] == 1.0
    assert frame.loc[ok.id, "harness_time"] == ok.harness_time


@pytest.mark.parametrize("native", [False, True])
async def test_the_store_gives_the_eager_frames_of_an_unscored_trace_with_rewards(kinds, tmp_path, monkeypatch,
                                                                                  native) -> None:
    """Both builds of the store (Python rows, DuckDB SQL) read a signal of
    an unscored run as missing, as the eager frames and the monitor do."""
    from rollkit.tables import columns

    monkeypatch.setattr(columns, "_NATIVE", native)
    monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", 0)
    ok = kinds["ok"]
    unscored = ok.model_copy(update={"id": "unscored", "phases": {k: v for k, v in ok.phases.items() if k != "scoring"}})
    run = rk.open_run(rk.save([ok, unscored], tmp_path / "t.jsonl"))
    for kind in ("rollouts", "turns", "calls", "phases", "signals"):
        pd.testing.assert_frame_equal(getattr(run, kind)(), getattr(frames, kind)([ok, unscored]), obj=kind)
    assert math.isnan(run.rollouts().set_index("id").loc["unscored", "reward.correct"])
