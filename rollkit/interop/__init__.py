"""Interop: other tools' files and tasks, in and out.

What this room owns: reading other tools' traces and writing rollkit traces
in their formats (`formats`: inspect-ai, verifiers, tau2-bench, agent
trajectories, ATIF, OpenAI transcripts; registered with the core's format
table so `rk.load` and `rk.save` know them), other frameworks' tasks as
rollkit tasks scored by their own scorers (`tasks`: `rk.tasks_from` for
inspect-ai and reasoning-gym), and what other tools take from finished
rollouts (`exports`: `rk.export` to training rows and OpenTelemetry spans).

It imports the core, the tables room (a run's columns) and the analysis
room, never the runs room or the notebook; each tool's own package is
imported when its format or tasks are first used.
"""

from __future__ import annotations

from ..core.lazy import lazy_names
from . import formats  # noqa: F401 - registers the trace formats rk.load and rk.save know

_LAZY = {
    "tasks_from": (".tasks", "tasks_from"),
}

__all__ = ["formats", *_LAZY]

__getattr__ = lazy_names(__name__, globals(), _LAZY)
