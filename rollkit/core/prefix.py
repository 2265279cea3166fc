"""Where a fork starts: a trace's record up to turn k, copied.

`prefix_of(trace, k)` checks that the trace can be forked after turn k and
deep-copies its record up to there into a `Prefix`: the messages up to turn
k's reply (and the tool results that answered it), the model calls,
rewrites, segments and user turns up to it, the agent time charged by then,
a stop that ended the exchange right after turn k, and the info values
recorded per turn (a toolset's state: `Trace.record_turn_info`) as they
stood after turn k. `task_of(trace)`
rebuilds a trace's task from its class and data. A `Rollout` installs a
prefix when it opens (`rollout.start_from(prefix)`); opening the fork is
the rollout's (`Rollout.fork`) and the agent's (`rk.fork`, rollkit.core.forks).
This module reads traces and builds nothing that runs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from .sums import sum_in_order
from .errors import UsageError
from .messages import AssistantMessage, Message, ToolMessage
from .session import LIMIT_STOPS
from .task import Task
from .trace import ModelCall, Rewrite, Segment, Trace, UserTurn, info_as_of

__all__ = ["ForkError", "Prefix", "prefix_of", "task_of"]

# Stop conditions the fork finds again by itself: limits are checked before
# every model call, the user-turn cap before every user turn.
_RECHECKED = {None, *LIMIT_STOPS}


class ForkError(UsageError, ValueError):
    """A fork that cannot be made as asked; the message names the limit."""


@dataclass
class Prefix:
    """What a fork starts from: the original's record up to turn `turn`."""

    source: str
    turn: int
    messages: list[Message]
    sampled: list[int]
    model_calls: list[ModelCall]
    request_rewrites: list[Rewrite]
    response_rewrites: list[Rewrite]
    segments: list[Segment]
    user_turns: list[UserTurn]
    agent_time: float
    next_call: int = 0
    stop_condition: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def fresh(self) -> Prefix:
        """A copy for one more rollout to start from: new lists, so each
        rollout extends its own, sharing the records in them, which nothing
        changes once recorded. Many continuations of one fork cost one deep
        copy of the original's record (prefix_of), not one each."""
        lists = {name: list(getattr(self, name)) for name in _LISTS}
        return Prefix(**{**self.__dict__, **lists, "info": dict(self.info)})


_LISTS = ("messages", "sampled", "model_calls", "request_rewrites", "response_rewrites", "segments", "user_turns")


def _check(trace: Trace, turn: Any) -> None:
    n = trace.num_turns
    if isinstance(turn, bool) or not isinstance(turn, int):
        raise ForkError(f"turn must be a whole number from 1 to {n} (a committed turn of trace {trace.id}), got {turn!r}")
    if n == 0:
        raise ForkError(f"cannot fork trace {trace.id}: it has no committed turn to fork after")
    if not 1 <= turn <= n:
        raise ForkError(f"cannot fork trace {trace.id} at turn {turn}: it has turns 1 to {n}")
    if trace.failed:
        error = trace.error
        raise ForkError(
            f"cannot fork trace {trace.id}: it failed ({error.type}: {error.message}); "  # type: ignore[union-attr]
            "a failed trajectory is incomplete"
        )
    if len(trace.sampled) != n:
        raise ForkError(
            f"cannot fork trace {trace.id}: its harness rewrote the conversation's history, so its messages "
            "no longer line up with its turns"
        )


def prefix_of(trace: Trace, turn: int) -> Prefix:
    """Deep copies of `trace`'s record up to and including turn `turn`."""
    _check(trace, turn)
    # model_calls is in the order calls ended; calls that ran side by side
    # may end out of their index order, so the cut is by position.
    committed = [i for i, c in enumerate(trace.model_calls) if c.committed]
    position = committed[turn - 1]
    call = trace.model_calls[position]
    calls = [c.model_copy(deep=True) for c in trace.model_calls[: position + 1]]
    kept = {c.index for c in calls}
    end = trace.sampled[turn - 1] + 1
    reply = trace.messages[end - 1]
    answered = {c.id for c in reply.tool_calls} if isinstance(reply, AssistantMessage) else set()
    while end < len(trace.messages) and isinstance(trace.messages[end], ToolMessage) \
            and trace.messages[end].tool_call_id in answered:
        end += 1
    segments = [s.model_copy(deep=True) for s in trace.segments if s.index <= call.segment]
    last = segments[-1]
    last.turns_added = turn - last.turns_before
    last.end = call.end
    last.charged = max(0.0, call.cum_agent_time - sum_in_order(s.charged for s in segments[:-1]))
    budget = trace.timeouts.get("agent")
    last.remaining = None if budget is None else max(0.0, budget - call.cum_agent_time)

    def upto(rewrites: list[Rewrite]) -> list[Rewrite]:
        return [r.model_copy() for r in rewrites if r.call is None or r.call in kept]

    # A stop that ended the exchange right after this turn (a response
    # @stop, a user's stop) is part of where it stood; limits and trace
    # @stops need no carrying, they are checked again before the next call.
    stopped = trace.stop_condition if turn == trace.num_turns and trace.stop_condition not in _RECHECKED else None
    messages = [m.model_copy(deep=True) for m in trace.messages[:end]]
    copies = {id(m): copy for m, copy in zip(trace.messages, messages)}
    for original, copied in zip(trace.model_calls, calls):
        if original.reply is not None and id(original.reply) in copies:
            copied.reply = copies[id(original.reply)]  # one object, as in the source: written once
    return Prefix(
        source=trace.id,
        turn=turn,
        messages=messages,
        sampled=list(trace.sampled[:turn]),
        model_calls=calls,
        request_rewrites=upto(trace.request_rewrites),
        response_rewrites=upto(trace.response_rewrites),
        segments=segments,
        user_turns=[u.model_copy(deep=True) for u in trace.user_turns if u.segment <= call.segment],
        agent_time=call.cum_agent_time,
        next_call=max(kept) + 1,
        stop_condition=stopped,
        info={**{k: trace.info[k] for k in ("example_id",) if k in trace.info}, **info_as_of(trace.info, turn)},
    )


def task_of(trace: Trace) -> Task:
    """The task of `trace`, rebuilt from its class and data."""
    ref = trace.task
    source = trace.info.get("format")
    if ref.module is None and source:
        # Imported from another tool (rollkit.interop.formats): its task (scorer,
        # environment, repository) lives in that tool, not in a rollkit class.
        raise ForkError(
            f"cannot fork trace {trace.id}: it was imported from a {source} file ({trace.info.get('file')}), and "
            f"its task {ref.type} {ref.key!r} is not a rollkit Task that can be rebuilt (that tool holds its "
            "scorer and environment); pass a rollkit task to run it on: rk.fork(trace, turn=k, agent=..., task=...)"
        )
    try:
        owner: Any = importlib.import_module(ref.module or "")
        for part in ref.type.split("."):
            owner = getattr(owner, part)
        if not (isinstance(owner, type) and issubclass(owner, Task)):
            raise TypeError(f"{ref.type} is not a rk.Task")
        return owner(owner.Data.model_validate(ref.data))
    except Exception as exc:
        raise ForkError(
            f"cannot rebuild the task of trace {trace.id} ({ref.module}.{ref.type}): {type(exc).__name__}: {exc}; "
            "pass it: rk.fork(trace, turn=k, agent=..., task=...)"
        ) from None


