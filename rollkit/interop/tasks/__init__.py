"""Bring your own tasks: other frameworks' tasks as rollkit tasks (`rk.tasks_from`).

`tasks_from(source, **options)` turns a source another framework defines into
a list of `rk.Task`s that open, step, evaluate, fork and replay as rollkit's
own do, scored by that framework's own scorer code:

- inspect-ai (rollkit.interop.tasks.inspect_tasks): a `Task`, a `@task`
  function, `"file.py@name"`, or `"PACKAGE/NAME"` (a task an installed
  package registers with inspect);
- reasoning-gym (rollkit.interop.tasks.reasoning_gym_tasks):
  `"reasoning_gym:NAME"` with `size=`, `seed=` and the dataset's config, or a
  dataset object;
- verifiers v1 (rollkit.interop.tasks.verifiers_tasks): a `vf.Taskset`, a
  Taskset class (with `config=` or its fields), or `"verifiers:TASKSET_ID"`;
  `judge=` names the endpoint its config-plugged judges call.

Which adapter takes a source is decided here, from the source's shape alone
(a string's prefix or file suffix, the module an object's class comes from),
so neither framework is imported until its adapter runs. A third framework
plugs in by adding one `Source` to `SOURCES`. This package owns the
adapters only: it does not run rollouts (its tasks are ordinary `rk.Task`
subclasses) and does not import `rollkit.notebook` or `rollkit.examples`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...core.errors import UsageError
from .tasklist import INSPECT_REGISTRY_NAME, TaskList

__all__ = ["INSPECT_REGISTRY_NAME", "Source", "SOURCES", "TaskList", "tasks_from"]


def _type_modules(source: Any) -> set[str]:
    """The top-level packages of the classes `source` is an instance of."""
    return {(getattr(kind, "__module__", "") or "").split(".")[0] for kind in type(source).__mro__}


@dataclass(frozen=True)
class Source:
    """One framework rollkit takes tasks from: how to recognise its sources
    without importing it, and the module whose `build(source, **options)`
    makes the tasks."""

    framework: str
    extra: str
    module: str
    prefixes: tuple[str, ...] = ()  # strings "PREFIX..." it takes
    suffixes: tuple[str, ...] = ()  # strings "file.SUFFIX" or "file.SUFFIX@name" it takes
    packages: tuple[str, ...] = ()  # objects whose class (or a base) comes from these packages
    takes: Callable[[Any], bool] | None = None  # anything else it recognises (e.g. a decorated function)
    accepts: str = ""  # what it accepts, for the error that lists them

    def claims(self, source: Any) -> bool:
        if isinstance(source, str):
            path = source.split("@", 1)[0]
            return (bool(self.prefixes) and source.startswith(self.prefixes)) or (
                bool(self.suffixes) and path.endswith(self.suffixes)) or (self.takes is not None and self.takes(source))
        if _type_modules(source) & set(self.packages):
            return True
        return self.takes is not None and self.takes(source)

    def build(self, source: Any, **options: Any) -> TaskList:
        module = importlib.import_module(self.module)
        return module.build(source, **options)


def _inspect_task(source: Any) -> bool:
    """A @task function, or a string naming a task an installed (or missing)
    package registers with inspect ("inspect_evals/gsm8k")."""
    if isinstance(source, str):
        return INSPECT_REGISTRY_NAME.fullmatch(source) is not None and not os.path.exists(source)
    info = getattr(source, "__registry_info__", None)
    return callable(source) and getattr(info, "type", None) == "task"


def _verifiers_taskset_class(source: Any) -> bool:
    return isinstance(source, type) and any(
        (kind.__module__ or "").startswith("verifiers.") and kind.__name__ == "Taskset" for kind in source.__mro__)


SOURCES: list[Source] = [
    Source("inspect-ai", "inspect", "rollkit.interop.tasks.inspect_tasks", suffixes=(".py",), packages=("inspect_ai",),
           takes=_inspect_task,
           accepts="an inspect-ai Task, a @task function, 'file.py@name', or 'PACKAGE/NAME' (a task an installed "
                   "package registers, e.g. 'inspect_evals/gsm8k')"),
    Source("reasoning-gym", "reasoning-gym", "rollkit.interop.tasks.reasoning_gym_tasks", prefixes=("reasoning_gym:",),
           packages=("reasoning_gym",),
           accepts="'reasoning_gym:NAME' (with size= and seed=) or a reasoning-gym dataset"),
    Source("verifiers", "verifiers", "rollkit.interop.tasks.verifiers_tasks", prefixes=("verifiers:",),
           packages=("verifiers",), takes=_verifiers_taskset_class,
           accepts="a verifiers v1 Taskset (or its class, with config= or its fields) or 'verifiers:TASKSET_ID'"),
]


def tasks_from(source: Any, **options: Any) -> TaskList:
    """The tasks of `source` (see the module's docstring for what it may be),
    as a `TaskList` of `rk.Task`s scored by the source framework's own scorers."""
    for known in SOURCES:
        if known.claims(source):
            return known.build(source, **options)
    accepted = "; ".join(s.accepts for s in SOURCES)
    shown = repr(source) if isinstance(source, str) else f"a {type(source).__module__}.{type(source).__qualname__}"
    raise UsageError(f"rk.tasks_from cannot take {shown}: it takes {accepted}")
