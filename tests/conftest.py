"""Shared test helpers for the core: small tasks, harnesses and runtimes."""

from __future__ import annotations

import asyncio

import pytest

import rollkit as rk
from rollkit.core.clock import FakeClock


class Recorder:
    """An ordered log of what happened, shared by the parts of one test."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def __call__(self, item: str) -> None:
        self.items.append(item)


class PromptTask(rk.Task):
    """The smallest prompted task."""


class CountingRuntime(rk.LocalRuntime):
    def __init__(self, log: Recorder | None = None) -> None:
        super().__init__()
        self.log = log or Recorder()

    async def _start(self) -> None:
        self.log("runtime.start")

    async def _stop(self) -> None:
        self.log("runtime.stop")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def prompt_task(prompt: str = "hello", **fields) -> PromptTask:  # type: ignore[no-untyped-def]
    return PromptTask(prompt=prompt, **fields)


def replies(*items, **options) -> rk.ScriptedModel:  # type: ignore[no-untyped-def]
    return rk.ScriptedModel(list(items), **options)


_STDLIB_RUN = asyncio.run


@pytest.fixture(autouse=True)
def _no_nest_asyncio_in_the_test_process():
    """nest-asyncio patches asyncio.run for the whole process (its run skips
    the loop's async-generator shutdown), which would change what later tests
    see. Tests drive the facade's async forms (`await ro.aopen()`) inside a
    loop, and the sync forms inside a running loop in a subprocess."""
    yield
    assert asyncio.run is _STDLIB_RUN, (
        "this test applied nest-asyncio in the test process (a sync notebook call inside a running loop); "
        "use the async forms, or run it in a subprocess"
    )


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """The fault suite's counts (tests/fault_report.py), whatever the outcome."""
    from fault_report import LINES

    if LINES:
        terminalreporter.section("fault suite")
        for line in LINES:
            terminalreporter.write_line(f"fault suite: {line}")


def ticking(model: rk.ScriptedModel, clock: FakeClock, seconds: float) -> rk.ScriptedModel:
    """`model`, whose every reply moves the fake `clock` by `seconds` first:
    with a FakeClock the model is the only thing that takes time, so the
    agent time a rollout charges is exact."""
    reply = model.replies
    assert callable(reply), "ticking() wraps a ScriptedModel built from a function of the request"

    def tick(request: rk.Request) -> object:
        clock.advance(seconds)
        return reply(request)

    model.replies = tick
    return model
