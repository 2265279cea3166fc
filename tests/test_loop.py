"""rollkit's own loop (rollkit.notebook.sync_loop) under the notebook facade.

A rollout opened by the sync facade lives on rollkit's loop thread; these
tests call it the ways a kernel does, from this test's running loop (the
kernel's loop stands in for it): blocking calls, `await ro.step_async()`, a
click's `*_soon`, and the person answering as the model from the kernel's
thread while the step waits on rollkit's.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import rollkit as rk
from rollkit.examples import arithmetic_tasks
from rollkit.notebook import sync_loop


def _threads_seen() -> tuple[list[str], rk.ScriptedModel]:
    seen: list[str] = []

    def reply(request: rk.Request) -> str:
        seen.append(threading.current_thread().name)
        return f"Echo: {request.messages[-1].content}"

    return seen, rk.ScriptedModel(reply)


async def test_sync_and_async_forms_both_run_on_rollkits_loop_thread() -> None:
    seen, model = _threads_seen()
    ro = rk.notebook.open(rk.Agent(model=model), rk.Task())  # blocks this loop until it is open
    assert ro.step("one").reply == "Echo: one"
    assert (await ro.step_async("two")).reply == "Echo: two"  # awaited from this loop, run on rollkit's
    assert ro.close().num_turns == 2
    assert seen == ["rollkit-loop", "rollkit-loop"]
    assert threading.current_thread().name == "MainThread"


async def test_a_rollout_opened_by_await_stays_on_the_awaiting_loop() -> None:
    seen, model = _threads_seen()
    ro = rk.notebook.NotebookRollout(rk.Agent(model=model), rk.Task())
    assert await ro.open_async()
    await ro.step_async("here")
    with pytest.raises(RuntimeError, match=r"would never finish: await the async form instead \(await ro.step_async\(\)"):
        ro.step("blocking")  # would block the very loop the rollout lives on
    await ro.close_async()
    assert seen == ["MainThread"]


async def test_a_click_returns_at_once_the_step_runs_on_rollkits_loop_and_views_draw_here() -> None:
    release = threading.Event()
    started = asyncio.Event()
    here = asyncio.get_running_loop()

    def reply(request: rk.Request) -> str:
        here.call_soon_threadsafe(started.set)
        release.wait()  # blocks rollkit's loop thread, not this one
        return "done"

    ro = rk.notebook.open(rk.Agent(model=rk.ScriptedModel(reply)), rk.Task(prompt="go"))
    drawn_on: set[str] = set()
    ro.watch(lambda: drawn_on.add(threading.current_thread().name))
    ro.subscribe(lambda event: drawn_on.add(threading.current_thread().name))
    panel = ro.panel()
    panel.step_button.click()
    await started.wait()  # this loop runs on while the step is in flight
    assert ro.busy and 'data-kind="running"' in panel.status.value
    release.set()
    await ro.wait()
    assert ro.trace.last_reply == "done"
    assert 'data-kind="waiting"' in panel.status.value and not panel.step_button.disabled
    assert panel.chart.points == 1
    # Views are drawn only on the thread that built the rollout (a widget
    # written from two threads can lose an update).
    assert drawn_on == {"MainThread"}
    ro.close()
    panel.close()


async def test_the_person_answers_as_the_model_from_the_kernels_thread() -> None:
    here = asyncio.get_running_loop()
    asked = asyncio.Event()
    ro = rk.notebook.open(rk.Agent(model=rk.HumanModel()), arithmetic_tasks(1)[0])
    ro.watch(lambda: here.call_soon_threadsafe(asked.set) if ro.asked is not None else None)
    future = ro.step_soon()
    while ro.asked is None:
        await asked.wait()
        asked.clear()
    ro.call("calculator", expression="34 + 8")  # resolved on rollkit's loop, where the step waits
    while ro.asked is None or ro.asked.messages[-1].role != "tool":
        await asked.wait()
        asked.clear()
    ro.answer("The answer is 42.")
    result = await asyncio.wrap_future(future)
    assert result.reply == "The answer is 42."
    assert ro.close().reward == 1.0


def test_a_sync_call_from_rollkits_own_loop_is_refused_not_deadlocked() -> None:
    async def inner() -> int:
        return 1

    async def outer() -> str:
        coro = inner()
        try:
            sync_loop.run(coro)
        except RuntimeError as exc:
            return str(exc)
        return "ran"

    assert sync_loop.run(outer()).startswith("a synchronous rollkit call was made on the event loop it would have to wait for")
    assert sync_loop.run(inner()) == 1  # the loop is still fine


def test_schedule_with_no_loop_running_runs_to_the_end_and_keeps_the_error() -> None:
    async def fails() -> None:
        raise ValueError("bad")

    future = sync_loop.schedule(fails())
    assert future.done()
    assert isinstance(future.exception(), ValueError) and str(future.exception()) == "bad"
