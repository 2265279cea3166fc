"""`rk.evaluate` and `rk.ab_test` as a notebook user calls them: the runs
layer's, plus `monitor=True`.

The runs layer runs batches and draws nothing; a live view of one is a
widget, which lives here. So the top-level names are these wrappers: with
`monitor=True` they display a `RunMonitor` (rk.evaluate) or an `ABMonitor`
(rk.ab_test) fed by the run as it goes, through the runs layer's own
extension points (an evaluation awaitable's `attach`, an A/B test's
`on_start` and `on_pair`), and the progress bar is left off. Without it they
are the runs layer's functions, argument for argument. The runs layer never
imports this module.

It owns the wrapping only: no lifecycle logic, no scheduling.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..runs import ab as runs_ab
from ..runs import evaluation as runs_evaluation
from ..core.dependencies import ipython_display
from . import sync_loop

__all__ = ["evaluate", "evaluate_async", "ab_test", "ab_test_async"]

_MONITOR_DOC = """
    `monitor=True` (a notebook) displays a live monitor over the run in the
    cell's output instead of the progress bar (rollkit.notebook.running)."""


def _with_monitor(runs_fn: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The wrapper gets `runs_fn`'s name, doc and signature, plus `monitor`."""
    signature = inspect.signature(runs_fn)
    monitor = inspect.Parameter("monitor", inspect.Parameter.KEYWORD_ONLY, default=False, annotation="bool")
    parameters = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    extra = [p for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD]

    def decorate(wrapper: Callable[..., Any]) -> Callable[..., Any]:
        wrapper.__doc__ = (runs_fn.__doc__ or "").rstrip() + "\n" + _MONITOR_DOC
        wrapper.__signature__ = signature.replace(parameters=[*parameters, monitor, *extra])  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _show_run_monitor(pending: Any) -> None:
    from .monitor import RunMonitor

    ipython_display.display(RunMonitor(pending))


@_with_monitor(runs_evaluation.evaluate_async)
def evaluate_async(agent: Any, tasks: Any, *, monitor: bool = False, **options: Any) -> Any:
    if monitor:
        options["progress"] = False
    pending = runs_evaluation.evaluate_async(agent, tasks, **options)  # checks the arguments first
    if monitor:
        _show_run_monitor(pending)
    return pending


@_with_monitor(runs_evaluation.evaluate)
def evaluate(agent: Any, tasks: Any, *, monitor: bool = False, **options: Any) -> Any:
    if not monitor or sync_loop.running_loop() is not None:  # in a loop the runs layer refuses (naming evaluate_async) before anything is shown
        return runs_evaluation.evaluate(agent, tasks, **options)
    return runs_evaluation.run_to_end(evaluate_async(agent, tasks, monitor=True, **options))


def _ab_options(options: dict[str, Any]) -> dict[str, Any]:
    """`options` with an A/B monitor's callbacks chained after the caller's:
    the monitor is drawn when the test starts (its arguments checked), then
    fed every pair."""
    from .decide import ABMonitor

    shown: list[ABMonitor] = []
    on_start, on_pair = options.get("on_start"), options.get("on_pair")

    def start(plan: dict[str, Any]) -> None:
        if on_start is not None:
            on_start(plan)
        shown.append(ABMonitor(plan["signal"], plan["alpha"], plan["margin"]))
        ipython_display.display(shown[0])

    def pair(state: Any) -> None:
        if on_pair is not None:
            on_pair(state)
        shown[0].add(state)

    return {**options, "on_start": start, "on_pair": pair}


@_with_monitor(runs_ab.ab_test)
def ab_test(a: Any, b: Any, tasks: Any, *, monitor: bool = False, **options: Any) -> Any:
    return runs_ab.ab_test(a, b, tasks, **(_ab_options(options) if monitor else options))


@_with_monitor(runs_ab.ab_test_async)
async def ab_test_async(a: Any, b: Any, tasks: Any, *, monitor: bool = False, **options: Any) -> Any:
    return await runs_ab.ab_test_async(a, b, tasks, **(_ab_options(options) if monitor else options))
