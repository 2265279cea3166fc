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

Only actions that end by themselves may be finished this way: each of
rollkit's cleanups has its own deadline (`RolloutTimeouts.teardown`, a
runtime's `kill_grace`), so a finished cleanup is bounded, never a hang.
This module knows nothing of rollouts; it owns this mechanism only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["finish"]

T = TypeVar("T")


async def finish(action: Awaitable[T], *, undo: Callable[[T], Awaitable[Any]] | None = None) -> T:
    """Await `action` to its end even if the caller is cancelled meanwhile,
    then re-raise the cancellation; `undo(result)` first takes back a start
    that completed after the cancellation came."""
    task = asyncio.ensure_future(action)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise  # the action itself was cancelled: nothing is left to finish
            cancelled = True  # the caller was; the action goes on
            if not task.done():
                continue
        except BaseException:
            pass  # the action's own error: task.result() raises it below
        break
    if not cancelled:
        return task.result()
    if task.exception() is not None:  # it failed after the cancellation came: the cancellation wins
        raise asyncio.CancelledError() from task.exception()
    if undo is not None:
        await finish(undo(task.result()))
    raise asyncio.CancelledError()
