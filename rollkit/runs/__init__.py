"""Runs: many rollouts at once, on one machine or a Ray cluster.

What this layer owns: `evaluate` (a task set times `repeats`, bounded
concurrency, a progress bar), run folders (a manifest and trace files
appended as rollouts finish, resume after a crash), group scoring (pass@k,
best-of-n), paired comparison of runs (`compare`), the Ray backend, the
`rollkit` command line, other tools' trace formats (`rollkit.runs.formats`:
inspect-ai, verifiers, tau2-bench, agent trajectories, OpenAI transcripts),
other frameworks' tasks as rollkit tasks (`rk.tasks_from`: inspect-ai,
reasoning-gym), and the tables of traces: one row builder (`rows`) for the DataFrames
(`frames`, `rk.frames`), the columnar store and the live monitor.

It imports the core and the programs layer, never `rollkit.notebook` or
`rollkit.examples`: the demo task set of `rollkit demo` is the one thing it
gets from above, through a plug point (`rollkit.core.plugins`); a monitor
over a run is the notebook layer's wrapper of `evaluate`.
The names below load on first use (tqdm, click and Ray stay unloaded until
needed).
"""

from __future__ import annotations

from ..core._lazy import lazy_names
from . import formats  # noqa: F401 - registers the trace formats rk.load and rk.save know

_LAZY = {
    "evaluate": (".evaluation", "evaluate"),
    "evaluate_async": (".evaluation", "evaluate_async"),
    "load_run": (".evaluation", "load_run"),
    "open_run": (".lazyrun", "open_run"),
    "EvalResult": (".evaluation", "EvalResult"),
    "EvaluateArgumentError": (".evaluation", "EvaluateArgumentError"),
    "RunFolderError": (".runfolder", "RunFolderError"),
    "GroupSignal": (".groups", "GroupSignal"),
    "pass_at_k": (".groups", "pass_at_k"),
    "best_of_n": (".groups", "best_of_n"),
    "compare": (".compare", "compare"),
    "Comparison": (".compare", "Comparison"),
    "CompareError": (".compare", "CompareError"),
    "RayBackend": (".ray_backend", "RayBackend"),
    "RayUnavailable": (".ray_backend", "RayUnavailable"),
    "tasks_from": (".tasks", "tasks_from"),
}

__all__ = list(_LAZY)


__getattr__ = lazy_names(__name__, globals(), _LAZY)
