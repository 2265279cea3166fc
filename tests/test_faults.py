"""The fault suite: faults injected on purpose, every outcome typed, nothing
hurt that was not hit, nothing left behind.

1. Seeded injection over a few hundred rollouts run at once in three batches
   side by side (in-process agents, an OpenAIModel against a local fake
   provider, real programs behind the interception and MCP servers): each
   fault ends its own rollout with the error type, phase and message it
   should, and every rollout without a fault (its siblings) is unhurt.
2. Cancellation at each phase (boot, setup, agent, finalize, scoring,
   teardown) of a real program rollout, and `abort()` mid-step: after each,
   no asyncio task, child process, file descriptor, listening port or
   working folder is left.
3. Ctrl-C at seeded random moments of a real run in its own process: it
   exits within seconds, leaves nothing, and a resume completes the run.
4. A hanging test fails by itself (pytest-timeout) and says where.

The server-abuse, interrupt, cancellation and bad-input tests belong to the
suite too (marked `faults` in their own files). The counts land in the test
report's summary (`fault suite:` lines, tests/helpers/fault_report.py).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.evaluate_helpers import HERE, ToolSaid, gated_program_agent, said_tasks, start_gated
from helpers.fake_provider import FakeProvider
from helpers.fault_report import report

import rollkit as rk
from rollkit.core.outcome import Outcome

from helpers.processes import exited, listening_ports, other_tasks, processes_in, processes_marked

pytestmark = pytest.mark.faults

SEED = 15
PROGRAM = [sys.executable, str(HERE / "programs" / "plain.py"), "fault"]

# fault -> (outcome, phase of the error, a piece of its message)
IN_PROCESS = {
    "none": ("ok", None, None),
    "setup_raise": ("failed: TaskError", "setup", "setup fault"),
    "setup_timeout": ("failed: TaskError", "setup", "setup timeout"),
    "model_raise": ("failed: ProviderError", "agent", "RuntimeError: model fault"),
    "agent_timeout": ("failed: HarnessError", "agent", "agent timeout"),
    "tool_raise": ("ok", None, None),
    "scorer_raise": ("ok", None, None),
    "finalize_raise": ("failed: TaskError", "finalize", "finalize fault"),
}
PROVIDER = {
    "provider_ok": ("ok", None, None),
    "provider_500": ("failed: ProviderError", "agent", "500"),
    "provider_429": ("failed: ProviderError", "agent", "429"),
    "provider_malformed": ("failed: ProviderError", "agent", "sent an answer that"),
    "provider_drop": ("failed: ProviderError", "agent", "cannot reach the model endpoint"),
}
PROGRAMS = {
    "program_ok": ("ok", None, None),
    "program_exit": ("failed: HarnessError", "agent", "the program failed on purpose"),
    "program_hang": ("failed: HarnessError", "agent", "agent timeout"),
}
UNHURT = {"none", "provider_ok", "program_ok"}


class Faulty(rk.Task):
    """A task whose id names its fault (`<fault>-<n>`); its prompt carries
    the fault to the model, the fake provider and the program."""

    @property
    def fault(self) -> str:
        return self.data.id.rsplit("-", 1)[0]

    async def setup(self, ctx):  # type: ignore[no-untyped-def]
        if self.fault == "setup_raise":
            raise RuntimeError("setup fault")
        if self.fault == "setup_timeout":
            await asyncio.Event().wait()

    async def finalize(self, ctx):  # type: ignore[no-untyped-def]
        if self.fault == "finalize_raise":
            raise RuntimeError("finalize fault")

    @rk.tool
    def crash(self, text: str) -> str:
        """A tool that always fails."""
        raise RuntimeError("tool fault")

    @rk.reward
    def done(self, trace: rk.Trace) -> float:
        if self.fault == "scorer_raise":
            raise RuntimeError("scorer fault")
        return 1.0


async def _reply(request: rk.Request):  # type: ignore[no-untyped-def]
    asked = next(m.content for m in request.messages if m.role == "user")
    if asked == "model_raise":
        raise RuntimeError("model fault")
    if asked == "agent_timeout":
        await asyncio.Event().wait()
    if asked == "tool_raise" and not any(m.role == "tool" for m in request.messages):
        return rk.ScriptedModel.call("crash", text="x")
    return "done"


def _plan(rng: random.Random) -> list[Faulty]:
    """300 rollouts: the in-process faults most, the costly ones (a provider
    round trip, a real program) fewer; every kind at least twice."""
    tasks = []
    for kinds, n in ((IN_PROCESS, 220), (PROVIDER, 56), (PROGRAMS, 24)):
        chosen = list(kinds) * 2 + [rng.choice(list(kinds)) for _ in range(n - 2 * len(kinds))]
        rng.shuffle(chosen)
        for i, fault in enumerate(chosen):
            prompt = f"fake:{fault.removeprefix('provider_')}" if kinds is PROVIDER else fault
            tasks.append(Faulty(id=f"{fault}-{i}", prompt=prompt))
    return tasks


def _check(trace: rk.Trace, expected: dict[str, tuple]) -> str | None:
    """What is wrong with a faulty rollout's trace (None: as it should be)."""
    fault = trace.task.key.rsplit("-", 1)[0]
    outcome, phase, words = expected[fault]
    got = (Outcome.of(trace).label, trace.error.phase if trace.error else None)
    if got != (outcome, phase):
        return f"{trace.task.key}: {got} instead of {(outcome, phase)} ({trace.error})"
    if words and words not in trace.error.message:  # type: ignore[union-attr]
        return f"{trace.task.key}: {words!r} not in {trace.error.message!r}"  # type: ignore[union-attr]
    if fault == "scorer_raise":
        if trace.rewards != {"done": None} or "scorer fault" not in trace.signal_errors["done"]:
            return f"{trace.task.key}: the failed scorer shows as {trace.rewards}, {trace.signal_errors}"
    elif outcome == "ok" and trace.rewards != {"done": 1.0}:
        return f"{trace.task.key}: rewards {trace.rewards}"
    if fault == "tool_raise" and not any("tool fault" in str(m.content) for m in trace.messages if m.role == "tool"):
        return f"{trace.task.key}: the tool's failure is not in the conversation"
    return None


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_faults_seeded_injection_every_outcome_typed_siblings_unhurt(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    tasks = _plan(random.Random(SEED))
    provider = await FakeProvider().start()
    ports, running = listening_ports(), other_tasks()
    try:
        # Only a rollout that hangs for ever gets a deadline, and only on the phase where it hangs:
        # its outcome is the same whatever the clock does, and every other rollout has the default
        # deadlines, which a loaded machine cannot reach (a 2 s agent deadline for all of them once
        # cut a healthy program's rollout short under load: an untyped sibling).
        def agent(timeouts: dict | None = None, **kwargs) -> rk.Agent:  # type: ignore[no-untyped-def,type-arg]
            return rk.Agent(model=rk.ScriptedModel(_reply), timeouts=timeouts, **kwargs)

        program = {"harness": rk.ProgramHarness(PROGRAM), "runtime": rk.SubprocessRuntime}
        remote = rk.Agent(model=rk.OpenAIModel("m", base_url=provider.url, api_key="k", max_retries=1))
        hangs = {"setup_timeout": agent({"setup": 1.0}), "agent_timeout": agent({"agent": 2.0}),
                 "program_hang": agent({"agent": 2.0}, **program)}
        batches = [(agent(), tasks[:220], 32), (remote, tasks[220:276], 16), (agent(**program), tasks[276:], 4)]
        batches = [*((chosen, [t for t in batch if t.fault not in hangs], c) for chosen, batch, c in batches),
                   *((hung, held, len(held)) for fault, hung in hangs.items()
                     if (held := [t for t in tasks if t.fault == fault]))]
        results = await asyncio.gather(*(rk.evaluate_async(agent, batch, concurrency=c, progress=False)
                                         for agent, batch, c in batches))
    finally:
        await provider.stop()
    traces = [t for result in results for t in result.traces]
    expected = {**IN_PROCESS, **PROVIDER, **PROGRAMS}
    wrong = [w for t in traces if (w := _check(t, expected))]
    kinds = Counter(t.task.key.rsplit("-", 1)[0] for t in traces)
    siblings = [t for t in traces if t.task.key.rsplit("-", 1)[0] in UNHURT]
    hurt = [t.task.key for t in siblings if not t.ok]
    report(f"{len(traces)} rollouts with {len(kinds) - len(UNHURT)} kinds of fault (seed {SEED}): "
           f"{len(traces) - len(wrong)} typed as expected, {len(hurt)} of {len(siblings)} siblings hurt")
    assert len(traces) == 300 and set(kinds) == set(expected)
    assert wrong == [] and hurt == []
    statuses = {t.error.status for t in traces if t.task.key.startswith(("provider_500", "provider_429"))}
    assert statuses == {500, 429}
    assert listening_ports() - ports == set() and other_tasks() - running == set()
    assert list(tmp_path.iterdir()) == []  # every program's working folder removed


# Cancellation at each phase: a real program rollout with a tool (so the
# interception and MCP servers run) held at one phase until it is cancelled.

class _Held:
    def __init__(self, phase: str) -> None:
        self.phase = phase
        self.reached = asyncio.Event()
        self.release = asyncio.Event()  # only the teardown is ever let go

    async def hold(self, phase: str) -> None:
        if phase == self.phase:
            self.reached.set()
            await self.release.wait()


class HeldTask(Faulty):
    held: _Held | None = None

    async def setup(self, ctx):  # type: ignore[no-untyped-def]
        await type(self).held.hold("setup")  # type: ignore[union-attr]

    async def finalize(self, ctx):  # type: ignore[no-untyped-def]
        await type(self).held.hold("finalize")  # type: ignore[union-attr]

    @rk.reward
    async def done(self, trace: rk.Trace) -> float:  # type: ignore[override]
        await type(self).held.hold("scoring")  # type: ignore[union-attr]
        return 1.0


class HeldRuntime(rk.SubprocessRuntime):
    held: _Held | None = None

    async def _start(self) -> None:
        await super()._start()
        await type(self).held.hold("boot")  # type: ignore[union-attr]

    async def _stop(self) -> None:
        await type(self).held.hold("teardown")  # type: ignore[union-attr]
        await super()._stop()


def _held_agent(held: _Held) -> rk.Agent:
    async def reply(request: rk.Request) -> str:
        await held.hold("agent")
        return "done"

    HeldTask.held = HeldRuntime.held = held
    return rk.Agent(model=rk.ScriptedModel(reply), harness=rk.ProgramHarness(PROGRAM), runtime=HeldRuntime)


async def _whole(rollout: rk.Rollout) -> None:
    try:
        await rollout.open()
        await rollout.step()
        await rollout.close()
    except asyncio.CancelledError:
        await rollout.abort()  # what agent.run and a batch do on a cancellation
        raise


async def _leaks(rollout: rk.Rollout, before: dict, pids: list[int]) -> dict:
    return {
        "processes": [pid for pid in set(pids) if not await exited(pid)],
        "ports": listening_ports() - before["ports"],
        "tasks": other_tasks() - before["tasks"],
        "fds": _fds() - before["fds"],
        "folders": sorted(p.name for p in before["tmp"].iterdir()),
    }


NO_LEAKS = {"processes": [], "ports": set(), "tasks": set(), "fds": set(), "folders": []}
# Where the trace says a cancellation cut the rollout (open's phases leave no
# program to abort: open undoes what it built and the trace says so).
CUT_IN = {"boot": "boot", "setup": "setup", "agent": "agent", "finalize": "finalize", "scoring": "scoring"}


@pytest.mark.parametrize("phase", ["boot", "setup", "agent", "finalize", "scoring", "teardown", "abort-mid-step"])
async def test_faults_cancel_at_each_phase_leaves_nothing(phase, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    held = _Held("agent" if phase == "abort-mid-step" else phase)
    rollout = _held_agent(held).rollout(HeldTask(id="held-0", prompt="hello"))
    before = {"ports": listening_ports(), "tasks": other_tasks(), "fds": _fds(), "tmp": tmp_path}
    whole = asyncio.ensure_future(_whole(rollout) if phase != "abort-mid-step" else rollout.open())
    if phase == "abort-mid-step":
        assert await whole
        whole = asyncio.ensure_future(rollout.step())
    await held.reached.wait()
    workdir = rollout.runtime._workdir
    pids = [run["pid"] for run in rollout.trace.info.get("program_runs", [])] + processes_in(workdir)
    if phase == "abort-mid-step":
        await rollout.abort()
    else:
        whole.cancel()
        held.release.set()  # the teardown may go on (nothing else waits on it)
    with pytest.raises(asyncio.CancelledError):
        await whole
    trace = rollout.trace
    leaks = await _leaks(rollout, before, pids)
    report(f"cancelled at {phase} ({len(set(pids))} processes then): aborted_in={trace.aborted_in}, "
           f"{sum(len(v) for v in leaks.values())} left (tasks, processes, fds, ports, folders)")
    assert leaks == NO_LEAKS
    if phase in CUT_IN:
        assert (trace.aborted, trace.aborted_in, trace.ok) == (True, CUT_IN[phase], False)
    elif phase == "abort-mid-step":
        assert (trace.aborted, trace.aborted_in) == (True, "agent")
    else:  # cut in teardown: scored before, the teardown still ran to its end
        assert (trace.rewards, rollout.runtime.stopped) == ({"done": 1.0}, True)


# Ctrl-C at seeded random moments of a real run (its own process).

def _events_until(proc: subprocess.Popen[str], n: int) -> int:
    """Read the run's stdout until its n-th event (or its end); events seen."""
    seen = 0
    while seen < n:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            break
        seen += line.startswith("event ")
    return seen


@pytest.mark.timeout(600)
def test_faults_ctrl_c_at_random_moments_exits_fast_leaves_nothing_resume_completes(tmp_path):
    rng = random.Random(SEED)
    moments = sorted(rng.sample(range(1, 204), 6))  # a whole run has 204 events
    held = []
    for k, moment in enumerate(moments):
        tmp, out = tmp_path / f"tmp{k}", tmp_path / f"run{k}"
        tmp.mkdir()
        marker = f"rollkit-faults-{os.getpid()}-{k}"
        env = {"TMPDIR": str(tmp), "ROLLKIT_TEST_GATE": "open", "ROLLKIT_TEST_EVENTS": "1"}
        proc = start_gated("run-programs", out, marker, env=env)
        try:
            seen = _events_until(proc, moment)
            proc.send_signal(signal.SIGINT)
            start = time.monotonic()
            stdout, stderr = proc.communicate(timeout=60)
            took = time.monotonic() - start
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        last = stdout.splitlines()[-1]
        leftovers = processes_marked(marker) + [p.name for p in tmp.iterdir()]
        result = rk.evaluate(gated_program_agent(marker), said_tasks(6, kind=ToolSaid), repeats=2, concurrency=4,
                             out=out, resume=True, progress=False)
        held.append((moment, seen, last, took, leftovers, len(result), processes_marked(marker)))
        assert (proc.returncode, last) in {(3, "interrupted"), (0, "finished")}, stderr
        assert took < 20, f"the run took {took:.1f} s to exit after Ctrl-C"  # a hang, not a timing claim
        assert leftovers == [] and len(result) == 12 and processes_marked(marker) == []
    interrupted = sum(h[2] == "interrupted" for h in held)
    report(f"Ctrl-C at {len(moments)} seeded moments (events {moments}): {interrupted} interrupted, "
           f"slowest exit {max(h[3] for h in held):.2f} s, leftovers 0, every resume completed 12 of 12")


def test_faults_a_hanging_test_fails_by_itself_and_says_where(tmp_path):
    test = tmp_path / "test_hangs.py"
    test.write_text("import threading\n\n\ndef test_waits_forever():\n    threading.Event().wait()\n")
    run = subprocess.run([sys.executable, "-m", "pytest", str(test), "-p", "no:cacheprovider", "-o", "timeout=2",
                          "-q", "--rootdir", str(tmp_path)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert run.returncode == 1, run.stdout
    assert "Timeout" in run.stdout and "test_hangs.py" in run.stdout and "test_waits_forever" in run.stdout
    assert "1 failed" in run.stdout
    report("a hanging test fails after its timeout with its stack (pytest-timeout)")
