"""What `rk.tasks_from` returns: a list of tasks that also says how many
times its source runs each. Holds no framework code."""

from __future__ import annotations

from ...core.task import Task

__all__ = ["TaskList"]


class TaskList(list):  # type: ignore[type-arg]
    """The tasks of one source, in its order. `repeats` is how many times the
    source runs each (an inspect task's `epochs`; 1 otherwise), which
    `rk.evaluate(agent, tasks)` uses when not given `repeats=`."""

    def __init__(self, tasks: list[Task], repeats: int = 1) -> None:
        super().__init__(tasks)
        self.repeats = repeats
