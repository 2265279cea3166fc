"""Hooks routed by the type of their parameter (L16-L20)."""

from __future__ import annotations

import pytest
from conftest import Recorder

import rollkit as rk
from rollkit.core.hooks import HookSet, collect_hooks


class Routed(rk.Task):
    @rk.intercept
    def shout(self, request: rk.Request) -> rk.Request | None:
        return None

    @rk.intercept
    def trim(self, response: rk.Response) -> rk.Response | None:
        return None

    @rk.stop
    def on_request(self, req: rk.Request) -> bool:
        return False

    @rk.stop
    def on_response(self, r: rk.Response) -> bool:
        return False

    @rk.stop
    def on_trace(self, t: rk.Trace) -> bool:
        return False


def test_L16_routing_is_decided_from_annotations_at_build():
    """Parameter names are deliberately unhelpful: only annotations route."""
    rollout = rk.Agent().rollout(Routed(prompt="x"))
    hooks = rollout.hooks
    assert [h.name for h in hooks.request_interceptors] == ["shout"]
    assert [h.name for h in hooks.response_interceptors] == ["trim"]
    assert [h.name for h in hooks.request_stops] == ["on_request"]
    assert [h.name for h in hooks.response_stops] == ["on_response"]
    assert [h.name for h in hooks.trace_stops] == ["on_trace"]


def test_L17_hook_with_two_boundaries_raises_at_build_naming_it():
    class Two(rk.Task):
        @rk.stop
        def confused(self, request: rk.Request, trace: rk.Trace) -> bool:
            return False

    with pytest.raises(TypeError, match=r"@stop hook 'confused' must annotate exactly one parameter as "
                                        r"Request, Response or Trace .*; found request and trace"):
        rk.Agent().rollout(Two(prompt="x"))


def test_L17_hook_with_no_boundary_raises_at_build():
    class NoBoundary(rk.Task):
        @rk.intercept
        def vague(self, task):
            return None

    with pytest.raises(TypeError, match=r"@intercept hook 'vague' must annotate exactly one parameter as "
                                        r"Request or Response .*; found none"):
        rk.Agent().rollout(NoBoundary(prompt="x"))


def test_L17_hook_parameter_that_cannot_be_filled_is_named():
    class Odd(rk.Task):
        @rk.reward
        def mystery(self, answer_key: str) -> float:
            return 1.0

    with pytest.raises(TypeError, match="hook 'mystery': parameter 'answer_key' cannot be filled"):
        rk.Agent().rollout(Odd(prompt="x"))


def test_L18_interceptor_cannot_hang_on_the_trace():
    class Peeking(rk.Task):
        @rk.intercept
        def peek(self, trace: rk.Trace) -> None:
            return None

    with pytest.raises(TypeError, match="@intercept hook 'peek' cannot take the Trace"):
        rk.Agent().rollout(Peeking(prompt="x"))


def test_L18_interceptor_cannot_read_the_trace_by_name_either():
    class Sneaky(rk.Task):
        @rk.intercept
        def sneak(self, request: rk.Request, trace) -> None:
            return None

    with pytest.raises(TypeError, match="@intercept hook 'sneak' cannot take the Trace"):
        rk.Agent().rollout(Sneaky(prompt="x"))


async def test_L19_stop_returning_non_bool_is_a_task_error():
    class Sloppy(rk.Task):
        @rk.stop
        def maybe(self, trace: rk.Trace):
            return "yes"

    trace = await rk.Agent().run(Sloppy(prompt="x"))
    assert trace.error.type == "TaskError"
    assert trace.error.message == "@stop 'maybe' must return a bool, got str: 'yes'"


async def test_L19_interceptor_returning_wrong_type_is_a_task_error():
    class Wrong(rk.Task):
        @rk.intercept
        def bad(self, response: rk.Response):
            return "just text"

    trace = await rk.Agent().run(Wrong(prompt="x"))
    assert trace.error.type == "TaskError"
    assert trace.error.message == "@intercept 'bad' must return a Response or None, got str"


