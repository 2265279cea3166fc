"""Shared helpers for the notebook-layer tests (frames, plots, display, panel).

Imported explicitly by those test files (tests/conftest.py belongs to the
core). Everything is built from the embedded models, so each trace is
deterministic and made in milliseconds.
"""

from __future__ import annotations

import asyncio

import rollkit as rk
from rollkit.examples import Arithmetic, arithmetic_tasks, demo_agent


class Slow(Arithmetic):
    """A task whose one metric outlives the scoring deadline."""

    @rk.metric
    async def slow(self) -> float:
        await asyncio.Event().wait()  # never set: only the scoring timeout ends it
        return 1.0


class Raises(Arithmetic):
    """A task whose one metric raises."""

    @rk.metric
    def broken(self) -> float:
        raise ValueError("cannot measure this")


async def run(agent: rk.Agent, task: rk.Task) -> rk.Trace:
    return await agent.run(task)


async def assorted_traces() -> dict[str, rk.Trace]:
    """One trace of each kind a report must handle."""
    tasks = arithmetic_tasks(3)
    out = {
        "ok": await demo_agent().run(tasks[0]),
        "wrong": await demo_agent().run(tasks[1]),
        "stopped": await demo_agent(limits={"max_turns": 1}).run(tasks[0]),
        "failed": await rk.Agent(model=rk.ScriptedModel([], name="broken")).run(tasks[0]),
        "raised": await demo_agent().run(Raises(tasks[0].data)),
        "timed_out": await demo_agent(timeouts={"scoring": 0.05}).run(Slow(tasks[2].data)),
    }
    rollout = demo_agent().rollout(tasks[2])
    await rollout.open()
    await rollout.step()
    out["aborted"] = await rollout.abort()
    return out


def two_segment_trace_agent() -> rk.Agent:
    return demo_agent(limits={"max_turns": 6, "max_total_tokens": 500})
