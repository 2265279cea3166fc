"""Task sets, agents and a runner script for the batch-evaluation tests.

Importable from tests (pytest puts tests/ on sys.path) and from subprocesses
started with tests/ on PYTHONPATH: `rollkit eval helpers.evaluate_helpers:TASKS ...`
and `python helpers/evaluate_helpers.py run OUT` (the kill/interrupt tests) use it.

Gated runs: with ROLLKIT_TEST_GATE=block, the model never answers tasks whose
index is 2 mod 3 and prints `blocked <task key>#<n>` when it starts waiting,
so a test knows exactly when every worker is stuck and what has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import rollkit as rk

HERE = Path(__file__).resolve().parents[1]  # tests/: on PYTHONPATH for subprocesses


class Said(rk.Task):
    """Ask the model to say the task's number; reward 1 when it does."""

    @rk.reward
    def said(self, trace: rk.Trace) -> float:
        return float(self.data.id.split("-")[-1] in trace.last_reply)

    @rk.metric
    def reply_chars(self, trace: rk.Trace) -> float:
        return float(len(trace.last_reply))


class BadHook(Said):
    @rk.stop
    def two_boundaries(self, request: rk.Request, response: rk.Response) -> bool:  # wrong shape (L17)
        return False


class BrokenSetup(Said):
    async def setup(self, ctx):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk on fire")


class ToolSaid(Said):
    """Said with a tool, so a program's rollout also runs an MCP tool server."""

    @rk.tool
    def shout(self, text: str) -> str:
        """Upper-case a text."""
        return text.upper()


def said_tasks(n: int = 6, prefix: str = "said", kind: type[Said] = Said) -> list[Said]:
    return [kind(id=f"{prefix}-{i}", prompt=f"say {i}") for i in range(n)]


def _number(request: rk.Request) -> int:
    prompt = next(m.content for m in request.messages if m.role == "user")
    return int(prompt.split()[-1])


def _odd_wrong(request: rk.Request) -> str:
    # Deterministic and varied: right on even numbers, wrong on odd ones.
    n = _number(request)
    return f"number {n}" if n % 2 == 0 else "no idea"


def said_agent(**overrides) -> rk.Agent:  # type: ignore[no-untyped-def]
    return rk.Agent(model=rk.ScriptedModel(_odd_wrong, name="odd-wrong"), **overrides)


_printed = 0


async def _gated(request: rk.Request) -> str:
    n = _number(request)
    if os.environ.get("ROLLKIT_TEST_GATE") == "block" and n % 3 == 2:
        global _printed
        _printed += 1
        print(f"blocked said-{n}#{_printed}", flush=True)
        await asyncio.Event().wait()  # never answers: stays in flight until killed
    return f"number {n}"


def gated_agent() -> rk.Agent:
    return rk.Agent(model=rk.ScriptedModel(_gated, name="gated"))


PLAIN = [sys.executable, str(HERE / "programs" / "plain.py")]


