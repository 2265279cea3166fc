"""Users: whoever speaks between segments, and running a rollout with one.

A rollout is one or more segments; between them the user has the turn. The
design this project follows treats the user as just another agent, so the
user is an object with one question to answer: given the trace so far (its
`last_reply` is what the agent just said), what does the user say next, or
is the conversation over? `User.next(trace)` returns the next message(s) (a
str, a `rk.UserMessage`, a list of messages, or a `UserReply`) or None for
"over". Built in:

- `ScriptedUser([...])`: the turns in order (the i-th answers after i user
  turns), or a function of the trace, sync or async;
- `RecordedUser(trace)`: replays the user turns of a saved trace, comparing
  each agent reply with the recorded one (`similarity`) and flagging where
  the agent diverged; then goes on, stops, or hands over to another user;
- `AgentUser(agent, persona=...)` (rollkit.core.agent_user, above the
  agent, since it runs one): a model plays the user in a rollout of its own.

`converse(rollout, user)` runs an opened rollout's exchange to its end: the
user's "over" (None), a `UserStop` (a clean stop with its condition), a stop
or limit, a failure, a zero-progress segment (L14), or the `max_user_turns`
limit: once the user has spoken that often, the next time it would have the
turn the run stops with stop_condition "max_user_turns", before the user is
asked (so an AgentUser spends nothing that is never delivered). Every turn is recorded on
`trace.user_turns`, so any run with a user, a person typing in a notebook
included, can be replayed by a `RecordedUser`.

A user that raises or returns something that is not a turn fails the rollout
with a `TaskError` naming the user and what it returned: the world cut the
exchange short, so the run is a failure and is not scored (L23).

This module drives segments through the rollout's public `step`, `stop` and
`fail`; it owns no lifecycle rule of its own.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from .errors import TaskError
from .messages import Message, to_messages
from .task import Task
from .trace import Trace

from .rollout import RolloutState

if TYPE_CHECKING:
    from .rollout import Rollout

__all__ = [
    "User", "UserReply", "UserStop", "ScriptedUser", "RecordedUser", "converse", "drive",
    "similarity", "DEFAULT_THRESHOLD",
]

log = logging.getLogger("rollkit")

DEFAULT_THRESHOLD = 0.8


@dataclass
class UserReply:
    """A user's turn with notes: the messages, and for a replay how similar
    the agent's reply was to the recorded one and whether it diverged."""

    messages: list[Message]
    similarity: float | None = None
    diverged: bool | None = None
    by: str | None = None  # who spoke, when not the user asked (a user it handed over to)


@dataclass(frozen=True)
class UserStop:
    """What a user returns to end the conversation as a clean stop:
    `condition` becomes `trace.stop_condition` and the run is scored, as
    after a limit (L13, L24). `RecordedUser(on_divergence="stop")` returns
    `UserStop("diverged")`. Returning None ends it with no stop condition."""

    condition: str


Turn = Union[str, Message, Sequence[Any], UserReply, UserStop, None]


