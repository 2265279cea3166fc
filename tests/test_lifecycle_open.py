"""open(): boot, prompt check, setup deadline, services, initial rewrite (L1-L8)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import CountingRuntime, PromptTask, Recorder, prompt_task, replies, virtual_time

import rollkit as rk


async def test_L1_three_actions_and_many_steps():
    """L1: open, step any number of times, close; abort is the escape path."""
    agent = rk.Agent(model="echo")
    rollout = agent.rollout(rk.Task(), user=True)
    assert await rollout.open() is True
    assert await rollout.step("one") is True
    assert await rollout.step("two") is True
    assert await rollout.step("three") is True
    trace = await rollout.close()
    assert [s.turns_added for s in trace.segments] == [1, 1, 1]
    assert trace.last_reply == "You said: three"
    assert trace.ok is True and rollout.closed
    other = agent.rollout(prompt_task())
    await other.open()
    aborted = await other.abort()
    assert aborted.aborted is True and aborted.ok is False and aborted.rewards == {}


async def test_L2_five_phase_spans_all_ended_and_agent_time_split():
    """L2: five spans with start and end; agent time = model time + harness
    time, on virtual time: the harness works 0.5 s, the model answers in 0.25 s."""

    class SlowHarness(rk.ChatHarness):
        async def segment(self, ctx, messages):
            await asyncio.sleep(0.5)  # harness work, not model time
            await super().segment(ctx, messages)

    class Scored(rk.Task):
        @rk.reward
        def one(self) -> float:
            return 1.0

    with virtual_time() as clock:
        agent = rk.Agent(model=replies("hi", delay=0.25), harness=SlowHarness(), clock=clock)
        trace = await agent.run(Scored(prompt="go"))
    assert list(trace.phases) == ["boot", "setup", "agent", "finalize", "scoring"]
    for span in trace.phases.values():
        assert span.end is not None and span.end >= span.start
    agent_span = trace.phases["agent"]
    assert agent_span.end - agent_span.start == 0.75
    assert (trace.agent_time, trace.model_time, trace.harness_time) == (0.75, 0.25, 0.5)


async def test_L2_failed_open_leaves_no_span_open():
    class Broken(rk.Task):
        def setup(self, ctx):
            raise ValueError("no")

    trace = await rk.Agent().run(Broken(prompt="x"))
    assert set(trace.phases) == {"boot", "setup"}
    assert all(span.end is not None for span in trace.phases.values())


async def test_L3_owned_runtime_started_and_stopped(recorder: Recorder):
    agent = rk.Agent(runtime=lambda: CountingRuntime(recorder))
    trace = await agent.run(prompt_task())
    assert recorder.items == ["runtime.start", "runtime.stop"]
    assert trace.ok is True


async def test_L3_stopped_borrowed_runtime_raises_to_caller_and_is_not_a_failure():
    runtime = CountingRuntime()
    await runtime.start()
    await runtime.stop()
    rollout = rk.Agent().rollout(prompt_task(), runtime=runtime)
    with pytest.raises(rk.LifetimeError, match="borrowed runtime .* is not running; its owner must start it"):
        await rollout.open()
    assert rollout.trace.errors == []


async def test_L3_borrowed_runtime_stopped_by_owner_mid_run_is_not_recorded():
    runtime = CountingRuntime()
    await runtime.start()
    rollout = rk.Agent().rollout(rk.Task(), runtime=runtime, user=True)
    assert await rollout.open()
    assert await rollout.step("hi")
    await runtime.stop()  # the owner's lifetime bug
    with pytest.raises(rk.LifetimeError, match="stopped by its owner while the rollout ran"):
        await rollout.step("again")
    assert rollout.trace.errors == []
    assert runtime.log.items == ["runtime.start", "runtime.stop"]  # never stopped twice


async def test_L3_borrowed_runtime_is_not_torn_down(recorder: Recorder):
    runtime = CountingRuntime(recorder)
    await runtime.start()
    trace = await rk.Agent().run(prompt_task(), runtime=runtime)
    assert trace.ok and runtime.alive
    assert recorder.items == ["runtime.start"]
    await runtime.stop()


async def test_L4_no_prompt_and_no_user_fails_before_setup(recorder: Recorder):
    class Silent(rk.Task):
        def setup(self, ctx):
            recorder("task.setup")

    rollout = rk.Agent().rollout(Silent())
    assert await rollout.open() is False
    assert recorder.items == []
    error = rollout.trace.error
    assert error.type == "TaskError"
    assert "has no prompt and no user to open the conversation" in error.message


async def test_L4_user_may_open_a_promptless_task():
    rollout = rk.Agent().rollout(rk.Task(), user=True)
    assert await rollout.open()
    with pytest.raises(ValueError, match="the user speaks first: pass the opening message"):
        await rollout.step()
    assert await rollout.step("hello") is True  # nothing was lost by the bad call
    assert rollout.trace.transcript == "user: hello\nassistant: You said: hello"
    await rollout.close()


class _SlowSetupTask(rk.Task):
    delay = 0.0

    async def setup(self, ctx):
        await asyncio.sleep(self.delay)


class _SlowSetupHarness(rk.ChatHarness):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def setup(self, ctx):
        await asyncio.sleep(self.delay)


async def test_L5_setup_deadline_is_shared_and_names_the_slow_one():
    """Each setup alone fits in 1 s; together they do not, and harness.setup is blamed."""
    task = _SlowSetupTask(prompt="x")
    task.delay = 0.5
    with virtual_time():
        agent = rk.Agent(harness=_SlowSetupHarness(0.75), timeouts=rk.RolloutTimeouts(setup=1.0))
        trace = await agent.run(task)
    assert trace.error.type == "HarnessError"
    assert "setup timeout: harness.setup was still running when the shared 1.0s setup deadline" in trace.error.message


async def test_L5_slow_task_setup_is_a_task_error():
    task = _SlowSetupTask(prompt="x")
    task.delay = 5
    with virtual_time():
        agent = rk.Agent(harness=_SlowSetupHarness(0), timeouts=rk.RolloutTimeouts(setup=0.2))
        trace = await agent.run(task)
    assert trace.error.type == "TaskError"
    assert trace.error.message.startswith("setup timeout: task.setup was still running")


async def test_L6_services_come_up_then_network_policy_keeps_framework_routes(recorder: Recorder):
    class Service(rk.Toolset):
        async def start(self, ctx):
            recorder("toolset.start")

        async def stop(self):
            recorder("toolset.stop")

    class ServingHarness(rk.ChatHarness):
        async def serve(self, ctx):
            recorder("harness.serve")
            return {"interception": "http://127.0.0.1:9/v1"}

        async def segment(self, ctx, messages):
            recorder("segment")
            await super().segment(ctx, messages)

    class PolicyRuntime(rk.LocalRuntime):
        async def _enforce(self, policy, keep):
            recorder("policy")
            return {"enforced": True, "block": policy.block, "kept": keep}

    class WithTools(rk.Task):
        toolsets = [Service()]

    agent = rk.Agent(harness=ServingHarness(), runtime=PolicyRuntime, network=rk.NetworkPolicy(block=["*"]))
    trace = await agent.run(WithTools(prompt="x"))
    assert recorder.items == ["toolset.start", "harness.serve", "policy", "segment", "toolset.stop"]
    assert trace.info["network"] == {"enforced": True, "block": ["*"], "kept": ["http://127.0.0.1:9/v1"]}


async def test_L6_runtime_refuses_a_policy_it_cannot_enforce():
    agent = rk.Agent(network=rk.NetworkPolicy(allow=["example.org"]))
    trace = await agent.run(prompt_task())
    assert trace.error.type == "SandboxError"
    assert "local runtime cannot enforce a network policy" in trace.error.message


async def test_L7_initial_prompt_rewritten_once_before_the_harness_sees_it():
    seen: list[str] = []

    class Polite(rk.Task):
        @rk.intercept
        def please(self, request: rk.Request) -> rk.Request | None:
            last = request.messages[-1]
            if last.content.endswith("please"):
                return None
            messages = [*request.messages[:-1], rk.UserMessage(content=last.content + " please")]
            return request.model_copy(update={"messages": messages})

    def model(request: rk.Request) -> str:
        seen.append(request.messages[-1].content)
        return "ok"

    trace = await rk.Agent(model=rk.ScriptedModel(model)).run(Polite(prompt="add 2 and 2"))
    assert seen == ["add 2 and 2 please"]
    assert [(r.hook, r.call) for r in trace.request_rewrites] == [("please", None)]
    assert trace.messages[0].content == "add 2 and 2 please"


async def test_L8_exception_in_open_is_captured_and_open_returns_false():
    class Broken(rk.Task):
        def setup(self, ctx):
            raise KeyError("missing fixture")

    rollout = rk.Agent().rollout(Broken(prompt="x"))
    assert await rollout.open() is False
    error = rollout.trace.error
    assert (error.type, error.phase) == ("TaskError", "setup")
    assert error.message == "task.setup: KeyError: 'missing fixture'"
    assert "KeyError" in error.traceback
    trace = await rollout.close()
    assert trace.ok is False


async def test_L8_cancellation_during_open_aborts_then_reraises(recorder: Recorder):
    entered = asyncio.Event()

    class Hangs(rk.Task):
        async def setup(self, ctx):
            entered.set()
            await asyncio.Event().wait()

    rollout = rk.Agent(runtime=lambda: CountingRuntime(recorder)).rollout(Hangs(prompt="x"))
    opening = asyncio.create_task(rollout.open())
    await entered.wait()
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert recorder.items == ["runtime.start", "runtime.stop"]
    assert rollout.trace.aborted is True and rollout.closed
    assert all(span.end is not None for span in rollout.trace.phases.values())


async def test_open_twice_is_a_clear_error():
    rollout = rk.Agent().rollout(PromptTask(prompt="x"))
    await rollout.open()
    with pytest.raises(RuntimeError, match="already opened; build a new one"):
        await rollout.open()
    await rollout.close()
