"""Plug points: where a higher layer hands a lower one something it builds.

Imports point down only (core < programs < runs < notebook < examples). When
a lower layer needs what only a higher one has (a trace drawn as HTML by the
notebook layer, the demo task set the command line runs), it names a plug point and looks it up when
it needs it; the higher layer plugs a function in when its package is
imported. `import rollkit` imports every layer's package, so everything is
plugged before any user code runs. Model names are the one plug point with
an API of their own (`rollkit.core.models.register_model`), because their
error message must list them.

The points, and who plugs them:

- `trace_html`: `fn(trace) -> str`, the notebook layer (`Trace._repr_html_`);
- `demo`: `fn(n_tasks) -> (agent, tasks)`, the examples (`rollkit demo`).

What a user calls from a higher layer needs no point: `rk.evaluate(...,
monitor=True)` is the notebook layer's wrapper of the runs layer's
function, `rk.frames` is the runs layer's own, and a run's browser is
`rk.notebook.TraceBrowser(run)`.

This module holds the table and nothing else; it imports nothing of rollkit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["plug", "plugged", "POINTS"]

POINTS = ("trace_html", "demo")

_plugs: dict[str, Callable[..., Any]] = {}


def plug(point: str, fn: Callable[..., Any]) -> None:
    """Provide `fn` at `point` (one of POINTS); a later plug replaces it."""
    if point not in POINTS:
        raise ValueError(f"unknown plug point {point!r}; the points are {', '.join(POINTS)}")
    if not callable(fn):
        raise TypeError(f"plug point {point!r} takes a function, got {type(fn).__name__}")
    _plugs[point] = fn


def plugged(point: str) -> Callable[..., Any] | None:
    """What was plugged at `point`, or None when nothing was."""
    if point not in POINTS:
        raise ValueError(f"unknown plug point {point!r}; the points are {', '.join(POINTS)}")
    return _plugs.get(point)
