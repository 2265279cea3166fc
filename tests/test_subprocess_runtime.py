"""SubprocessRuntime: working folder, clean environment, process-group kills,
files, network policy refusal, owned and borrowed lifetimes (L3, L6)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

import pytest

import rollkit as rk
from rollkit.programs.subprocess_runtime import SubprocessRuntime

from helpers.processes import escaping_program, exited, gone, kill_marked, processes_in, processes_marked

# A shell that leaves a grandchild behind, tells its pid, then waits on it.
SPAWNER = ["sh", "-c", "sleep 300 & echo $! > child.pid; echo ready; wait"]


@pytest.fixture
async def runtime():
    rt = SubprocessRuntime()
    await rt.start()
    yield rt
    await rt.stop()


async def test_working_folder_lives_from_start_to_stop():
    rt = SubprocessRuntime()
    await rt.start()
    folder = rt.workdir
    assert folder.is_dir() and folder.name.startswith("rollkit-")
    rt.write("sub/note.txt", "hello")
    assert rt.read("sub/note.txt") == "hello"
    assert rt.read("sub/note.txt", binary=True) == b"hello"
    await rt.stop()
    assert not folder.exists()
    with pytest.raises(rk.SandboxError, match="has no working folder: start it first"):
        rt.workdir


async def test_files_cannot_leave_the_folder(runtime):
    with pytest.raises(rk.SandboxError, match=r"path '../escape' leaves the runtime's working folder"):
        runtime.write("../escape", "x")
    with pytest.raises(rk.SandboxError, match="leaves the runtime's working folder"):
        runtime.read("/etc/passwd")
    with pytest.raises(FileNotFoundError, match="'missing.txt' is not a file in the runtime's working folder"):
        runtime.read("missing.txt")


async def test_programs_get_a_clean_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "host-secret-key")
    monkeypatch.setenv("ROLLKIT_TEST_PASSED", "passed-through")
    rt = SubprocessRuntime(env={"GIVEN": "given"}, pass_env=["ROLLKIT_TEST_PASSED"])
    await rt.start()
    try:
        script = "import json, os; print(json.dumps(dict(os.environ)))"
        done = await rt.run([sys.executable, "-c", script], env={"PER_CALL": "1"})
        env = json.loads(done.stdout)
        assert "OPENAI_API_KEY" not in env
        assert env["ROLLKIT_TEST_PASSED"] == "passed-through"
        assert (env["GIVEN"], env["PER_CALL"]) == ("given", "1")
        assert env["HOME"] == str(rt.workdir) and env["PATH"] == os.environ["PATH"]
        assert set(env) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "HOME", "TMPDIR",
                            "ROLLKIT_TEST_PASSED", "GIVEN", "PER_CALL"}
    finally:
        await rt.stop()


async def test_run_returns_status_and_output(runtime):
    done = await runtime.run(["sh", "-c", "cat; echo oops >&2; exit 3"], input="from stdin")
    assert (done.returncode, done.stdout, done.stderr) == (3, "from stdin", "oops\n")
    assert runtime.programs == []


async def test_run_timeout_kills_the_whole_group(runtime):
    with pytest.raises(TimeoutError, match="program 'sh' did not finish within 0.5s and was killed"):
        await runtime.run(["sh", "-c", "sleep 300 & sleep 300 & wait"], timeout=0.5)
    assert [pid for pid in processes_in(runtime.workdir) if not await exited(pid)] == []


async def _spawned(runtime):
    program = await runtime.launch(SPAWNER)
    assert await program.process.stdout.readline() == b"ready\n"
    return program, int(runtime.read("child.pid"))


async def test_exit_of_a_program_takes_its_orphans_along(runtime):
    program = await runtime.launch(["sh", "-c", "sleep 300 & echo $! > child.pid; echo ready"])
    assert await program.process.stdout.readline() == b"ready\n"
    child = int(runtime.read("child.pid"))
    assert await program.wait() == 0
    assert await exited(child)


async def test_stop_kills_running_programs_and_their_children():
    rt = SubprocessRuntime(kill_grace=0.5)
    await rt.start()
    program, child = await _spawned(rt)
    folder = rt.workdir
    assert not gone(child)
    await rt.stop()
    assert gone(program.pid) and await exited(child)
    assert not folder.exists()


async def test_cancelled_run_kills_its_program(runtime):
    fifo = runtime.path("ready.fifo")
    os.mkfifo(fifo)
    script = "sleep 300 & echo $! > child.pid; echo ready > ready.fifo; wait"
    task = asyncio.ensure_future(runtime.run(["sh", "-c", script]))
    # Opening the fifo blocks until the program writes to it: the program is up.
    assert await asyncio.to_thread(fifo.read_text) == "ready\n"
    child = int(runtime.read("child.pid"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await exited(child)
    assert [pid for pid in processes_in(runtime.workdir) if not await exited(pid)] == []


async def test_missing_or_non_executable_programs_are_named(runtime):
    with pytest.raises(FileNotFoundError, match="program 'no-such-program-xyz' was not found on the program's PATH"):
        await runtime.launch(["no-such-program-xyz"])
    with pytest.raises(FileNotFoundError, match=r"program './nothing.sh' does not exist"):
        await runtime.launch(["./nothing.sh"])
    runtime.write("plain.sh", "echo hi")
    with pytest.raises(PermissionError, match=r"program './plain.sh' is not executable .*chmod \+x it"):
        await runtime.launch(["./plain.sh"])
    runtime.write("ok.sh", "#!/bin/sh\necho hi\n", executable=True)
    assert (await runtime.run(["./ok.sh"])).stdout == "hi\n"


async def test_L6_network_restriction_is_refused_at_open():
    agent = rk.Agent(runtime=SubprocessRuntime, network=rk.NetworkPolicy(block=["10.0.0.0/8"]))
    rollout = agent.rollout(rk.Task(prompt="hi"))
    assert await rollout.open() is False
    trace = await rollout.close()
    assert trace.error.type == "SandboxError"
    assert "SubprocessRuntime cannot enforce a network policy (asked: allow=[], block=['10.0.0.0/8'])" in (
        trace.error.message)
    assert rollout.runtime.stopped


async def test_L6_network_policy_in_force_is_recorded_on_the_trace():
    agent = rk.Agent(runtime=SubprocessRuntime)
    trace = await agent.run(rk.Task(prompt="hi"))
    assert trace.ok is True
    assert trace.info["network"] == {
        "enforced": False, "allow": [], "block": [], "kept": [],
        "runtime": "subprocess", "isolation": "none: programs share the host's network",
    }


async def test_L3_owned_runtime_is_fresh_per_rollout_and_removed_at_close():
    folders = []

    class Look(rk.Harness):
        async def segment(self, ctx, messages):
            folders.append(ctx.runtime.workdir)
            await ctx.complete(messages)

    agent = rk.Agent(model=rk.ScriptedModel(["ok"]), harness=Look(), runtime=SubprocessRuntime)
    await asyncio.gather(agent.run(rk.Task(prompt="a")), agent.run(rk.Task(prompt="b")))
    assert len(set(folders)) == 2
    assert not any(folder.exists() for folder in folders)


async def test_L3_borrowed_runtime_stays_up_and_a_stopped_one_is_the_owners_bug():
    rt = SubprocessRuntime()
    await rt.start()
    agent = rk.Agent(model=rk.ScriptedModel(["ok"]))
    trace = await agent.run(rk.Task(prompt="a"), runtime=rt)
    assert trace.ok is True and rt.alive and rt.workdir.is_dir()
    await rt.stop()
    with pytest.raises(rk.LifetimeError, match="its owner must start it before lending it"):
        await agent.rollout(rk.Task(prompt="b"), runtime=rt).open()


@pytest.mark.parametrize("exit_seen", ["before the wait", "whenever"])
async def test_grandchild_that_leaves_the_group_does_not_hang_the_run(runtime, monkeypatch, exit_seen):
    """A setsid grandchild keeps the program's pipes open and escapes the group
    kill (documented): the run still returns the program's own exit and output.
    asyncio's wait() awaits the pipes only if called before its child watcher
    reported the exit; "before the wait" makes the watcher win that race (it
    won it on a loaded CI machine, and the run hung on the open pipes)."""
    marker = f"rollkit-escapee-{uuid.uuid4().hex}"
    if exit_seen == "before the wait":
        seen = asyncio.Event()
        original_wait = rk.programs.subprocess_runtime.Program.wait

        async def wait_once_asyncio_saw_the_exit(self):
            await seen.wait()
            assert self.process.returncode == 0  # asyncio knows: its wait() would no longer await the pipes
            return await original_wait(self)

        report = rk.programs.subprocess_runtime._OutputWatch.process_exited

        def reported(self):
            report(self)
            seen.set()

        monkeypatch.setattr(rk.programs.subprocess_runtime.Program, "wait", wait_once_asyncio_saw_the_exit)
        monkeypatch.setattr(rk.programs.subprocess_runtime._OutputWatch, "process_exited", reported)
    try:
        async with asyncio.timeout(30):  # a guard against a hang, not a timing assertion
            done = await runtime.run(escaping_program(marker))
        escaped = processes_marked(marker)
    finally:
        killed = await kill_marked(marker)
    assert (done.returncode, done.stdout) == (0, "started\n")
    assert len(escaped) == 1 and killed == escaped  # it did escape: the case is real
    assert all(gone(pid) for pid in escaped)
    assert runtime.programs == []


async def test_input_a_grandchild_holds_and_never_reads_does_not_hang_the_run(runtime, monkeypatch):
    """A setsid grandchild holds the program's stdin, the program exits without
    reading its 1 MiB of input: the run returns its exit and output, the rest
    of the input dropped. asyncio's wait() would await the input pipe, which
    cannot close while it holds unwritten bytes; its child watcher is held
    back here until the pipes are closed, so a wait() asked before would hang
    (before the fix, half the runs did, by the watcher's timing)."""
    import asyncio.base_subprocess

    marker = f"rollkit-escapee-{uuid.uuid4().hex}"
    closed = asyncio.Event()
    close_pipes = rk.programs.subprocess_runtime.Program._close_pipes
    report = asyncio.base_subprocess.BaseSubprocessTransport._process_exited
    reports = []

    def close_then_say(self):
        close_pipes(self)
        closed.set()

    def report_once_closed(self, returncode):
        async def later():
            await closed.wait()
            report(self, returncode)

        reports.append(asyncio.ensure_future(later()))

    monkeypatch.setattr(rk.programs.subprocess_runtime.Program, "_close_pipes", close_then_say)
    monkeypatch.setattr(asyncio.base_subprocess.BaseSubprocessTransport, "_process_exited", report_once_closed)
    try:
        async with asyncio.timeout(30):  # a guard against a hang, not a timing assertion
            done = await runtime.run(escaping_program(marker, holding="input"), input=b"x" * (1 << 20))
        escaped = processes_marked(marker)
    finally:
        killed = await kill_marked(marker)
        for held in reports:
            held.cancel()
    assert (done.returncode, done.stdout) == (0, "started\n")
    assert len(reports) == 1 and reports[0].done()  # the exit was reported, once the pipes were closed
    assert len(escaped) == 1 and killed == escaped  # it did escape, holding the input: the case is real
    assert runtime.programs == []


async def test_cancelled_launch_neither_hangs_nor_leaves_the_group_behind(runtime):
    # Cancelled inside asyncio's create_subprocess_exec, before the program's
    # pipes are connected, CPython 3.11 kills the shell alone and then waits
    # forever for pipes that never connect. Cancel at each early loop turn:
    # every launch must end, and with it everything the shell started.
    script = "sleep 300 & echo $! > child.$$; wait"
    for turns in range(12):
        task = asyncio.ensure_future(runtime.launch(["sh", "-c", script], stdin=False))
        for _ in range(turns):
            await asyncio.sleep(0)  # one loop turn each: no waiting on time
        task.cancel()
        async with asyncio.timeout(20):  # a hang fails here instead of stalling the suite
            try:
                program = await task
            except asyncio.CancelledError:
                pass
            else:
                await program.kill(grace=0)
        assert runtime.programs == []
    async with asyncio.timeout(20):
        assert [pid for pid in processes_in(runtime.workdir) if not await exited(pid)] == []
