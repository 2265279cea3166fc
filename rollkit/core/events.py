"""Events a rollout emits as things happen, the bus that delivers them, and
what hears of a run of many rollouts (`RunSink`).

Widgets, live plots and progress bars subscribe here instead of polling. An
event is a small frozen record naming the rollout, the kind of thing that
happened and when; the trace stays the source of truth, an event only says
"look now". A subscriber that raises is logged and dropped from that one
delivery: it can never break the rollout that emitted the event.

This module must not import the rest of rollkit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "EventBus", "EVENT_KINDS", "RunSink"]

log = logging.getLogger("rollkit")

EVENT_KINDS = (
    "phase_start",
    "phase_end",
    "segment_start",
    "segment_end",
    "call_start",
    "call_end",
    "turn",
    "stop",
    "failure",
    "scored",
    "closed",
)


@dataclass(frozen=True, slots=True)
class Event:
    """`kind` is one of EVENT_KINDS; `data` carries what that kind needs
    (phase name, segment index, stop condition, error type, ...)."""

    kind: str
    rollout_id: str
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)


Subscriber = Callable[[Event], Any]


class EventBus:
    """Delivers events to any number of subscribers, in subscription order.
    A subscriber may name the kinds it wants: an event no subscriber wants
    is never built (a run's monitor hears 2 kinds of about 20 per rollout)."""

    __slots__ = ("_subscribers", "_wanted")

    def __init__(self) -> None:
        self._subscribers: list[tuple[Subscriber, frozenset[str] | None]] = []
        self._wanted: frozenset[str] | None = frozenset()  # None: some subscriber wants every kind

    def subscribe(self, subscriber: Subscriber, kinds: Iterable[str] | None = None) -> Callable[[], None]:
        """Add a subscriber (of every kind, or of `kinds`); returns a function that removes it."""
        entry = (subscriber, None if kinds is None else frozenset(kinds))
        self._subscribers.append(entry)
        self._rewant()

        def unsubscribe() -> None:
            if entry in self._subscribers:
                self._subscribers.remove(entry)
                self._rewant()

        return unsubscribe

    def _rewant(self) -> None:
        wanted: frozenset[str] | None = frozenset()
        for _, kinds in self._subscribers:
            if kinds is None:
                wanted = None
                break
            wanted = wanted | kinds
        self._wanted = wanted

    def wants(self, kind: str) -> bool:
        """Whether some subscriber hears events of `kind` (else emitting one
        does nothing: a caller may skip gathering its data)."""
        wanted = self._wanted
        return wanted is None or kind in wanted

    def emit(self, kind: str, rollout_id: str, **data: Any) -> None:
        wanted = self._wanted
        if wanted is not None and kind not in wanted:
            return
        event = Event(kind, rollout_id, data)
        for subscriber, kinds in tuple(self._subscribers):
            if kinds is not None and kind not in kinds:
                continue
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber %r raised on %s; the rollout goes on", subscriber, kind)


class RunSink:
    """What hears of a run as it goes: the live file's writer, a `RunState`,
    OTel's live sink, a watcher given to `rk.evaluate_async(...).attach`.
    The run calls, in its own process and in this order per rollout:
    `begin(info)` once (info as the "run" line of live.jsonl), then per
    rollout `started`, any number of `phase` and `turn`, and `finished` with
    its trace; then `end(status)` once ("done", "interrupted" or "failed").
    Each method here does nothing: a sink overrides the events it uses. An
    exception a sink raises stops the run with it."""

    __slots__ = ()  # a subclass with slots keeps them

    def begin(self, info: dict[str, Any]) -> None:
        """The run starts (or resumes): `info` has run_id, total, limits, agent_timeout, pid, host."""

    def started(self, rollout_id: str) -> None:
        """A rollout starts."""

    def phase(self, rollout_id: str, phase: str) -> None:
        """A rollout enters `phase` (boot, agent, score, ...)."""

    def turn(self, rollout_id: str, turns: int, tokens: int | None, agent_time: float) -> None:
        """A rollout's model answered: its counts so far (tokens None: a turn did not report its usage)."""

    def finished(self, trace: Any) -> None:
        """A rollout is over (`trace`, a rollkit Trace); its trace is already written to the run's file if it has one."""

    def end(self, status: str) -> None:
        """The run is over: "done", "interrupted" or "failed"."""
