"""The error model of rollkit, in one place.

Every error rollkit raises on purpose is a `RollkitError`; `except
rk.RollkitError` catches them all, `except rk.UsageError` the caller's
mistakes alone. The tree (the classes defined elsewhere live beside the code
that raises them, and name their base here):

    RollkitError
    ├── RolloutError               a failure a rollout records on its trace (L31)
    │   ├── TaskError              task code: setup, finalize, a reward, a metric, a hook
    │   │   └── JudgeNotNamed      (interop.tasks.verifiers_tasks) a reward called its task's judge, no judge= named
    │   ├── HarnessError           the agent program, agent timeouts included
    │   ├── ProviderError          the model call
    │   │   └── ContextLengthExceeded  (programs.openai_model) the request did not fit the model's window
    │   ├── SandboxError           the runtime
    │   ├── ToolsetError           tool servers
    │   └── ResourceError          rollkit's own: out of descriptors, a Ray worker lost again and again
    ├── Refused                    a clean stop: a limit or a @stop refused a model call
    ├── UsageError                 the caller did something wrong; never recorded
    │   ├── RolloutStateError      (also RuntimeError) not now: the rollout's state forbids it
    │   │   ├── RolloutBusy        an action is in flight: wait for it or abort it
    │   │   └── RolloutEnded       the exchange is over: read the trace, close it
    │   ├── LifetimeError          (also RuntimeError) a borrowed runtime its owner stopped (L3)
    │   ├── NobodyToAsk            (also RuntimeError; core.human) a human model with no one to ask
    │   ├── ForkError              (also ValueError; core.prefix) no such turn or branch to fork
    │   ├── EvaluateArgumentError  (also ValueError or TypeError; runs.evaluation)
    │   ├── RunFolderError         (also ValueError; tables.runfolder) a folder that holds another run
    │   ├── CompareError           (also ValueError; analysis.compare)
    │   ├── TurnValueError         (also ValueError; runs.turnvalues)
    │   ├── ABTestError            (also ValueError; runs.ab)
    │   └── ExportTooLarge         (notebook.export) a run too large to export whole without --where or --limit
    ├── TraceFileError             (also ValueError; core.safe_read) a file that is not a trace
    └── Unavailable                a part rollkit needs is not installed or not reachable
        ├── HarnessUnavailable     (also RuntimeError; programs.harnesses) the agent program
        └── RayUnavailable         (also ConnectionError; runs.ray_backend) the Ray cluster

The second bases keep `except ValueError` (and the like) working for callers
who wrote it before the tree existed.

Four mechanisms live here and nowhere else:

1. The vocabulary: every failure recorded on a trace is a `RolloutError`
   subclass naming the boundary that broke (L31): `TaskError` (task code),
   `HarnessError` (the agent program, agent timeouts included),
   `ProviderError` (the model call), `SandboxError` (the runtime) and
   `ToolsetError` (tool servers); and `ResourceError` where rollkit's own
   resources failed (its process ran short of file descriptors, a Ray
   worker was lost), which no boundary's code caused.
2. Classification: `crossing(boundary)` wraps a plain exception raised behind
   a boundary into that boundary's type, except a shortage of the process's
   descriptors (EMFILE, ENFILE, anywhere in its causes), which becomes a
   `ResourceError`: the code that hit it is only where the shortage showed,
   not its cause (a program flooding a server holds them). An already typed
   error passes through unchanged.
3. The record: `ErrorInfo` is a failure as a trace keeps it;
   `ErrorInfo.from_exception` turns an error into it (type, boundary,
   message, traceback, phase). `rollkit.core.trace` re-exports it.
4. What is not a failure: `Refused` is a clean stop (a limit or a @stop
   refused a model call), `LifetimeError` is the caller's bug (a borrowed
   runtime that its owner stopped, L3), and `RolloutEnded` is a turn or a
   step asked of an exchange that is over (`Interaction.turn`, the
   notebook's `ro.step`). All three go to the caller and are never
   recorded.

This module must not import anything else from rollkit: every other module
depends on it.
"""

from __future__ import annotations

import contextlib
import errno
import time
import traceback as _traceback
from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "RollkitError",
    "UsageError",
    "RolloutStateError",
    "RolloutBusy",
    "Unavailable",
    "RolloutError",
    "TaskError",
    "HarnessError",
    "ProviderError",
    "SandboxError",
    "ToolsetError",
    "ResourceError",
    "LifetimeError",
    "Refused",
    "RolloutEnded",
    "ErrorInfo",
    "crossing",
]