class _SecondSignal(logging.Filter):
    """Notices the run's log lines for the first and the second signal (a
    filter, not a handler, so the lines still reach stderr as they would)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = self.second_seen = False
        self.second: asyncio.Event | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if ": stopping the evaluation" in message:
            self.first = True
        elif " again: killed " in message:
            self.second_seen = True
            if self.second is not None:
                self.second.set()
        return True


_signals = _SecondSignal()


class HeldRuntime(rk.SubprocessRuntime):
    """With ROLLKIT_TEST_HOLD_CLEANUP=1, a runtime stopped after the first
    signal waits for the second one before it stops (at most 60 s): the
    cleanup is then surely still running when a second Ctrl-C comes, which
    two signals sent back to back cannot promise (the kernel merges a
    pending SIGINT with the next one)."""

    async def _stop(self) -> None:
        if os.environ.get("ROLLKIT_TEST_HOLD_CLEANUP") == "1" and _signals.first:
            if _signals.second is None:
                _signals.second = asyncio.Event()
            if not _signals.second_seen:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(60):
                        await _signals.second.wait()
        await super()._stop()


logging.getLogger("rollkit").addFilter(_signals)


def gated_program_agent(marker: str) -> rk.Agent:
    """The gated model behind a real program in a SubprocessRuntime; each
    program leaves a grandchild carrying `marker` in its argv."""
    harness = rk.ProgramHarness([*PLAIN, "spawn-answer", marker])
    return rk.Agent(model=rk.ScriptedModel(_gated, name="gated"), harness=harness, runtime=HeldRuntime)


class GatedSetup(Said):
    """With ROLLKIT_TEST_GATE=block, tasks numbered 2 mod 3 never finish
    setup (and say so on stdout): a way to hold `rollkit eval` mid-run."""

    async def setup(self, ctx):  # type: ignore[no-untyped-def]
        n = int(self.data.id.split("-")[-1])
        if os.environ.get("ROLLKIT_TEST_GATE") == "block" and n % 3 == 2:
            print(f"blocked {self.data.id}", flush=True)
            await asyncio.Event().wait()


# Module attributes for `rollkit eval MODULE:TASKS`.
TASKS = said_tasks(4, prefix="cli")
GATED = [GatedSetup(id=f"gated-{i}", prompt=f"say {i}") for i in range(6)]
EMPTY: list[rk.Task] = []
NOT_TASKS = [1, 2, 3]


def make_tasks() -> list[Said]:
    return said_tasks(3, prefix="made")


async def _gated_chat(request: rk.Request) -> str:
    """First turn: say the number; after the user spoke, say goodbye, except
    that with ROLLKIT_TEST_GATE=block tasks numbered 2 mod 3 never answer."""
    n = _number(request)
    if not any(m.role == "user" and m.content == "thanks" for m in request.messages):
        return f"number {n}"
    if os.environ.get("ROLLKIT_TEST_GATE") == "block" and n % 3 == 2:
        global _printed
        _printed += 1
        print(f"blocked said-{n}#{_printed}", flush=True)
        await asyncio.Event().wait()
    return "goodbye"


def _thankful(request: rk.Request) -> str:
    # The played user: thanks for the number, done after the goodbye.
    return "<<done>>" if "goodbye" in (request.messages[-1].content or "") else "thanks"


def chat_user() -> rk.AgentUser:
    return rk.AgentUser(rk.Agent(model=rk.ScriptedModel(_thankful, name="thankful")), persona="You are polite.")


def chat_agent() -> rk.Agent:
    return rk.Agent(model=rk.ScriptedModel(_gated_chat, name="gated-chat"))


def start_gated(mode: str, out: Path, *extra: str, env: dict[str, str] | None = None,
                shell_job: bool = False) -> subprocess.Popen[str]:
    """`python helpers/evaluate_helpers.py MODE OUT [EXTRA...]` with the gate closed.
    `shell_job=True` starts it as a `&` job of a non-interactive shell, which
    starts it with SIGINT ignored; its pid is then in OUT's sibling
    `<OUT>.pid` once the shell has started it."""
    env = {**os.environ, "ROLLKIT_TEST_GATE": "block", **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, str(HERE / "helpers" / "evaluate_helpers.py"), mode, str(out), *extra]
    if shell_job:
        argv = ["sh", "-c", f'"$@" & echo $! > {shlex.quote(str(out))}.pid; wait $!', "sh", *argv]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_blocked(proc: subprocess.Popen[str], workers: int = 4) -> list[str]:
    """Read the run's stdout until each of its `workers` holds a rollout
    that never answers; the lines read."""
    lines: list[str] = []
    while sum(line.startswith("blocked") for line in lines) < workers:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            proc.wait()
            raise AssertionError(f"the run ended early (rc={proc.returncode}): {proc.stderr.read()}")  # type: ignore[union-attr]
        lines.append(line.strip())
    return lines


def sigkill(proc: subprocess.Popen[str]) -> int:
    """Kill the run with SIGKILL (a crash), reap it, close its pipes; its status."""
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    return proc.returncode


def main(argv: list[str]) -> int:
    """`python helpers/evaluate_helpers.py run OUT`: a gated run of 6 tasks x 2
    repeats at concurrency 4 into OUT; prints `aborted <rollout id>` for every
    rollout aborted by an interrupt, `interrupted` on Ctrl-C.
    `run-users OUT`: the same with a model playing the user (chat_user).
    `run-programs OUT MARKER`: the same with each rollout a real program
    (gated_program_agent); with ROLLKIT_TEST_EVENTS=1 it also prints
    `event <kind>` for every event of the run (the fault suite picks a
    moment to interrupt by them)."""
    modes = {"run": 2, "run-users": 2, "run-programs": 3}
    if not argv or modes.get(argv[0]) != len(argv):
        print("usage: helpers/evaluate_helpers.py run|run-users OUT | run-programs OUT MARKER", file=sys.stderr)
        return 2
    if argv[0] == "run-users":
        rk.evaluate(chat_agent(), said_tasks(6), repeats=2, concurrency=4, out=argv[1], progress=False, user=chat_user())
        print("finished", flush=True)
        return 0
    agent = gated_program_agent(argv[2]) if argv[0] == "run-programs" else gated_agent()
    events = os.environ.get("ROLLKIT_TEST_EVENTS") == "1"

    def on_event(event: rk.Event) -> None:
        if events:
            print(f"event {event.kind}", flush=True)
        if event.kind == "closed" and event.data.get("aborted"):
            print(f"aborted {event.rollout_id}", flush=True)

    agent.subscribe(on_event)
    try:
        tasks = said_tasks(6, kind=ToolSaid if argv[0] == "run-programs" else Said)
        rk.evaluate(agent, tasks, repeats=2, concurrency=4, out=argv[1], progress=False)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 3
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# ---- Ray: a gate actor and a harness that reports to it -----------------------


class Gate:
    """Made a Ray actor by the test (`ray.remote(Gate)`): rollouts on the
    workers report what happened ("started", "cleaned up"), and the test
    awaits a count instead of sleeping."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.changed = asyncio.Condition()

    async def arrive(self, what: str) -> None:
        async with self.changed:
            self.seen.append(what)
            self.changed.notify_all()

    async def wait_for(self, what: str, count: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.seen.count(what) >= count)

    def count(self, what: str) -> int:
        return self.seen.count(what)


