"""Task sets, agents and a runner script for the batch-evaluation tests.

Importable from tests (pytest puts tests/ on sys.path) and from subprocesses
started with tests/ on PYTHONPATH: `rollkit eval evaluate_helpers:TASKS ...`
and `python evaluate_helpers.py run OUT` (the kill/interrupt tests) use it.

Gated runs: with ROLLKIT_TEST_GATE=block, the model never answers tasks whose
index is 2 mod 3 and prints `blocked <task key>#<n>` when it starts waiting,
so a test knows exactly when every worker is stuck and what has finished.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import rollkit as rk

HERE = Path(__file__).resolve().parent


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


def said_tasks(n: int = 6, prefix: str = "said") -> list[Said]:
    return [Said(id=f"{prefix}-{i}", prompt=f"say {i}") for i in range(n)]


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


def main(argv: list[str]) -> int:
    """`python evaluate_helpers.py run OUT`: a gated run of 6 tasks x 2
    repeats at concurrency 4 into OUT; prints `aborted <rollout id>` for every
    rollout aborted by an interrupt, `interrupted` on Ctrl-C."""
    if argv[:1] != ["run"] or len(argv) != 2:
        print("usage: evaluate_helpers.py run OUT", file=sys.stderr)
        return 2
    agent = gated_agent()

    def on_event(event: rk.Event) -> None:
        if event.kind == "closed" and event.data.get("aborted"):
            print(f"aborted {event.rollout_id}", flush=True)

    agent.subscribe(on_event)
    try:
        rk.evaluate(agent, said_tasks(6), repeats=2, concurrency=4, out=argv[1], progress=False)
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
