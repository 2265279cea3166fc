"""Shared test helpers for the core: small tasks, harnesses and runtimes."""

from __future__ import annotations

import pytest

import rollkit as rk


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
