"""Events a rollout emits as things happen, and the bus that delivers them.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "EventBus", "EVENT_KINDS"]

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
    """Delivers events to any number of subscribers, in subscription order."""

    __slots__ = ("_subscribers",)

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add a subscriber; returns a function that removes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def emit(self, kind: str, rollout_id: str, **data: Any) -> None:
        if not self._subscribers:
            return
        event = Event(kind, rollout_id, data)
        for subscriber in tuple(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber %r raised on %s; the rollout goes on", subscriber, kind)