class NodeReportingHarness(rk.ChatHarness):
    """Tells the gate which Ray node its rollout runs on ("started on
    NODE_ID"), then waits for the gate's "go" before it talks to the model:
    the test acts (kills an actor, removes a node) while rollouts run."""

    def __init__(self, gate) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.gate = gate

    async def segment(self, ctx, messages):  # type: ignore[no-untyped-def]
        import ray

        await self.gate.arrive.remote(f"started on {ray.get_runtime_context().get_node_id()}")
        await self.gate.wait_for.remote("go", 1)
        return await super().segment(ctx, messages)


class GateHarness(rk.ChatHarness):
    """Reports to the gate when its segment starts, then never answers; its
    cleanup (run when the rollout is aborted) takes a moment, as stopping a
    container does, and reports when it is done."""

    def __init__(self, gate) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.gate = gate

    async def segment(self, ctx, messages):  # type: ignore[no-untyped-def]
        await self.gate.arrive.remote("started")
        await asyncio.Event().wait()

    async def cleanup(self, ctx):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.3)  # the slow teardown under test, not a wait for the test's sake
        await self.gate.arrive.remote("cleaned up")


class Unpicklable(Said):
    """A task that cannot travel to a Ray worker (say, it holds a live connection)."""

    def __reduce_ex__(self, protocol):  # type: ignore[no-untyped-def]
        raise TypeError("this task holds a live connection and cannot be pickled")
