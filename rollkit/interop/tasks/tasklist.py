"""What `rk.tasks_from` returns: a list of tasks that also says how many
times its source runs each; and the shape of a name a package registers an
inspect task under, which both the source table and the inspect adapter
read. Holds no framework code."""

from __future__ import annotations

import re

from ...core.task import Task

__all__ = ["INSPECT_REGISTRY_NAME", "TaskList"]

# "PACKAGE/NAME": a task an installed package registers with inspect (e.g. "inspect_evals/gsm8k").
INSPECT_REGISTRY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*/[A-Za-z_][A-Za-z0-9_.-]*")


class TaskList(list):  # type: ignore[type-arg]
    """The tasks of one source, in its order. `repeats` is how many times the
    source runs each (an inspect task's `epochs`; 1 otherwise), which
    `rk.evaluate(agent, tasks)` uses when not given `repeats=`."""

    def __init__(self, tasks: list[Task], repeats: int = 1) -> None:
        super().__init__(tasks)
        self.repeats = repeats