async def test_L19_only_rewrites_that_changed_something_are_recorded():
    class Rewriting(rk.Task):
        @rk.intercept
        def noop(self, response: rk.Response) -> rk.Response:
            return response.model_copy()  # equal: no change

        @rk.intercept
        def redact(self, response: rk.Response) -> rk.Response | None:
            text = response.message.content or ""
            if "secret" not in text:
                return None
            message = response.message.model_copy(update={"content": text.replace("secret", "[redacted]")})
            return response.model_copy(update={"message": message})

    agent = rk.Agent(model=rk.ScriptedModel(["the secret is 42", "nothing here"]))
    rollout = agent.rollout(Rewriting(prompt="tell me"), user=True)
    await rollout.open()
    await rollout.step()
    await rollout.step("and now?")
    trace = await rollout.close()
    assert [(r.hook, r.boundary, r.call) for r in trace.response_rewrites] == [("redact", "response", 0)]
    assert trace.messages[1].content == "the [redacted] is 42"


async def test_L19_request_stop_refuses_the_call_and_response_stop_keeps_the_reply():
    class Guarded(rk.Task):
        @rk.stop
        def forbidden_word(self, request: rk.Request) -> bool:
            return "forbidden" in (request.messages[-1].content or "")

        @rk.stop
        def said_goodbye(self, response: rk.Response) -> bool:
            return "goodbye" in (response.message.content or "")

    agent = rk.Agent(model="echo")
    rollout = agent.rollout(Guarded(), user=True)
    await rollout.open()
    assert await rollout.step("forbidden topic") is False
    trace = await rollout.close()
    assert (trace.stop_condition, trace.num_turns) == ("forbidden_word", 0)

    rollout = agent.rollout(Guarded(), user=True)
    await rollout.open()
    assert await rollout.step("goodbye") is False
    trace = await rollout.close()
    assert (trace.stop_condition, trace.num_turns, trace.last_reply) == ("said_goodbye", 1, "You said: goodbye")


async def test_L20_sync_and_async_hooks_run_in_priority_then_name_order():
    order = Recorder()

    class Ordered(rk.Task):
        @rk.stop(priority=2)
        async def a_late(self, trace: rk.Trace) -> bool:
            order("a_late")
            return False

        @rk.stop(priority=1)
        def b_first(self, trace: rk.Trace) -> bool:
            order("b_first")
            return False

        @rk.stop(priority=1)
        async def a_first(self, trace: rk.Trace) -> bool:
            order("a_first")
            return False

    await rk.Agent().run(Ordered(prompt="x"))
    assert order.items == ["a_first", "b_first", "a_late"]


def test_L20_hookset_order_is_stable_across_builds():
    hooks = HookSet.build(collect_hooks(Routed(prompt="x"), "task"))
    again = HookSet.build(collect_hooks(Routed(prompt="y"), "task"))
    assert [h.name for h in hooks.trace_stops] == [h.name for h in again.trace_stops]


async def test_trace_stop_sees_the_whole_ledger_before_every_turn():
    class Budgeted(rk.Task):
        @rk.stop
        def two_replies(self, trace: rk.Trace) -> bool:
            return sum(1 for m in trace.messages if m.role == "assistant") >= 2

    rollout = rk.Agent(model="echo").rollout(Budgeted(), user=True)
    await rollout.open()
    assert await rollout.step("1") and await rollout.step("2")
    assert await rollout.step("3") is False
    trace = await rollout.close()
    assert trace.stop_condition == "two_replies" and trace.num_turns == 2


def test_harness_may_only_declare_metrics():
    class Meddling(rk.ChatHarness):
        @rk.stop
        def impatient(self, trace: rk.Trace) -> bool:
            return True

    with pytest.raises(TypeError, match="harness 'chat' declares @stop 'impatient'; a harness may only declare @metric"):
        rk.Agent(harness=Meddling())
