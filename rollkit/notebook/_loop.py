"""Running the async core from synchronous code: a cell, a script, a callback.

`run(coro)` runs a coroutine to its end and returns its result, wherever it
is called from: with no loop running (a plain script) it uses one private
loop kept for the whole process, so objects bound to a loop (servers,
connections) survive from one call to the next; inside a running loop (a
Jupyter kernel, an async test, a widget callback) it applies nest-asyncio to
that loop, once, and runs the coroutine on it.

`schedule(coro)` never blocks: inside a running loop it starts a task and
returns it; with none it runs the coroutine to its end (there is nothing to
return to) and returns a finished future.

nest-asyncio is applied here, on first need, and never when the core is
imported: a program that only uses `await` never has its loop patched.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run", "schedule"]

T = TypeVar("T")

_private: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _private_loop() -> asyncio.AbstractEventLoop:
    global _private
    with _lock:
        if _private is None or _private.is_closed():
            _private = asyncio.new_event_loop()
        return _private


def _running() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _nest(loop: asyncio.AbstractEventLoop) -> None:
    if getattr(loop, "_nest_patched", False):
        return
    import nest_asyncio

    nest_asyncio.apply(loop)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end from synchronous code and return its result."""
    loop = _running()
    if loop is None:
        return _private_loop().run_until_complete(coro)
    # A loop is already running (a Jupyter cell runs inside the kernel's
    # loop): re-entering it needs nest-asyncio.
    _nest(loop)
    return loop.run_until_complete(coro)


def schedule(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """Start `coro` on the running loop and return at once (a widget callback
    must never block the kernel). With no running loop, run it now."""
    loop = _running()
    if loop is not None:
        return asyncio.ensure_future(coro)
    future: asyncio.Future[T] = _private_loop().create_future()
    try:
        future.set_result(run(coro))
    except BaseException as exc:  # noqa: BLE001 - handed to the caller on the future
        future.set_exception(exc)
    return future
