"""Cancellation never leaves anything half done (L8, L21, L25): a start cut
short is finished then undone, a cleanup runs to its end however often its
caller is cancelled, a close cut before its score marks the trace aborted
where it was cut, and a runtime cancelled while stopping still removes its
folder. Each test here failed (or hung) before the fix it names."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from helpers.fault_report import report

import rollkit as rk
from rollkit.core.cancellation import finish
from rollkit.runs.runner import run_rollout

from helpers.processes import PROGRAMS, exited, listening_ports, other_tasks, processes_marked, zombies

pytestmark = pytest.mark.faults  # part of the fault suite (tests/test_faults.py)

PLAIN = [sys.executable, str(PROGRAMS / "plain.py")]


class Shout(rk.Task):
    @rk.tool
    def shout(self, text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    @rk.reward
    def answered(self, trace: rk.Trace) -> float:
        return float(bool(trace.last_reply))


def _program_agent(model=None, *args: str, runtime=rk.SubprocessRuntime) -> rk.Agent:
    harness = rk.ProgramHarness([*PLAIN, *(args or ("swallow-error",))])
    return rk.Agent(model=model or rk.ScriptedModel(["done"]), harness=harness, runtime=runtime)


# ---- the mechanism ----------------------------------------------------------------


async def test_finish_waits_for_the_action_however_often_the_caller_is_cancelled():
    gate, ended = asyncio.Event(), []

    async def cleanup():
        await gate.wait()
        ended.append("cleanup")

    caller = asyncio.ensure_future(finish(cleanup()))
    for _ in range(3):
        await asyncio.sleep(0)
        caller.cancel()
    await asyncio.sleep(0)
    assert not caller.done()  # three cancellations, and it still waits
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ended == ["cleanup"]


async def test_finish_undoes_a_start_that_completed_after_the_caller_was_cancelled():
    gate, log = asyncio.Event(), []

    async def start():
        await gate.wait()
        log.append("started")
        return "server"

    async def undo(server):
        log.append(f"stopped {server}")

    caller = asyncio.ensure_future(finish(start(), undo=undo))
    await asyncio.sleep(0)
    caller.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert log == ["started", "stopped server"]


async def test_finish_returns_the_result_or_the_error_when_nobody_cancels():
    async def value():
        return 7

    async def broken():
        raise OSError("disk full")

    assert await finish(value()) == 7
    with pytest.raises(OSError, match="disk full"):
        await finish(broken())


async def test_a_timeout_around_finish_still_reads_as_a_timeout_once_the_action_ended():
    gate = asyncio.Event()

    async def slow():
        await gate.wait()

    async def release_later():
        await asyncio.sleep(0.05)  # past the 10 ms deadline: the fault under test, not a wait
        gate.set()

    releasing = asyncio.ensure_future(release_later())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await finish(slow())
    assert gate.is_set()  # it waited for the action before the timeout took effect
    await releasing


# ---- item 1: a cancelled open loses no wakeup -----------------------------------------


async def test_L8_open_cancelled_at_each_await_leaves_no_socket_behind_the_loops_back():
    """Before the fix, cancelling the open while the interception server (1st
    await) or the MCP server (5th) was starting closed a socket still
    registered with the selector; the next program's exit was never seen and
    the next rollout hung forever."""
    ports, tasks = listening_ports(), other_tasks()
    cut_in = []
    for step in range(1, 40):  # step 0 would cancel the open before it begins
        rollout = _program_agent().rollout(Shout(prompt="hello"))
        opening = asyncio.ensure_future(rollout.open())
        for _ in range(step):
            await asyncio.sleep(0)
        if opening.done():
            assert opening.result() is True
            await rollout.close()
            break
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        assert rollout.closed and rollout.trace.aborted
        cut_in.append(rollout.trace.aborted_in)
        # The next rollout's program must be seen to exit.
        async with asyncio.timeout(60):
            trace = await _program_agent().run(Shout(prompt="hello"))
        assert trace.ok, trace.error
    else:
        pytest.fail("the open never finished within 40 loop steps")
    assert len(cut_in) >= 5 and set(cut_in) <= {"boot", "setup"}
    assert listening_ports() - ports == set()
    assert other_tasks() - tasks == set()
    assert zombies() == []  # the watchdogs told to exit were reaped


# ---- item 4: a close cut before its score ---------------------------------------------


@pytest.mark.parametrize("phase", ["finalize", "scoring"])
async def test_L25_close_cancelled_before_its_score_is_aborted_where_it_was_cut(phase):
    reached, never = asyncio.Event(), asyncio.Event()
    stopped = []

    class Slow(rk.Task):
        async def finalize(self, ctx):
            if phase == "finalize":
                reached.set()
                await never.wait()

        @rk.reward
        async def slow(self, trace: rk.Trace) -> float:
            reached.set()
            await never.wait()
            return 1.0

    class Runtime(rk.LocalRuntime):
        async def _stop(self):
            stopped.append(True)

    rollout = rk.Agent(model=rk.ScriptedModel(["hi"]), runtime=Runtime).rollout(Slow(prompt="x"))
    assert await rollout.open()
    await rollout.step()
    closing = asyncio.ensure_future(rollout.close())
    await reached.wait()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    trace = rollout.trace
    assert (trace.aborted, trace.aborted_in, trace.ok) == (True, phase, False)
    assert trace.scored_reward is None
    assert stopped == [True]  # torn down all the same
    assert all(span.end is not None for span in trace.phases.values())
    assert await rollout.close() is trace and trace.ok is False


async def test_L21_close_cancelled_during_teardown_finishes_it_and_keeps_the_score():
    stopping, release = asyncio.Event(), asyncio.Event()
    stopped = []

    class Runtime(rk.LocalRuntime):
        async def _stop(self):
            stopping.set()
            await release.wait()
            stopped.append(True)

    class Scored(rk.Task):
        @rk.reward
        def one(self) -> float:
            return 1.0

    rollout = rk.Agent(model=rk.ScriptedModel(["hi"]), runtime=Runtime).rollout(Scored(prompt="x"))
    await rollout.open()
    await rollout.step()
    closing = asyncio.ensure_future(rollout.close())
    await stopping.wait()
    closing.cancel()
    await asyncio.sleep(0)
    assert not closing.done()  # the teardown is not cut
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert stopped == [True]
    assert (rollout.trace.ok, rollout.trace.aborted, rollout.trace.reward) == (True, False, 1.0)


async def test_abort_records_the_phase_it_cut_and_none_between_segments():
    rollout = rk.Agent(model=rk.ScriptedModel(["hi", "again"])).rollout(rk.Task(prompt="x"), user=True)
    await rollout.open()
    await rollout.step()
    trace = await rollout.abort()
    assert (trace.aborted, trace.aborted_in) == (True, None)

    called, never = asyncio.Event(), asyncio.Event()

    async def stuck(request):
        called.set()
        await never.wait()

    rollout = rk.Agent(model=rk.ScriptedModel(stuck)).rollout(rk.Task(prompt="x"))
    await rollout.open()
    stepping = asyncio.ensure_future(rollout.step())
    await called.wait()
    trace = await rollout.abort()
    with pytest.raises(asyncio.CancelledError):
        await stepping
    assert (trace.aborted, trace.aborted_in, trace.error.type) == (True, "agent", "HarnessError")


# ---- item 5: a runtime cancelled while it stops ---------------------------------------


async def test_subprocess_runtime_cancelled_while_stopping_still_kills_and_removes_its_folder():
    """Before the fix the runtime was marked stopped before its folder went:
    a cancellation during the program's kill grace left the folder (and a
    retried stop did nothing)."""
    runtime = rk.SubprocessRuntime(kill_grace=1.0)
    await runtime.start()
    workdir = runtime.workdir
    program = await runtime.launch(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"], stdin=False)
    stopping = asyncio.ensure_future(runtime.stop())
    for _ in range(3):
        await asyncio.sleep(0)
    assert not stopping.done()  # waiting out the kill grace: SIGTERM is ignored
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert not workdir.exists()
    assert await exited(program.pid)
    await runtime.stop()  # again: nothing left to do, nothing raised


# ---- item 2 (its core): a rollout's abort survives a second cancellation ------------


async def test_L32_run_rollout_cancelled_twice_still_ends_its_program_and_folder():
    """Ctrl-C cancelled the workers twice; the second cancellation cut the
    rollout's abort (only shielded, not waited for), so run_rollout returned
    while the program still ran and its folder was on disk."""
    called, never = asyncio.Event(), asyncio.Event()
    marker = f"rollkit-test-{os.getpid()}-cancel-twice"
    made: list[rk.SubprocessRuntime] = []

    def runtime() -> rk.SubprocessRuntime:
        made.append(rk.SubprocessRuntime())
        return made[-1]

    async def stuck(request):
        called.set()
        await never.wait()

    agent = _program_agent(rk.ScriptedModel(stuck), "spawn-answer", marker, runtime=runtime)
    running = asyncio.ensure_future(run_rollout(agent, Shout(prompt="hello"), {"rollout_id": "t#0"}))
    await called.wait()
    workdir = made[0].workdir
    assert len(processes_marked(marker)) == 2  # the program and its grandchild live
    failed = asyncio.Event()
    agent.subscribe(lambda event: failed.set() if event.kind == "failure" else None)
    running.cancel()
    await failed.wait()  # the step took the first cancellation; the abort is under way
    for _ in range(3):
        await asyncio.sleep(0)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert processes_marked(marker) == []
    assert not workdir.exists()


# ---- issue 23: the teardown deadline reaches every stop ----------------------------------


@pytest.mark.parametrize("cancelled", [False, True], ids=["plain", "cancelled"])
async def test_a_stop_that_never_returns_is_abandoned_at_the_teardown_deadline(cancelled):
    """Before the fix the bounded wait's cancellation was swallowed by
    `finish` inside Runtime.stop, and close() hung forever, cancelled or not."""
    stopping, never = asyncio.Event(), asyncio.Event()

    class Runtime(rk.LocalRuntime):
        async def _stop(self):
            stopping.set()
            await never.wait()

    class Scored(rk.Task):
        @rk.reward
        def one(self) -> float:
            return 1.0

    agent = rk.Agent(model=rk.ScriptedModel(["hi"]), runtime=Runtime, timeouts=rk.RolloutTimeouts(teardown=0.2))
    rollout = agent.rollout(Scored(prompt="x"))
    await rollout.open()
    await rollout.step()
    closing = asyncio.ensure_future(rollout.close())
    await stopping.wait()
    if cancelled:
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
    else:
        await closing
    trace = rollout.trace
    assert [w for w in trace.warnings if "runtime stop" in w] == [
        "runtime stop did not finish within the 0.2s teardown deadline: abandoned (its processes killed)"
    ]
    assert (trace.ok, trace.reward, trace.completed) == (True, 1.0, True)
    assert rollout.runtime.stopped and rollout.runtime._stopping.cancelled()
    report(f"a runtime stop that never returns ({'cancelled close' if cancelled else 'close'}): abandoned at the "
           "teardown deadline, warned on the trace, score kept")


async def test_a_subprocess_stop_that_overruns_kills_its_programs_and_removes_its_folder():
    """A program that ignores SIGTERM, a kill grace longer than the teardown
    deadline: the stop is abandoned at the deadline and the group killed."""
    runtime = rk.SubprocessRuntime(kill_grace=60.0)
    await runtime.start()
    workdir = runtime.workdir
    program = await runtime.launch(["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"], stdin=False)
    # Stop only once the trap is set: a SIGTERM before it ends the program at once (a race on a loaded machine).
    assert await program.process.stdout.readline() == b"ready\n"
    with rk.core.cancellation.deadline(0.2):
        with pytest.raises(rk.core.cancellation.Overrun):
            await runtime.stop()
    await program._reap()
    assert program.returncode == -9
    assert not workdir.exists()
    assert zombies() == []
