"""close(): order, teardown warnings, no score for a failure (L21-L26);
scoring: seed names first, then fill them (L27-L30)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from conftest import CountingRuntime, Recorder, prompt_task, virtual_time

import rollkit as rk


async def test_L21_close_order_and_concurrent_scoring(recorder: Recorder):
    """Harness session, tool services, finalize, scoring (task and harness side
    concurrently: each waits for the other, so running them in turn would time
    out), then the owned runtime last."""
    both_started = asyncio.Barrier(2)

    class Harness(rk.ChatHarness):
        async def cleanup(self, ctx):
            recorder("harness.cleanup")

        @rk.metric
        async def harness_side(self) -> float:
            recorder("harness.score")
            await both_started.wait()
            return 1.0

    class Tools(rk.Toolset):
        async def stop(self):
            recorder("toolset.stop")

    class Ordered(rk.Task):
        toolsets = [Tools()]

        async def finalize(self, ctx):
            recorder("task.finalize")

        @rk.reward
        async def task_side(self) -> float:
            recorder("task.score")
            await both_started.wait()
            return 1.0

    agent = rk.Agent(
        harness=Harness(),
        runtime=lambda: CountingRuntime(recorder),
        timeouts=rk.RolloutTimeouts(scoring=5),
    )
    trace = await agent.run(Ordered(prompt="x"))
    assert recorder.items[0] == "runtime.start"
    assert recorder.items[1:4] == ["harness.cleanup", "toolset.stop", "task.finalize"]
    assert sorted(recorder.items[4:6]) == ["harness.score", "task.score"]
    assert recorder.items[6:] == ["runtime.stop"]
    assert trace.rewards == {"task_side": 1.0}
    assert trace.metrics["harness_side"] == 1.0
    assert trace.signal_errors == {}


async def test_L22_failed_harness_cleanup_only_warns(caplog):
    class LeakyHarness(rk.ChatHarness):
        async def cleanup(self, ctx):
            raise ConnectionResetError("transport already gone")

    class Scored(rk.Task):
        @rk.reward
        def done(self) -> float:
            return 1.0

    with caplog.at_level(logging.WARNING, logger="rollkit"):
        trace = await rk.Agent(harness=LeakyHarness()).run(Scored(prompt="x"))
    assert trace.ok is True and trace.rewards == {"done": 1.0}
    assert trace.warnings == ["harness cleanup failed: ConnectionResetError: transport already gone"]
    assert "harness cleanup failed" in caplog.text


async def test_L23_failed_run_is_not_scored_or_finalized(recorder: Recorder):
    class Failing(rk.Task):
        async def finalize(self, ctx):
            recorder("finalize")

        @rk.reward
        def points(self) -> float:
            recorder("reward")
            return 1.0

    agent = rk.Agent(model=rk.ScriptedModel([]))  # no replies: the model call fails
    trace = await agent.run(Failing(prompt="x"))
    assert trace.error.type == "ProviderError"
    assert recorder.items == []
    assert trace.rewards == {} and trace.metrics == {}
    assert "finalize" not in trace.phases and "scoring" not in trace.phases


async def test_L23_failed_finalize_skips_scoring():
    class BadFinalize(rk.Task):
        def finalize(self, ctx):
            raise OSError("could not read results file")

        @rk.reward
        def points(self) -> float:
            return 1.0

    trace = await rk.Agent().run(BadFinalize(prompt="x"))
    assert (trace.error.type, trace.error.phase) == ("TaskError", "finalize")
    assert trace.error.message == "task.finalize: OSError: could not read results file"
    assert trace.rewards == {} and trace.ok is False


async def test_L24_stopped_run_is_scored_as_usual():
    class Stopped(rk.Task):
        @rk.reward
        def partial(self, trace: rk.Trace) -> float:
            return 0.5 * trace.num_turns

    agent = rk.Agent(model="echo", limits=rk.RolloutLimits(max_turns=2))
    async with agent.interaction(Stopped()) as it:
        while not it.done:
            await it.turn("again")
    assert it.trace.stop_condition == "max_turns"
    assert it.trace.rewards == {"partial": 1.0} and it.trace.ok is True


async def test_L25_ok_is_not_failed_and_close_is_idempotent():
    rollout = rk.Agent().rollout(prompt_task())
    await rollout.open()
    await rollout.step()
    first = await rollout.close()
    second = await rollout.close()
    assert first is second is rollout.trace
    assert first.ok is True and first.completed is True
    failing = rk.Agent(model=rk.ScriptedModel([])).rollout(prompt_task())
    await failing.open()
    await failing.step()
    assert (await failing.close()).ok is False


async def test_L26_close_logs_one_done_line(caplog):
    class Scored(rk.Task):
        @rk.reward(weight=2.0)
        def half(self) -> float:
            return 0.25

    with caplog.at_level(logging.INFO, logger="rollkit"):
        trace = await rk.Agent(limits=rk.RolloutLimits(max_turns=0)).run(Scored(prompt="x"))
        failed = await rk.Agent(model=rk.ScriptedModel([])).run(Scored(prompt="x"))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rollout done")]
    assert lines == [
        f"rollout done: id={trace.id} reward=0.5 turns=0 stop=max_turns",
        f"rollout done: id={failed.id} reward=None turns=0 stop=ProviderError",
    ]


async def test_L27_every_name_is_seeded_before_any_scoring_runs():
    seen: dict[str, object] = {}

    class Seeded(rk.Task):
        @rk.reward
        def first(self, trace: rk.Trace) -> float:
            seen.update(trace.rewards, **trace.metrics)
            return 1.0

        @rk.reward
        def second(self) -> float:
            return 0.0

        @rk.metric
        def broken(self) -> float:
            raise ZeroDivisionError("division by zero")

    trace = await rk.Agent().run(Seeded(prompt="x"))
    assert set(seen) == {"first", "second", "broken", "tool_call_success_rate"}
    assert trace.metrics["broken"] is None
    assert trace.signal_errors["broken"] == "TaskError: task metric 'broken': ZeroDivisionError: division by zero"
    assert trace.ok is True  # a missing measurement is not a failed run


async def test_L27_a_signal_that_times_out_stays_visible_as_missing():
    class Slow(rk.Task):
        @rk.metric
        async def forever(self) -> float:
            await asyncio.Event().wait()
            return 1.0

        @rk.reward
        def quick(self) -> float:
            return 1.0

    with virtual_time():
        trace = await rk.Agent(timeouts=rk.RolloutTimeouts(scoring=0.2)).run(Slow(prompt="x"))
    assert trace.metrics["forever"] is None
    assert trace.signal_errors["forever"] == "scoring timed out after 0.2s"
    assert trace.rewards == {"quick": 1.0}


async def test_L28_mapping_result_records_keys_and_unseeds_its_placeholder():
    class Mapped(rk.Task):
        @rk.reward(weight=0.5)
        def parts(self) -> dict[str, float]:
            return {"format": 1.0, "content": 0.0}

        @rk.metric
        def stats(self) -> dict[str, float]:
            return {"stats": 3, "extra": 4}

    trace = await rk.Agent().run(Mapped(prompt="x"))
    assert trace.rewards == {"format": 1.0, "content": 0.0}
    assert trace.reward_weights == {"format": 0.5, "content": 0.5}
    assert trace.metrics["stats"] == 3.0 and trace.metrics["extra"] == 4.0


async def test_L29_task_harness_and_judge_signals_meet_on_one_trace():
    @rk.reward(weight=2.0)
    def judge_says(trace: rk.Trace) -> float:
        return 1.0 if "calculator" in trace.transcript else 0.0

    from rollkit.examples import arithmetic_tasks, toy_calculator_model

    agent = rk.Agent(model=toy_calculator_model(), judges=[judge_says])
    trace = await agent.run(arithmetic_tasks(1)[0])
    assert trace.rewards == {"correct": 1.0, "judge_says": 1.0}
    assert trace.metrics["used_calculator"] == 1.0  # task
    assert trace.metrics["tool_call_success_rate"] == 1.0  # harness
    assert trace.reward == 3.0


async def test_L30_reward_is_weighted_sum_and_none_stays_visible():
    class Weighted(rk.Task):
        @rk.reward(weight=0.25)
        def a(self) -> float:
            return 1.0

        @rk.reward(weight=3)
        def b(self) -> bool:
            return True

        @rk.reward(weight=10)
        def unknown(self) -> None:
            return None

    trace = await rk.Agent().run(Weighted(prompt="x"))
    assert trace.rewards == {"a": 1.0, "b": 1.0, "unknown": None}
    assert trace.reward == 3.25


async def test_reward_returning_a_non_number_is_a_named_task_error():
    class Wordy(rk.Task):
        @rk.reward
        def verdict(self) -> float:
            return "good"  # type: ignore[return-value]

    trace = await rk.Agent().run(Wordy(prompt="x"))
    assert trace.rewards == {"verdict": None}
    assert trace.signal_errors["verdict"] == (
        "TaskError: reward 'verdict' returned str 'good'; return a number, a bool, None (missing), "
        "or a mapping of names to numbers"
    )


def test_reward_weight_must_be_a_number():
    with pytest.raises(TypeError, match="reward weight must be a number, got 'high'"):
        rk.reward(weight="high")
