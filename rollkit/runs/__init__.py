"""Runs: many rollouts at once, on one machine or a Ray cluster.

What this room owns: `evaluate` (a task set times `repeats`, bounded
concurrency, a progress bar, resume after a crash) and its plan, the one
place a rollout of a run is run (`runner`), sequential and interrupted runs,
the Ray backend, a run's live state and the sinks that hear of it as it goes
(`live`), and the experiments that run rollouts to answer a question: paired
A/B tests (`ab`) and the value of each turn (`turnvalues`).

It writes run folders and their live tables through the tables room, reads
statistics and comparisons from the analysis room and sends spans through
the interop room; it never imports `rollkit.notebook` or `rollkit.examples`:
the demo task set of `rollkit demo` is the one thing it gets from above,
through a plug point (`rollkit.core.plugins`); a monitor over a run is the
notebook layer's wrapper of `evaluate`. The names below load on first use
(tqdm and Ray stay unloaded until needed).
"""

from __future__ import annotations

from ..core.lazy import lazy_names
from .. import interop  # noqa: F401 - registers the trace formats rk.load and rk.save know

_LAZY = {
    "evaluate": (".evaluation", "evaluate"),
    "evaluate_async": (".evaluation", "evaluate_async"),
    "load_run": (".evaluation", "load_run"),
    "EvalResult": (".evaluation", "EvalResult"),
    "EvaluateArgumentError": (".evaluation", "EvaluateArgumentError"),
    "RayBackend": (".ray_backend", "RayBackend"),
    "RayUnavailable": (".ray_backend", "RayUnavailable"),
}

__all__ = list(_LAZY)


__getattr__ = lazy_names(__name__, globals(), _LAZY)
