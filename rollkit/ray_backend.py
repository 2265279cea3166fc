"""The Ray backend of `rollkit.evaluate`: the same evaluation, rollouts on a
Ray cluster.

`RayBackend` owns only where rollouts run. It starts a few async Ray actors,
sends each the agent once, and then sends them (task, ids) pairs; each actor
runs many rollouts at once on its own event loop through the same
`_run_rollout` as the local backend, and returns the finished trace as JSON.
The driver awaits each result as it finishes, so the progress bar, the trace
file, resume and group scoring (rollkit.evaluation, rollkit.runfolder and
rollkit.groups) behave exactly as locally. Cancelling the driver cancels the
actor calls in flight, which abort their rollouts.

Needs the `rollkit[ray]` extra. Tasks and agents travel by cloudpickle, so
their classes must be importable on the workers (a local Ray instance started
here gets this process's import path). This module must not be imported by
`import rollkit`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from typing import Any
from urllib.parse import urlparse

from .agent import Agent
from .task import Task
from .trace import ErrorInfo, TaskRef, Trace

__all__ = ["RayBackend", "RayUnavailable"]


class RayUnavailable(ConnectionError):
    """Ray is not installed, or the cluster cannot be reached."""


class _RolloutActor:
    """Runs rollouts of one agent, many at once, on the actor's event loop."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def run(self, task: Task, info: dict[str, Any]) -> str:
        from .evaluation import _run_rollout

        trace = await _run_rollout(self.agent, task, info)
        return trace.model_dump_json()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("backend='ray' needs Ray: pip install 'rollkit[ray]'") from None
    return ray


def _check_reachable(address: str, timeout: float) -> None:
    """Fail fast on an address nobody listens on: Ray itself retries a dead
    address for minutes before giving up."""
    if address in ("auto", "local"):
        return
    parsed = urlparse(address if "://" in address else f"tcp://{address}")
    host, port = parsed.hostname, parsed.port
    if not host or not port:
        raise RayUnavailable(
            f"Ray address {address!r} is not HOST:PORT (or ray://HOST:PORT); pass the head node's "
            "address, or none for a local Ray instance"
        )
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise RayUnavailable(
            f"cannot reach the Ray cluster at {address!r} ({type(exc).__name__}: {exc}); start it with "
            "`ray start --head`, check the address, or pass no address to run on a local Ray instance"
        ) from None


class RayBackend:
    """`evaluate(..., backend=RayBackend(address=...))`; `backend="ray"` is
    `RayBackend()`: the Ray instance this process already joined, else a new
    local one (shut down again at the end).

    `actors`: how many rollout actors (default: one per CPU of the cluster,
    at most `concurrency`); each takes one CPU and runs up to `concurrency`
    rollouts at once. `init` passes extra keyword arguments to `ray.init`.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        actors: int | None = None,
        connect_timeout: float = 5.0,
        init: dict[str, Any] | None = None,
    ) -> None:
        if actors is not None and (isinstance(actors, bool) or not isinstance(actors, int) or actors < 1):
            raise ValueError(f"actors must be a whole number >= 1, got {actors!r}")
        self.address = address
        self.actors = actors
        self.connect_timeout = connect_timeout
        self.init_options = dict(init or {})
        self._ray: Any = None
        self._owns = False
        self._pool: list[Any] = []
        self._load: list[int] = []

    def check(self) -> None:
        """Before anything is written: Ray is installed and the address answers."""
        self._ray = _import_ray()
        if self.address is not None:
            _check_reachable(self.address, self.connect_timeout)

    async def start(self, agent: Agent, concurrency: int) -> None:
        ray = self._ray or _import_ray()
        self._ray = ray
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, **self.init_options}
            if self.address is None:
                # A local instance: workers get this process's import path, so
                # task classes from the caller's modules unpickle there.
                path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
                env = options.setdefault("runtime_env", {}).setdefault("env_vars", {})
                env.setdefault("PYTHONPATH", path)
            try:
                ray.init(address=self.address, **options)
            except ConnectionError as exc:
                raise RayUnavailable(f"cannot connect to Ray at {self.address!r}: {exc}") from None
            self._owns = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        count = max(1, min(self.actors or cpus, concurrency))
        actor = ray.remote(num_cpus=1, max_concurrency=max(1, concurrency))(_RolloutActor)
        agent_ref = ray.put(agent)
        self._pool = [actor.remote(agent_ref) for _ in range(count)]
        self._load = [0] * count

    async def run(self, task: Task, info: dict[str, Any]) -> Trace:
        # The least busy actor takes the next rollout.
        index = min(range(len(self._pool)), key=self._load.__getitem__)
        self._load[index] += 1
        ref = self._pool[index].run.remote(task, info)
        try:
            payload = await ref
        except asyncio.CancelledError:
            self._ray.cancel(ref)
            raise
        except self._ray.exceptions.RayError as exc:
            # A worker or actor that died is this rollout's failure, on its
            # trace, not the end of the run (L32).
            return _lost(task, info, exc)
        finally:
            self._load[index] -= 1
        return Trace.model_validate_json(payload)

    async def stop(self) -> None:
        ray = self._ray
        for actor in self._pool:
            try:
                ray.kill(actor)
            except Exception:  # already gone with its node: nothing to free
                pass
        self._pool = []
        if self._owns:
            ray.shutdown()
            self._owns = False


def _lost(task: Task, info: dict[str, Any], exc: BaseException) -> Trace:
    trace = Trace(task=TaskRef(type=type(task).__qualname__, key=task.key, data=task.data.model_dump(mode="json")))
    trace.info.update(info)
    trace.errors.append(ErrorInfo.from_exception(exc, "ray"))
    trace.ok = False
    trace.completed = True
    return trace
