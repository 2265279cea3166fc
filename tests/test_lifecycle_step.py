"""step(): agent-time budget, limits, zero progress, what step returns (L9-L15)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import prompt_task, replies, ticking, virtual_time

import rollkit as rk
from rollkit.core.clock import FakeClock


async def test_L9_agent_time_is_charged_per_segment_and_waiting_costs_nothing():
    """Two interleaved interactions on one fake clock, B playing A's user: A's
    model takes 0.25 s a turn and B's 1 s; A is charged exactly its own
    segments, never the time B ran, and the same the other way round."""
    clock = FakeClock()
    fast = rk.Agent(model=ticking(rk.ScriptedModel(lambda r: "ok"), clock, 0.25),
                    timeouts=rk.RolloutTimeouts(agent=30), clock=clock)
    slow = rk.Agent(model=ticking(rk.ScriptedModel(lambda r: "sure"), clock, 1.0), clock=clock)
    async with fast.interaction(rk.Task()) as a, slow.interaction(rk.Task()) as b:
        message = "start"
        for _ in range(4):
            said = await a.turn(message)
            message = await b.turn(said)
    ta, tb = a.trace, b.trace
    assert [s.charged for s in ta.segments] == [0.25] * 4
    assert [s.charged for s in tb.segments] == [1.0] * 4
    assert (ta.agent_time, tb.agent_time) == (1.0, 4.0)
    # A's wall span holds three of B's turns, none of which was billed to A.
    assert ta.segments[-1].end - ta.segments[0].start == 1.0 + 3 * 1.0
    # The remaining budget goes down by exactly what each segment was charged.
    assert [s.remaining for s in ta.segments] == [29.75, 29.5, 29.25, 29.0]


async def test_L10_running_out_of_agent_time_is_an_agent_failure():
    with virtual_time():
        agent = rk.Agent(model=rk.ScriptedModel(lambda r: "late", delay=5), timeouts=rk.RolloutTimeouts(agent=0.2))
        rollout = agent.rollout(prompt_task())
        await rollout.open()
        assert await rollout.step() is False
        trace = await rollout.close()
    assert trace.error.type == "HarnessError"
    assert trace.error.message == "agent timeout: the agent used its whole 0.2s agent-time budget"
    assert trace.ok is False and trace.rewards == {}


async def test_L10_the_harness_own_timeout_stays_the_original_error():
    class IOTimeout(rk.Harness):
        async def segment(self, ctx, messages):
            raise TimeoutError("upstream socket read timed out")

    agent = rk.Agent(harness=IOTimeout(), timeouts=rk.RolloutTimeouts(agent=60))
    trace = await agent.run(prompt_task())
    assert trace.error.type == "HarnessError"
    assert "upstream socket read timed out" in trace.error.message
    assert "agent timeout" not in trace.error.message


@pytest.mark.parametrize(
    ("limit", "value", "aggregate"),
    [
        ("max_turns", 2, "num_turns"),
        ("max_input_tokens", 10, "num_input_tokens"),
        ("max_output_tokens", 8, "num_output_tokens"),
        ("max_total_tokens", 20, "num_total_tokens"),
    ],
)
async def test_L11_each_limit_reads_its_aggregate(limit, value, aggregate):
    agent = rk.Agent(model=rk.ScriptedModel(lambda r: "one two three four five"), limits={limit: value})
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    turns = 0
    while await rollout.step("a b c"):
        turns += 1
        assert turns < 50
    trace = await rollout.close()
    assert trace.stop_condition == limit
    assert getattr(trace, aggregate) >= value
    # The call before the last one was still under the limit (checked between turns).
    previous = trace.turns[-2] if len(trace.turns) > 1 else None
    if previous is not None:
        assert getattr(previous, "cum_" + aggregate.removeprefix("num_")) < value


async def test_L12_token_limit_is_soft_by_one_turn():
    """The turn that crosses the limit completes; the next call is refused."""
    long_reply = " ".join(["word"] * 10)  # 11 output tokens
    agent = rk.Agent(model=rk.ScriptedModel(lambda r: long_reply), limits=rk.RolloutLimits(max_output_tokens=5))
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    assert await rollout.step("go") is True  # crossed 5 during this turn, still committed
    assert rollout.trace.num_output_tokens == 11
    assert await rollout.step("more") is False
    trace = await rollout.close()
    assert trace.num_turns == 1 and trace.stop_condition == "max_output_tokens"


async def test_L13_limit_refuses_turn_exactly_like_a_stop():
    class Counting(rk.ChatHarness):
        refusals: list[str] = []

        async def segment(self, ctx, messages):
            try:
                await super().segment(ctx, messages)
            except rk.Refused as refused:
                self.refusals.append(refused.condition)
                raise

    harness = Counting()
    agent = rk.Agent(model="echo", harness=harness, limits=rk.RolloutLimits(max_turns=1))
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    assert await rollout.step("a") is True
    assert await rollout.step("b") is False
    trace = await rollout.close()
    assert harness.refusals == ["max_turns"]
    assert trace.stop_condition == "max_turns"
    assert trace.errors == [] and trace.ok is True


async def test_L14_zero_progress_segment_ends_exchange():
    class Idle(rk.Harness):
        async def segment(self, ctx, messages):
            return None  # yields without a single model call

    rollout = rk.Agent(harness=Idle()).rollout(prompt_task(), user=True)
    await rollout.open()
    assert await rollout.step() is False
    assert rollout.is_open is False
    assert await rollout.step("are you there?") is False
    trace = await rollout.close()
    assert trace.ok is True and trace.num_turns == 0 and trace.stop_condition is None
    assert len(trace.segments) == 1


async def test_L15_step_returns_false_after_failure_and_runs_nothing_when_not_open():
    calls = []

    def model(request):
        calls.append(len(request.messages))
        raise RuntimeError("provider exploded")

    agent = rk.Agent(model=rk.ScriptedModel(model))
    rollout = agent.rollout(rk.Task(), user=True)
    assert await rollout.step("before open") is False
    assert calls == []
    await rollout.open()
    assert await rollout.step("hi") is False
    assert rollout.trace.error.type == "ProviderError"
    await rollout.close()
    assert await rollout.step("after close") is False
    assert calls == [1]


async def test_L15_step_returns_true_while_waiting_for_the_user():
    rollout = rk.Agent(model=replies("first", "second")).rollout(prompt_task(), user=True)
    await rollout.open()
    assert await rollout.step() is True
    assert rollout.is_open is True
    assert await rollout.step("next") is True
    trace = await rollout.close()
    assert [m.content for m in trace.messages] == ["hello", "first", "next", "second"]
    assert trace.sampled == [1, 3]


async def test_L15_step_after_close_returns_false_without_running():
    rollout = rk.Agent().rollout(prompt_task())
    await rollout.open()
    await rollout.step()
    await rollout.close()
    turns = rollout.trace.num_turns
    assert await rollout.step("hello?") is False
    assert rollout.trace.num_turns == turns


async def test_cancelled_step_charges_its_time_and_can_be_aborted():
    entered = asyncio.Event()

    async def model(request):
        entered.set()
        await asyncio.Event().wait()

    rollout = rk.Agent(model=rk.ScriptedModel(model)).rollout(prompt_task())
    await rollout.open()
    stepping = asyncio.create_task(rollout.step())
    await entered.wait()
    stepping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stepping
    segment = rollout.trace.segments[0]
    assert segment.end is not None and segment.charged > 0
    trace = await rollout.abort()
    assert trace.aborted and all(span.end is not None for span in trace.phases.values())