class User:
    """Whoever speaks between segments. Override `next`; `open` and `close`
    bracket one conversation (one rollout) and may keep per-conversation
    state keyed by `trace.id`, so one user object serves many rollouts at
    once. `close` returns the traces the user made of its own (AgentUser)."""

    name = "user"

    async def open(self, task: Task, trace: Trace) -> None:
        """A conversation starts (the rollout is open)."""

    def next(self, trace: Trace) -> Any:
        """The user's next turn after the agent's `trace.last_reply`, or None
        when the conversation is over. May be a coroutine function."""
        raise NotImplementedError

    async def close(self, trace: Trace) -> list[Trace]:
        """The conversation ended; return the user's own traces, if any."""
        return []

    def _spoken(self, trace: Trace) -> int:
        """How many of the trace's user turns this user spoke."""
        return sum(1 for turn in trace.user_turns if turn.by == self.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def similarity(a: str, b: str) -> float:
    """How alike two replies are, from 0 to 1: `difflib.SequenceMatcher`'s
    ratio over the texts case-folded with runs of white space made one space
    (1.0 for two empty texts). Cheap, deterministic, and blind to meaning:
    "42" and "forty-two" are different replies."""
    a, b = " ".join(a.casefold().split()), " ".join(b.casefold().split())
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


class ScriptedUser(User):
    """The user's turns from a list (its i-th turn is said once it has
    spoken i times in this conversation; past the end, or on a None, the
    conversation is over) or from a function of the trace (sync or async)
    returning the next turn or None."""

    def __init__(self, turns: Sequence[Turn] | Callable[[Trace], Any], *, name: str = "scripted-user") -> None:
        if isinstance(turns, (str, bytes)) or not (callable(turns) or isinstance(turns, Sequence)):
            raise TypeError("ScriptedUser takes a list of turns or a function of the trace, e.g. ScriptedUser(['hi', 'bye'])")
        self.turns = turns
        self.name = name

    def next(self, trace: Trace) -> Any:
        if callable(self.turns):
            return self.turns(trace)
        # Counting its own turns, not all of them: it may take over from
        # another user, or continue a fork.
        index = self._spoken(trace)
        return self.turns[index] if index < len(self.turns) else None


class RecordedUser(User):
    """Replays the user turns of `trace` in order.

    Before each turn it compares the agent's reply now with the reply the
    recorded user answered (`similarity`, `threshold` 0 to 1) and records on
    the turn whether it diverged. `trace.info["diverged_at"]` is None until
    the first divergence, which it records there (user turn and
    similarity) and then, by
    `on_divergence`: "flag" goes on replaying, "stop" ends the conversation
    as the clean stop "diverged" (scored), and a `User` takes over from that
    turn on (the turn keeps its similarity and flag). Replaying onto a fork
    of the recorded trace continues after the turns the fork holds.
    """

    def __init__(
        self,
        trace: Trace,
        *,
        on_divergence: str | User = "flag",
        threshold: float = DEFAULT_THRESHOLD,
        name: str = "recorded-user",
    ) -> None:
        if not isinstance(trace, Trace):
            raise TypeError(f"RecordedUser replays a rk.Trace, got {type(trace).__name__}")
        if not trace.user_turns:
            raise ValueError(
                f"trace {trace.id} has no user turns to replay (it ran without a user speaking); record "
                "one by stepping a rollout with the user's messages: the notebook panel, ro.step('...'), "
                "or agent.run(task, user=...)"
            )
        if not (isinstance(on_divergence, User) or on_divergence in ("flag", "stop")):
            raise ValueError(f"on_divergence must be 'flag', 'stop' or a rk.User, got {on_divergence!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be a number from 0 to 1 (a similarity), got {threshold!r}")
        self.recorded = trace
        self.on_divergence = on_divergence
        self.threshold = float(threshold)
        self.name = name
        self._handed_over: set[str] = set()

    async def open(self, task: Task, trace: Trace) -> None:
        # "diverged_at" is always present on a replay, so reading it needs no
        # guard; a fork of a replay keeps the divergence its prefix already had.
        trace.record_info(replayed_from=self.recorded.id, diverged_at=trace.info.get("diverged_at"))
        if isinstance(self.on_divergence, User):
            await self.on_divergence.open(task, trace)

    async def _handover(self, trace: Trace, similarity: float | None = None, diverged: bool | None = None) -> Any:
        user: User = self.on_divergence  # type: ignore[assignment]
        reply = await _ask(user, trace)
        if isinstance(reply, UserReply):
            reply.by = user.name
            if similarity is not None:  # the turn that diverged keeps its flag
                reply.similarity, reply.diverged = similarity, diverged
        return reply

    def _position(self, trace: Trace) -> int:
        """Which recorded turn comes next. A fork of the recorded trace holds
        its first turns already; any other run counts this user's own."""
        origin = trace.info.get("forked_from")
        if isinstance(origin, (list, tuple)) and origin and origin[0] == self.recorded.id:
            return len(trace.user_turns)
        return self._spoken(trace)

    async def next(self, trace: Trace) -> Any:
        if trace.id in self._handed_over:
            return await self._handover(trace)
        index = self._position(trace)
        if index >= len(self.recorded.user_turns):
            return None
        recorded = self.recorded.user_turns[index]
        score = similarity(trace.last_reply, recorded.replying_to)
        diverged = score < self.threshold
        if diverged and trace.info.get("diverged_at") is None:
            trace.record_info(diverged_at={"user_turn": index, "similarity": round(score, 4)})
            if self.on_divergence == "stop":
                return UserStop("diverged")
            if isinstance(self.on_divergence, User):
                self._handed_over.add(trace.id)
                trace.record_info(handed_over_to=self.on_divergence.name)
                return await self._handover(trace, score, diverged)
        return UserReply(list(recorded.messages), similarity=score, diverged=diverged)

    async def close(self, trace: Trace) -> list[Trace]:
        self._handed_over.discard(trace.id)
        if isinstance(self.on_divergence, User):
            return await self.on_divergence.close(trace)
        return []


# ---- running a rollout with a user ----------------------------------------------


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def _as_reply(user: User, value: Any) -> UserReply | UserStop | None:
    """A user's answer as a turn, or a TaskError naming what came back."""
    if value is None or isinstance(value, UserStop):
        return value
    if isinstance(value, UserReply):
        value, notes = value.messages, value
    else:
        notes = None
    if isinstance(value, str) and not value.strip():
        raise TaskError(f"user {user.name!r} returned an empty message; return None to end the conversation")
    try:
        messages = to_messages(value)
    except (TypeError, ValueError) as exc:
        raise TaskError(
            f"user {user.name!r} returned {_describe(value)}, which is not a turn ({exc}); a user returns "
            "a str, a rk.UserMessage, a list of messages or a rk.UserReply, or None when the conversation is over"
        ) from None
    if not messages:
        raise TaskError(f"user {user.name!r} returned no messages; return None to end the conversation")
    others = [m.role for m in messages if m.role != "user"]
    if others:
        raise TaskError(
            f"user {user.name!r} returned a message with role {others[0]!r}; a user speaks user messages only "
            "(a str or rk.UserMessage)"
        )
    if notes is None:
        return UserReply(messages)
    return UserReply(messages, similarity=notes.similarity, diverged=notes.diverged, by=notes.by)


async def _ask(user: User, trace: Trace) -> UserReply | UserStop | None:
    try:
        value = user.next(trace)
        if inspect.isawaitable(value):
            value = await value
    except TaskError:
        raise  # already says which user
    except Exception as exc:
        # Whatever broke (a typed ProviderError of the user's own model
        # included) broke on the user's side of the boundary: the world.
        raise TaskError(f"user {user.name!r} raised {type(exc).__name__}: {exc}") from exc
    return _as_reply(user, value)


async def converse(rollout: Rollout, user: User) -> list[Trace]:
    """Run the exchange of an opened `rollout` with `user` to its end (see
    the module docstring); the rollout is left for the caller to close.
    Returns the user's own traces (an AgentUser's), which are also
    `rollout.trace.user_traces`."""
    if not isinstance(user, User):
        raise TypeError(f"user must be a rk.User (e.g. rk.ScriptedUser([...])), got {type(user).__name__}")
    trace = rollout.trace
    cap = rollout.limits.max_user_turns
    try:
        try:
            await user.open(rollout.task, trace)
        except TaskError:
            raise
        except Exception as exc:
            raise TaskError(f"user {user.name!r} could not open: {type(exc).__name__}: {exc}") from exc
        # The agent moves first unless it already yielded (a fork after a
        # reply, a task without a prompt, where the user opens).
        more = rollout.is_open and (rollout.waiting_for_user or await rollout.step())
        while more:
            if cap is not None and len(trace.user_turns) >= cap:
                # Refused before the user is even asked, as a limit refuses a
                # model call before it is made (L12, L13): no turn is spent
                # (an AgentUser's tokens) that would never be delivered.
                rollout.stop("max_user_turns")
                break
            reply = await _ask(user, trace)
            if reply is None:
                break
            if isinstance(reply, UserStop):
                rollout.stop(reply.condition)
                break
            more = await rollout.step(reply.messages, by=reply.by or user.name)
            if reply.similarity is not None and trace.user_turns:
                trace.record_user_turn_similarity(len(trace.user_turns) - 1, round(reply.similarity, 4), reply.diverged)
    except TaskError as exc:
        if rollout.state in (RolloutState.OPEN, RolloutState.ENDED):
            rollout.fail(exc, "user")
    finally:
        companions = await _close(user, rollout)
        trace.record_user_traces(companions)
    return companions


async def drive(rollout: Rollout, user: User | None = None) -> None:
    """Run an opened rollout's exchange: one segment when nobody answers
    (`user` None), the whole conversation with `user` otherwise."""
    if user is None:
        await rollout.step()
    else:
        await converse(rollout, user)


async def _close(user: User, rollout: Rollout) -> list[Trace]:
    try:
        return list(await user.close(rollout.trace))
    except Exception as exc:  # the conversation happened; a user's teardown only warns
        message = f"user {user.name!r} close failed: {type(exc).__name__}: {exc}"
        rollout.trace.record_warning(message)
        log.warning("rollout %s: %s", rollout.id, message)
        return []
