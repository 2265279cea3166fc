"""Finishing what must not be cut in half when the caller is cancelled.

asyncio cancels a task at its innermost await. A cleanup cut there (killing a
program's process group, removing a working folder, stopping a server) leaves
undone whatever it had not reached yet; a start cut there (a server whose
socket is already registered with the event loop's selector, a subprocess
whose pipes are half connected) leaves something half made that nobody holds.
Both bugs were seen: a start cut short closed a socket behind the selector's
back, so a later file descriptor with the same number was never watched and a
program's exit went unnoticed forever; a cleanup cancelled twice by Ctrl-C
left the program running and its folder on disk.

`finish(action)` is the one mechanism for both. It runs `action` in a task of
its own and waits for it to end, however often the caller is cancelled
meanwhile; then it raises the cancellation (or returns the result, or raises
the action's error, when nobody cancelled). With `undo`, a start that
completed after the caller was cancelled is undone before the cancellation is
raised, so what it set up does not outlive the caller's interest in it.

A finish is bounded by the innermost `deadline(seconds)` block around it
(the rollout's teardown deadline, `RolloutTimeouts.teardown`): when it
passes, the action is cancelled outright and `Overrun` (a TimeoutError) is
raised, whoever else was cancelling. Without this, the cancellation a
bounded wait (`asyncio.timeout`) sends was swallowed like a caller's, and a
stop that never returned hung its close forever. The deadline is a context
variable, so it reaches finishes nested in the tasks the action starts.
This module knows nothing of rollouts; it owns this mechanism only.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

__all__ = ["finish", "deadline", "Overrun"]

T = TypeVar("T")

# The loop time by which finishes in this context must be done (None: unbounded).
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("rollkit_finish_deadline", default=None)


class Overrun(TimeoutError):
    """A finished action was still running when its deadline passed; it was cancelled."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Bound every `finish` in this block (and in tasks started from it) to
    `seconds` from now (None: no bound); an outer deadline that comes sooner
    still holds."""
    if seconds is None:
        yield
        return
    end = asyncio.get_running_loop().time() + seconds
    outer = _deadline.get()
    token = _deadline.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _deadline.reset(token)


async def finish(action: Awaitable[T], *, undo: Callable[[T], Awaitable[Any]] | None = None) -> T:
    """Await `action` to its end even if the caller is cancelled meanwhile,
    then re-raise the cancellation; `undo(result)` first takes back a start
    that completed after the cancellation came."""
    task = asyncio.ensure_future(action)
    end = _deadline.get()
    loop = asyncio.get_running_loop()
    cancelled = False
    while not task.done():
        remaining = None if end is None else end - loop.time()
        if remaining is not None and remaining <= 0:
            task.cancel()  # abandoned: cancelled outright, not waited for
            raise Overrun("still running at its deadline: cancelled")
        try:
            await asyncio.wait({task}, timeout=remaining)
        except asyncio.CancelledError:
            cancelled = True  # the caller was; the action goes on
    if task.cancelled():
        raise asyncio.CancelledError()  # the action itself was cancelled: nothing is left to finish
    if not cancelled:
        return task.result()
    if task.exception() is not None:  # it failed after the cancellation came: the cancellation wins
        raise asyncio.CancelledError() from task.exception()
    if undo is not None:
        await finish(undo(task.result()))
    raise asyncio.CancelledError()
