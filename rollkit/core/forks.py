"""Forks: a new rollout that starts where another stood after turn k.

`await rollout.fork(turn=k)` (or `await rk.fork(trace, turn=k, agent=...)`
for a closed or saved trace) builds and opens a new rollout whose
conversation, trace prefix and budgets are those right after turn k of the
original: the messages up to turn k's reply (and the tool results that
answered it), the model calls, rewrites, segments and user turns up to it,
the turn and token totals, and the agent time charged so far, which the new
rollout's agent budget carries over (L9), and a stop that ended the exchange
right after turn k (a response @stop) so the fork starts stopped. The tool
call counters of the context are recounted from the prefix's tool results.
Its `trace.info["forked_from"]` is
`[original trace id, k]`. Step it with another user message, or fork with
another agent (model, sampling, limits); the original is never touched.

The fork runs in a fresh runtime and repeats the task's and the harness's
setup, so only a runtime that holds no state the turns changed can be forked
(`Runtime.forkable`: `LocalRuntime` yes, `SubprocessRuntime` no). A harness
with per-rollout state beyond `ctx.messages` restores it in `Harness.restore`.

Refused, with the limit named: a turn out of range, a failed trace (its
trajectory is incomplete), a trace imported from another tool whose task
cannot be rebuilt in rollkit (pass `task=`), a trace whose harness rewrote
history (turns and messages no longer line up), and a runtime that cannot
be copied.

The parts live below: the copied record in rollkit.core.prefix, opening a
fork in rollkit.core.rollout (`open_fork`). This module sits above the
agent: `rk.fork` takes an `rk.Agent` and runs the fork with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .agent import Agent
from .prefix import ForkError, Prefix, prefix_of, task_of
from .rollout import Rollout, open_fork
from .runtime import Runtime
from .task import Task
from .trace import Trace

__all__ = ["fork", "ForkError", "Prefix", "prefix_of", "start_from", "task_of"]


def start_from(rollout: Rollout, prefix: Prefix) -> None:
    """Make a built, unopened `rollout` start where `prefix` stood; the same
    as `rollout.start_from(prefix)`."""
    rollout.start_from(prefix)


async def fork(
    trace: Trace, turn: int, *, agent: Agent, task: Task | None = None, runtime: Runtime | None = None,
    before_open: Callable[[Rollout], Any] | None = None,
) -> Rollout:
    """A new rollout opened where `trace` stood after turn `turn` (see the
    module docstring). `task` defaults to the trace's own task, rebuilt from
    its class and data; `agent` runs the fork (the same or another).
    `before_open(rollout)` runs once the fork is built, before it opens (the
    notebook seats a person as its model there)."""
    if not isinstance(trace, Trace):
        raise TypeError(f"rk.fork takes a rk.Trace, got {type(trace).__name__}")
    if not isinstance(agent, Agent):
        raise TypeError(f"rk.fork needs agent=, the rk.Agent that runs the fork; got {type(agent).__name__}")
    return await open_fork(trace, turn, agent.spec, task if task is not None else task_of(trace), runtime,
                           before_open=before_open, made_by=agent)
