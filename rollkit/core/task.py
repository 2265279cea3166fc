"""Tasks: the data of one problem (`TaskData`) and the behaviour around it
(`Task`: setup, finalize, hooks, tools).

A task says what is asked and how the answer is judged; it never drives a
rollout. Subclass `TaskData` to add fields (it is frozen, so a task's key is
stable), and subclass `Task` to add `setup`, `finalize`, `@reward`, `@metric`,
`@stop`, `@intercept` and `@tool` methods. Set `Data` on the subclass to build
tasks from keyword arguments: `Arithmetic(prompt="2+2?", answer=4)`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from .tools import Toolset, tools_of

__all__ = ["TaskData", "Task"]


class TaskData(BaseModel):
    """The data of one task. `prompt` opens the conversation; a task without
    one needs a user to speak first (L4). `id`, when given, is the task's key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str | None = None
    system_prompt: str | None = None
    id: str | None = None

    @functools.cached_property
    def key(self) -> str:
        if self.id is not None:
            return self.id
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, default=str)
        return hashlib.sha1(f"{type(self).__name__}:{blob}".encode()).hexdigest()[:12]


class Task:
    """Behaviour around a `TaskData`. Hook methods are found by their
    decorators; `toolsets` lists tool services, and `@tool` methods on the task
    itself form one more toolset named after the class."""

    Data: ClassVar[type[TaskData]] = TaskData
    toolsets: list[Toolset] = []

    def __init__(self, data: TaskData | None = None, /, **fields: Any) -> None:
        if data is not None and fields:
            raise TypeError("pass either a TaskData or keyword fields, not both")
        if data is None:
            data = self.Data(**fields)
        elif not isinstance(data, TaskData):
            raise TypeError(f"a Task needs a TaskData, got {type(data).__name__}")
        self.data = data

    @property
    def key(self) -> str:
        return self.data.key

    @property
    def name(self) -> str:
        return type(self).__name__

    async def setup(self, ctx: Any) -> None:
        """Prepare the world for this task (runs under the setup deadline, L5)."""

    async def finalize(self, ctx: Any) -> None:
        """Collect what scoring needs from the runtime before it is torn down."""

    def all_toolsets(self) -> list[Toolset]:
        own = tools_of(self)
        extra = [Toolset(own, name=self.name)] if own else []
        return [*self.toolsets, *extra]

    def __repr__(self) -> str:
        return f"{self.name}({self.data!r})"
