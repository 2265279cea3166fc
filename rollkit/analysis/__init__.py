"""Analysis: what finished runs say, without running anything.

What this room owns: statistics (`stats`: intervals, paired tests, a run's
cost), group signals over a task's rollouts (`groups`: pass@k, best-of-n),
paired comparison of two runs (`compare`: `rk.compare`), and the DataFrames
of traces and runs (`frames`: `rk.frames`).

It reads runs through the tables room and imports the core below it; it
never runs a rollout (A/B tests and turn values run rollouts: the runs
room), reads no other tool's format, and never imports the notebook.
"""

from __future__ import annotations

from ..core.lazy import lazy_names

_LAZY = {
    "compare": (".compare", "compare"),
    "Comparison": (".compare", "Comparison"),
    "CompareError": (".compare", "CompareError"),
    "pass_at_k": (".groups", "pass_at_k"),
    "best_of_n": (".groups", "best_of_n"),
}

__all__ = list(_LAZY)

__getattr__ = lazy_names(__name__, globals(), _LAZY)
