"""The error model of rollkit, in one place.

Four mechanisms live here and nowhere else:

1. The vocabulary: every failure recorded on a trace is a `RolloutError`
   subclass naming the boundary that broke (L31): `TaskError` (task code),
   `HarnessError` (the agent program, agent timeouts included),
   `ProviderError` (the model call), `SandboxError` (the runtime) and
   `ToolsetError` (tool servers).
2. Classification: `crossing(boundary)` wraps a plain exception raised behind
   a boundary into that boundary's type; an already typed error passes
   through unchanged.
3. The record: `ErrorInfo.from_exception` turns an error into the data a trace
   keeps (type, message, traceback, phase).
4. What is not a failure: `Refused` is a clean stop (a limit or a @stop
   refused a model call), and `LifetimeError` is the caller's bug (a borrowed
   runtime that its owner stopped, L3), raised to the caller, never recorded.

This module must not import anything else from rollkit: every other module
depends on it.
"""

from __future__ import annotations

import contextlib
import traceback as _traceback
from collections.abc import Iterator

__all__ = [
    "RolloutError",
    "TaskError",
    "HarnessError",
    "ProviderError",
    "SandboxError",
    "ToolsetError",
    "LifetimeError",
    "Refused",
    "crossing",
]


class RolloutError(Exception):
    """A failure that a rollout records on its trace."""

    boundary: str = "rollout"


class TaskError(RolloutError):
    """Task code failed: setup, finalize, a reward, a metric or a hook."""

    boundary = "task"


class HarnessError(RolloutError):
    """The agent program failed, or ran out of agent time."""

    boundary = "harness"


class ProviderError(RolloutError):
    """The model call failed. `status` is the HTTP status where one applies."""

    boundary = "provider"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SandboxError(RolloutError):
    """The runtime (the box the harness runs in) failed."""

    boundary = "runtime"


class ToolsetError(RolloutError):
    """A tool server failed to start, serve or stop."""

    boundary = "tools"


class Refused(Exception):
    """The session refused a model call: a limit or a @stop ended the rollout.

    A clean stop, not a failure, so it is no RolloutError: it passes through
    `crossing` untouched and the rollout reads it as "stopped". `condition` is
    the trace's stop_condition.
    """

    def __init__(self, condition: str) -> None:
        super().__init__(f"rollout stopped: {condition}")
        self.condition = condition


class LifetimeError(RuntimeError):
    """A lifetime bug in the calling program, not a failure of the rollout.

    Raised when a borrowed runtime is already stopped at open, or stopped by its
    owner while the rollout runs (L3). It goes to the caller and is never
    recorded on the trace: the rollout did nothing wrong.
    """


@contextlib.contextmanager
def crossing(error_type: type[RolloutError], where: str) -> Iterator[None]:
    """Wrap plain exceptions raised inside into `error_type` (L31).

    `where` names the code that ran ("task.setup", "reward 'correct'") and
    prefixes the message, so a trace says which function broke. Typed errors,
    cancellations and lifetime errors pass through unchanged.
    """
    try:
        yield
    except (RolloutError, LifetimeError, Refused):
        raise
    except Exception as exc:
        message = str(exc) or type(exc).__name__
        raise error_type(f"{where}: {type(exc).__name__}: {message}") from exc


def format_traceback(exc: BaseException) -> str:
    return "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__))