class RollkitError(Exception):
    """The base of every error rollkit raises on purpose (the tree above)."""


class UsageError(RollkitError):
    """The caller did something wrong (a bad option, an action at the wrong
    time, a name that does not exist); the message says what to do instead.
    Never recorded on a trace: the rollout did nothing wrong."""


class RolloutStateError(UsageError, RuntimeError):
    """The rollout's state forbids this now (already opened, not between
    segments); the message names the state and what to do."""


class RolloutBusy(RolloutStateError):
    """An action (a step, an open, a close, a fork) is in flight on this
    rollout: wait for it or abort it."""


class Unavailable(RollkitError):
    """Something rollkit needs is not installed or cannot be reached; the
    message says how to get it."""


class RolloutError(RollkitError):
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


class ResourceError(RolloutError):
    """rollkit's own resources failed this rollout: its process ran short of
    file descriptors, or the Ray worker running it was lost (again and
    again). Not the fault of its task, harness, model or runtime; the
    rollout may succeed when run again with fewer beside it, a higher limit
    (`ulimit -n`) or a healthy cluster."""

    boundary = "rollkit"


def _shortage(exc: BaseException) -> OSError | None:
    """The descriptor shortage behind `exc` (itself or a cause), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            return exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


class Refused(RollkitError):
    """The session refused a model call: a limit or a @stop ended the rollout.

    A clean stop, not a failure, so it is no RolloutError: it passes through
    `crossing` untouched and the rollout reads it as "stopped". `condition` is
    the trace's stop_condition.
    """

    def __init__(self, condition: str) -> None:
        super().__init__(f"rollout stopped: {condition}")
        self.condition = condition


class LifetimeError(UsageError, RuntimeError):
    """A lifetime bug in the calling program, not a failure of the rollout.

    Raised when a borrowed runtime is already stopped at open, or stopped by its
    owner while the rollout runs (L3). It goes to the caller and is never
    recorded on the trace: the rollout did nothing wrong.
    """


class RolloutEnded(RolloutStateError):
    """A turn or a step was asked of a rollout whose exchange is over; the
    message says why it ended and what to do (read the trace, close it)."""


class ErrorInfo(BaseModel):
    """A failure as a trace keeps it: typed by the boundary that broke (L31)."""

    model_config = ConfigDict(extra="forbid")

    type: str
    boundary: str
    message: str
    phase: str | None = None
    status: int | None = None
    traceback: str = ""
    time: float = Field(default_factory=time.time)

    @classmethod
    def from_exception(cls, exc: BaseException, phase: str | None) -> ErrorInfo:
        return cls(
            type=type(exc).__name__,
            boundary=getattr(exc, "boundary", "unknown"),
            message=str(exc),
            phase=phase,
            status=getattr(exc, "status", None),
            traceback=format_traceback(exc),
        )


@contextlib.contextmanager
def crossing(error_type: type[RolloutError], where: str) -> Iterator[None]:
    """Wrap plain exceptions raised inside into `error_type` (L31).

    `where` names the code that ran ("task.setup", "reward 'correct'") and
    prefixes the message, so a trace says which function broke. Typed errors,
    cancellations and lifetime errors pass through unchanged. A shortage of
    this process's descriptors becomes a `ResourceError` instead, also where
    code behind the boundary already typed it (raised from the shortage).
    """
    try:
        yield
    except RolloutError as exc:
        # A typed error raised *from* a descriptor shortage (a harness that
        # could not start its program for want of a pipe) blames the wrong side.
        if isinstance(exc, ResourceError) or exc.__cause__ is None or _shortage(exc.__cause__) is None:
            raise
        raise _out_of_descriptors(where, exc) from exc
    except (LifetimeError, Refused):
        raise
    except Exception as exc:
        if _shortage(exc) is not None:
            raise _out_of_descriptors(where, exc) from exc
        raise error_type(f"{where}: {type(exc).__name__}: {str(exc) or type(exc).__name__}") from exc


def _out_of_descriptors(where: str, exc: BaseException) -> ResourceError:
    return ResourceError(
        f"{where}: rollkit's process ran out of file descriptors ({type(exc).__name__}: {str(exc) or '?'}); not "
        "this rollout's fault: run fewer rollouts at once, cap what their programs may open, or raise the "
        "limit (ulimit -n)")


def format_traceback(exc: BaseException) -> str:
    return "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__))
