"""No rollout, however it ends, leaves a process, a listening port or a task
running (L21, L8, L10, L3: close, abort, failure, cancellation, timeout).

Every scenario runs the real agent program in "spawn" mode: before anything
else it starts a grandchild (`sleep 300`) that it never cleans up, so the
check covers what a program leaves behind, not only the program itself."""

from __future__ import annotations

import asyncio

import pytest

import rollkit as rk

from helpers.processes import AGENT, exited, listening_ports, other_tasks, processes_in, zombies


class Echo(rk.Task):
    @rk.tool
    def shout(self, text: str) -> str:
        """Upper-case a text."""
        return text.upper()


def _agent(model, *, modes="spawn", persistent=False, **options):
    harness = rk.ProgramHarness(AGENT, env={"AGENT_MODE": modes}, persistent=persistent)
    return rk.Agent(model=model, harness=harness, runtime=rk.SubprocessRuntime, **options)


async def _leftovers(rollout, ports_before, tasks_before, pids):
    """What is still alive after the rollout: processes, ports, tasks."""
    alive = [pid for pid in pids if not await exited(pid)]
    workdir = getattr(rollout.runtime, "_workdir", None)
    stray = [pid for pid in (processes_in(workdir) if workdir else []) if not await exited(pid)]
    return {
        "processes": alive + stray,
        "ports": listening_ports() - ports_before,
        "tasks": other_tasks() - tasks_before,
        "workdir": workdir is not None and workdir.exists(),
        "zombies": zombies(),
    }


def _pids(rollout):
    pids = [run["pid"] for run in rollout.trace.info.get("program_runs", [])]
    runtime = rollout.runtime
    if runtime.alive and runtime.path("child.pid").exists():
        pids.append(int(runtime.read("child.pid")))
    return pids


NOTHING = {"processes": [], "ports": set(), "tasks": set(), "workdir": False, "zombies": []}


async def _wait_for_program_model_call(rollout, called):
    await called.wait()
    # The program's grandchild exists before its first model call.
    return _pids(rollout)


@pytest.mark.parametrize("ending", ["close", "abort"])
async def test_L21_closing_or_aborting_with_a_live_persistent_program_leaves_nothing(ending):
    ports, tasks = listening_ports(), other_tasks()
    rollout = _agent(rk.ScriptedModel(["hi"]), persistent=True).rollout(Echo(prompt="hello"), user=True)
    assert await rollout.open()
    assert await rollout.step() is True  # the program yielded and waits for the next turn
    pids = _pids(rollout)
    assert len(pids) == 2  # the program and its grandchild, both alive now
    trace = await (rollout.close() if ending == "close" else rollout.abort())
    assert trace.ok is (ending == "close")
    assert await _leftovers(rollout, ports, tasks, pids) == NOTHING


async def test_L23_failed_program_leaves_nothing():
    ports, tasks = listening_ports(), other_tasks()
    rollout = _agent(rk.ScriptedModel(["hi"]), modes="spawn,crash").rollout(Echo(prompt="hello"))
    assert await rollout.open()
    assert await rollout.step() is False
    pids = _pids(rollout)
    trace = await rollout.close()
    assert trace.error.type == "HarnessError"
    assert len(pids) == 2
    assert await _leftovers(rollout, ports, tasks, pids) == NOTHING


async def test_L8_cancelled_rollout_leaves_nothing():
    ports, tasks = listening_ports(), other_tasks()
    called, never = asyncio.Event(), asyncio.Event()

    async def stuck(request):
        called.set()
        await never.wait()

    rollout = _agent(rk.ScriptedModel(stuck)).rollout(Echo(prompt="hello"))
    assert await rollout.open()
    step = asyncio.ensure_future(rollout.step())
    pids = await _wait_for_program_model_call(rollout, called)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    await rollout.abort()  # what agent.run and Interaction do on a cancellation
    assert len(pids) == 2
    assert await _leftovers(rollout, ports, tasks, pids) == NOTHING


async def test_L10_timed_out_rollout_leaves_nothing():
    ports, tasks = listening_ports(), other_tasks()
    called, never = asyncio.Event(), asyncio.Event()
    pids = []

    async def stuck(request):
        pids.extend(_pids(rollout))
        called.set()
        await never.wait()

    # The budget outlasts the program's start (~2 s), so a model call is in flight when it runs out.
    rollout = _agent(rk.ScriptedModel(stuck), timeouts={"agent": 6}).rollout(Echo(prompt="hello"))
    assert await rollout.open()
    assert await rollout.step() is False
    trace = await rollout.close()
    assert trace.error.message.startswith("agent timeout")
    assert called.is_set()  # the program reached the model, so its call and grandchild were live
    assert len(pids) == 2
    pids += _pids(rollout)
    assert await _leftovers(rollout, ports, tasks, pids) == NOTHING


async def test_L6_open_failing_after_services_came_up_leaves_nothing():
    ports, tasks = listening_ports(), other_tasks()
    agent = _agent(rk.ScriptedModel(["hi"]), network=rk.NetworkPolicy(allow=["127.0.0.1"]))
    rollout = agent.rollout(Echo(prompt="hello"))
    assert await rollout.open() is False  # the tool and interception servers were up by then
    trace = await rollout.close()
    assert trace.error.type == "SandboxError"
    assert await _leftovers(rollout, ports, tasks, []) == NOTHING
