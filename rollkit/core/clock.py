"""The clock a rollout reads: wall time to date things, monotonic time to
measure them.

`Clock.time()` dates what a trace records (phase spans, segments, model
calls); `Clock.monotonic()` measures durations (agent time charged, call
latency), so a step of the wall clock never makes a negative one. The
rollout and its session read time only through the clock of their
`RolloutSpec` (`rk.Agent(clock=...)`), the system clock unless a test passes
another one, as trio's tests do: `FakeClock` moves only when told, so timing
tests run instantly and assert exact values. Deadlines (`asyncio.timeout`)
stay on the event loop's clock. This module imports nothing of rollkit.
"""

from __future__ import annotations

import time as _time

__all__ = ["Clock", "SystemClock", "FakeClock", "SYSTEM_CLOCK"]


class Clock:
    """What a clock offers; `SystemClock` and `FakeClock` are the two kinds."""

    def time(self) -> float:
        """Seconds since the epoch, to date what is recorded."""
        raise NotImplementedError

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back, to measure durations."""
        raise NotImplementedError


class SystemClock(Clock):
    """The machine's clocks."""

    def time(self) -> float:
        return _time.time()

    def monotonic(self) -> float:
        return _time.perf_counter()


class FakeClock(Clock):
    """A clock that moves only by `advance(seconds)`: both readings move together."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = float(start)
        self._mono = 0.0

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock moves forward only; advance({seconds!r}) would move it back")
        self._wall += seconds
        self._mono += seconds

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def __repr__(self) -> str:
        return f"FakeClock(time={self._wall!r}, monotonic={self._mono!r})"


SYSTEM_CLOCK = SystemClock()
