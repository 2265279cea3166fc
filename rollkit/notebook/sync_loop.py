"""Running the async core from synchronous code: a cell, a script, a callback.

The core is async; a notebook cell, a script and a widget callback are not,
and a Jupyter cell already runs inside the kernel's event loop, which must
not be entered again. So the synchronous forms hand their coroutine to a loop
of rollkit's own: one event loop in one daemon thread ("rollkit-loop"),
started on first need and kept for the life of the process, so servers,
connections and runtimes bound to it survive from one cell to the next.

- `run(coro)` runs `coro` there and blocks the calling thread until it
  ends (on a thread event, which Ctrl-C interrupts), returning its result
  or raising its error. Ctrl-C (a kernel interrupt) cancels it and waits until
  it has unwound, so nothing is left running; a second Ctrl-C stops waiting.
- `schedule(coro)` never blocks a running loop: it starts `coro` there and
  returns a future at once (a widget callback must not block the kernel).
  With no loop running in the calling thread (a plain script) there is
  nothing to return to, so it runs `coro` to its end first.
- `on(loop, coro)` awaits `coro` on `loop` from any loop (the async forms,
  `await ro.step_async()` in a cell, go through it).

Each accepts the loop a coroutine must run on (a rollout opened with
`await ro.open_async()` lives on the loop that awaited it); by default
rollkit's loop. A synchronous call from the very loop it would wait for
would deadlock, so it raises instead, naming the async form.

Why a thread and not nest-asyncio (or its maintained fork nest-asyncio2):
re-entering the kernel's running loop from inside a cell makes the kernel
handle its own queued requests nested in a cell that has not finished.
Under ipykernel 7, which runs each request in a task with its own context,
that re-entry raised "cannot enter context ... is already entered" and the
queued cells were lost: Run All hung notebooks 01 and 04
(tests/test_run_all.py, tests/test_browser_lab.py). nest-asyncio2 works by
the same re-entry, so whether queued requests survive depends on each
kernel's internals, version by version. A loop of our own patches nothing:
the kernel's loop is only ever blocked like any long cell, or not touched at
all by `await`, and the same code holds under ipykernel 6 and 7.

What runs on rollkit's loop calls back on its thread; the facade hands the
callbacks that draw widgets back to the kernel's thread
(rollkit.notebook.stepping), since a widget written from two threads at
once can lose an update.

This module must not import the notebook's widgets or the layers above.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..core.errors import RolloutStateError

__all__ = ["awaitable", "loop", "on", "run", "schedule"]

T = TypeVar("T")

_lock = threading.Lock()
_own: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop): a forked child starts its own


def loop() -> asyncio.AbstractEventLoop:
    """rollkit's own event loop, running in its daemon thread."""
    global _own
    with _lock:
        if _own is None or _own[0] != os.getpid() or _own[1].is_closed():
            new = asyncio.new_event_loop()
            thread = threading.Thread(target=_serve, args=(new,), name="rollkit-loop", daemon=True)
            thread.start()
            _own = (os.getpid(), new)
        return _own[1]


def _serve(new: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(new)
    new.run_forever()


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if one is."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def kernel_loop() -> asyncio.AbstractEventLoop | None:
    """The loop a widget follows a folder on: the one running in this thread,
    else the thread's own (a kernel's, between cells), else None (the
    caller then polls by hand)."""
    found = running_loop()
    if found is None:
        try:
            found = asyncio.get_event_loop()
        except RuntimeError:
            return None
    return found


def _target(where: asyncio.AbstractEventLoop | None, coro: Coroutine[Any, Any, Any]) -> asyncio.AbstractEventLoop:
    target = where or loop()
    if target.is_closed():
        coro.close()
        raise RolloutStateError(
            "the event loop this rollout was opened on has closed; open a new one with rk.notebook.open(agent, task)"
        )
    return target


def run(coro: Coroutine[Any, Any, T], where: asyncio.AbstractEventLoop | None = None) -> T:
    """Run `coro` to its end on `where` (rollkit's loop by default) and return
    its result, blocking the calling thread meanwhile."""
    target = _target(where, coro)
    if running_loop() is target:
        coro.close()
        raise RolloutStateError(
            "a synchronous rollkit call was made on the event loop it would have to wait for, which would "
            "never finish: await the async form instead (await ro.step_async(), await ro.close_async(), ...)"
        )
    finished = threading.Event()
    started: list[asyncio.Task[T]] = []

    def start() -> None:
        task = target.create_task(coro)
        started.append(task)
        task.add_done_callback(lambda _: finished.set())

    target.call_soon_threadsafe(start)
    try:
        finished.wait()
    except BaseException:
        # Ctrl-C: cancel the work (`start` ran first: the loop keeps the order
        # of these calls) and wait until it has unwound, so a cancelled step
        # leaves nothing running behind the prompt. A second Ctrl-C stops waiting.
        target.call_soon_threadsafe(lambda: started[0].cancel())
        finished.wait()
        raise
    return started[0].result()


def schedule(coro: Coroutine[Any, Any, T], where: asyncio.AbstractEventLoop | None = None) -> Any:
    """Start `coro` on `where` (rollkit's loop by default) and return a future
    of its result (`done()`, `result()`, `add_done_callback()`) at once. With
    no loop running in this thread, run it to its end first."""
    target = _target(where, coro)
    here = running_loop()
    if here is target:
        return asyncio.ensure_future(coro)
    if here is not None:
        return asyncio.run_coroutine_threadsafe(coro, target)
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    try:
        future.set_result(run(coro, target))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - handed to the caller on the future
        future.set_exception(exc)
    return future


async def on(where: asyncio.AbstractEventLoop | None, coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` on `where` from whichever loop awaits this: directly when
    it is that loop (or `where` is None), else through a thread-safe future
    whose cancellation cancels `coro` there."""
    if where is None or where is asyncio.get_running_loop():
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, _target(where, coro)))


def awaitable(future: Any) -> Any:
    """A future from `schedule`, made awaitable on the running loop."""
    if isinstance(future, concurrent.futures.Future):
        return asyncio.wrap_future(future)
    return future
