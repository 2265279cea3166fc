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


# Every limit kind (L11): the turn and token limits and the dollar one, read
# from the aggregate of the same name. The scripted model is priced (a dollar
# limit needs a price) at toy rates, so a turn costs cents.
_TOY_PRICES = {"input": 1000.0, "output": 2000.0}  # dollars per million tokens
_LIMITS = [
    ("max_turns", 2, "num_turns"),
    ("max_input_tokens", 10, "num_input_tokens"),
    ("max_output_tokens", 8, "num_output_tokens"),
    ("max_total_tokens", 20, "num_total_tokens"),
    ("max_cost_usd", 0.1, "cost_usd"),
]


@pytest.fixture
def priced():
    """A scripted model with a price, forgotten after the test (prices are per process)."""
    rk.prices({"priced-toy": _TOY_PRICES})
    yield lambda reply: rk.ScriptedModel(lambda r: reply, name="priced-toy")
    rk.prices({"priced-toy": None})


def _counting_refusals() -> rk.ChatHarness:
    class Counting(rk.ChatHarness):
        refusals: list[str] = []

        async def segment(self, ctx, messages):
            try:
                await super().segment(ctx, messages)
            except rk.Refused as refused:
                self.refusals.append(refused.condition)
                raise

    return Counting()


@pytest.mark.parametrize(("limit", "value", "aggregate"), _LIMITS)
async def test_L11_each_limit_reads_its_aggregate(limit, value, aggregate, priced):
    agent = rk.Agent(model=priced("one two three four five"), limits={limit: value})
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    turns = 0
    while await rollout.step("a b c"):
        turns += 1
        assert turns < 50
    trace = await rollout.close()
    assert trace.stop_condition == limit and trace.limits[limit] == value
    assert getattr(trace, aggregate) >= value
    # The call before the last one was still under the limit (checked between turns).
    previous = trace.turns[-2] if len(trace.turns) > 1 else None
    if previous is not None:
        assert getattr(previous, "cum_" + aggregate.removeprefix("num_")) < value


# The first turn ("go", then a reply of 11 output tokens) crosses each of
# these; what it used: 2 input tokens, 11 output, 13 in all, and at the toy
# rates (2 * 1000 + 11 * 2000) / 1e6 dollars.
_CROSSED_BY_ONE_TURN = [
    ("max_input_tokens", 1, "num_input_tokens", 2),
    ("max_output_tokens", 5, "num_output_tokens", 11),
    ("max_total_tokens", 5, "num_total_tokens", 13),
    ("max_cost_usd", 0.01, "cost_usd", 0.024),
]


@pytest.mark.parametrize(("limit", "value", "aggregate", "used"), _CROSSED_BY_ONE_TURN)
async def test_L12_token_and_dollar_limits_are_soft_by_one_turn(limit, value, aggregate, used, priced):
    """The turn that crosses the limit completes; the next call is refused."""
    agent = rk.Agent(model=priced(" ".join(["word"] * 10)), limits={limit: value})
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    assert await rollout.step("go") is True  # crossed the limit during this turn, still committed
    assert getattr(rollout.trace, aggregate) == pytest.approx(used)
    assert await rollout.step("more") is False
    trace = await rollout.close()
    assert trace.num_turns == 1 and trace.stop_condition == limit


@pytest.mark.parametrize(("limit", "value"), [("max_turns", 1), *((c[0], c[1]) for c in _CROSSED_BY_ONE_TURN)])
async def test_L13_limit_refuses_turn_exactly_like_a_stop(limit, value, priced):
    harness = _counting_refusals()
    agent = rk.Agent(model=priced(" ".join(["word"] * 10)), harness=harness, limits={limit: value})
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    assert await rollout.step("a") is True
    assert await rollout.step("b") is False
    trace = await rollout.close()
    assert harness.refusals == [limit]
    assert trace.stop_condition == limit and trace.outcome.kind == "stopped"
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
