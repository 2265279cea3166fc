"""Shared test helpers for the core: small tasks, harnesses and runtimes."""

from __future__ import annotations

import asyncio
import atexit
import math
import shutil
import signal
import sys
import tempfile

import pytest

import rollkit as rk
from rollkit.core.clock import Clock, FakeClock

# A suite started as a background job of a shell without job control (`cmd &`
# in a script, nohup, some CI runners) inherits SIGINT ignored, and so would
# every process a test starts: the tests that interrupt a child (an export,
# a run, `rollkit view`) would find Ctrl-C ignored. The session takes back
# the default a terminal gives, so the suite passes however it was started
# (the tests of an inherited-ignored SIGINT set it in their child).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Hypothesis keeps what it learns of the code under test in a folder: a
# temporary one for the session, removed at its end (never `.hypothesis/`
# in the checkout). Absent where only the default install is (the
# lowest-versions job).
try:
    from hypothesis.configuration import set_hypothesis_home_dir
except ImportError:
    _HYPOTHESIS_HOME = None
else:
    _HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="rollkit-hypothesis-")
    set_hypothesis_home_dir(_HYPOTHESIS_HOME)
    atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, ignore_errors=True)  # also where no test ran


@pytest.fixture(scope="session", autouse=True)
def _no_hypothesis_folder_left():
    yield
    if _HYPOTHESIS_HOME is not None:
        shutil.rmtree(_HYPOTHESIS_HOME, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _big_runs_in_the_session_temp_folder(tmp_path_factory):
    """rollkit.examples.cached_big_run (notebook 07, run by test_run_all in
    kernels that inherit this environment) writes its made-up runs in this
    session's own temporary folder, never the user's cache: a test session
    leaves nothing outside pytest's temp."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROLLKIT_BIG_RUN_CACHE", str(tmp_path_factory.mktemp("big-runs")))
        yield


@pytest.fixture(autouse=True)
def _tables_settled_when_a_test_ends():
    """A run returns before its tables' last part is written (rollkit.tables.
    livetables): the thread writing it ends with the test that ran it, not
    in a later test or after its temporary folder is gone."""
    yield
    columns = sys.modules.get("rollkit.tables.columns")
    if columns is not None:
        columns.settle()


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
    see. Tests drive the facade's async forms (`await ro.open_async()`) inside a
    loop, and the sync forms inside a running loop in a subprocess."""
    yield
    assert asyncio.run is _STDLIB_RUN, (
        "this test applied nest-asyncio in the test process (a sync notebook call inside a running loop); "
        "use the async forms, or run it in a subprocess"
    )


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """The fault suite's counts and the other sections tests report
    (tests/helpers/fault_report.py), whatever the outcome."""
    from helpers.fault_report import SECTIONS

    for section, lines in SECTIONS.items():
        terminalreporter.section(section)
        for line in lines:
            terminalreporter.write_line(f"{section}: {line}")


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


class VirtualTime(Clock):
    """Virtual time for the running event loop, as trio's autojump clock:
    while the loop has nothing ready it jumps to its next timer instead of
    waiting, so `asyncio.sleep(5)` and `asyncio.timeout(0.2)` take no real
    time and end at exact instants. As a rollkit `Clock`
    (`rk.Agent(clock=vt)`) it reads the same virtual time, so what a rollout
    charges agrees exactly with the deadlines the loop enforces.

    Only for tests whose waits are all timers on this loop: I/O and threads
    are still polled (never waited on), but time jumps past them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # Monotonic, from a whole second so that binary-exact steps (0.25,
        # 0.5) add up exactly; wall time is `start` + the same moves.
        self.now = float(math.ceil(loop.time()))
        self.start = 1_700_000_000.0 - self.now
        self._select = loop._selector.select  # type: ignore[attr-defined]

    def _jump(self, timeout: float | None) -> list:
        ready = self._select(0)
        if ready or timeout is None:
            return ready or self._select(None)  # nothing timed to jump to: really wait
        self.now += timeout
        return ready

    def __enter__(self) -> VirtualTime:
        self.loop._selector.select = self._jump  # type: ignore[attr-defined]
        self.loop.time = lambda: self.now  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.loop._selector.select  # type: ignore[attr-defined]
        del self.loop.time

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.start + self.now


def virtual_time() -> VirtualTime:
    """`with virtual_time() as clock:` inside an async test (see VirtualTime)."""
    return VirtualTime(asyncio.get_running_loop())
