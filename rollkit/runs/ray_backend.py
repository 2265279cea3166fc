"""The Ray backend of `rollkit.evaluate`: the same evaluation, rollouts on a
Ray cluster.

`RayBackend` owns only where rollouts run. It starts a few async Ray actors,
sends each the agent once, and then sends them (task, ids) pairs; each actor
runs many rollouts at once on its own event loop through the same
`run_rollout` (rollkit.runs.runner) as the local backend, and returns the finished trace as JSON.
The driver awaits each result as it finishes, so the progress bar, the trace
file, resume and group scoring (rollkit.runs.evaluation, rollkit.tables.runfolder and
rollkit.analysis.groups) behave exactly as locally. Cancelling the driver cancels the
actor calls in flight, which abort their rollouts; `stop` waits (bounded) for
those aborts before it kills the actors, so the workers free their runtimes.

The Parquet tables of a Ray run (rollkit.tables.columns) are those of a local
run: the driver appends every trace to the one `traces.jsonl` and writes
the tables' parts (shards by byte range) as it goes
(rollkit.tables.livetables); the workers write nothing. Ray Data reads them as they are
(`ray.data.read_parquet(".../.rollkit/traces.jsonl/rollouts")`).

A worker that dies mid-rollout (its node removed or crashed, the actor
killed) took that rollout with it, before anything was recorded: the
rollout runs again on a new actor, which Ray places on a node still alive,
up to `retries` times, with a warning on its trace; past that it is
recorded as rollkit's `ResourceError`. Either way each (task, repeat)
lands in the run folder once.

Needs the `rollkit[ray]` extra. Tasks and agents travel by cloudpickle, so
their classes must be importable on the workers (a local Ray instance started
here gets this process's import path; on a cluster, install them there).
This module must not be imported by `import rollkit`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from typing import Any
from urllib.parse import urlparse

from ..core.agent import Agent
from ..core.errors import ResourceError, Unavailable
from ..core.task import Task
from ..core.trace import Trace
from .runner import failure_trace, run_rollout

__all__ = ["RayBackend", "RayUnavailable"]

log = logging.getLogger("rollkit")


class RayUnavailable(Unavailable, ConnectionError):
    """Ray is not installed, or the cluster cannot be reached."""


class _RolloutActor:
    """Runs rollouts of one agent, many at once, on the actor's event loop."""

    def __init__(self, agent: Agent, user: Any = None) -> None:
        self.agent = agent
        self.user = user

    async def run(self, task: Task, info: dict[str, Any]) -> list[str]:
        """The trace, then the user's own traces (an AgentUser's), as JSON."""
        trace = await run_rollout(self.agent, task, info, self.user)
        return [trace.model_dump_json(), *(t.model_dump_json() for t in trace.user_traces)]


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
    `abort_wait`: after an interruption, how many seconds `stop` waits for
    the workers to abort the rollouts in flight (freeing their runtimes)
    before it kills the actors anyway. `retries`: how many times a rollout
    whose worker died runs again on a new actor. `actor_options` go to the
    actors' `.options(...)` (e.g. `{"scheduling_strategy": "SPREAD"}`, or
    custom `resources` to keep them on chosen nodes).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        actors: int | None = None,
        connect_timeout: float = 5.0,
        init: dict[str, Any] | None = None,
        abort_wait: float = 10.0,
        retries: int = 2,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        if actors is not None and (isinstance(actors, bool) or not isinstance(actors, int) or actors < 1):
            raise ValueError(f"actors must be a whole number >= 1, got {actors!r}")
        if isinstance(abort_wait, bool) or not isinstance(abort_wait, (int, float)) or abort_wait < 0:
            raise ValueError(f"abort_wait must be a number of seconds >= 0, got {abort_wait!r}")
        self.address = address
        self.actors = actors
        self.connect_timeout = connect_timeout
        self.init_options = dict(init or {})
        self.abort_wait = float(abort_wait)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a whole number >= 0, got {retries!r}")
        self.retries = retries
        self.actor_options = dict(actor_options or {})
        self._make_actor: Any = None
        self._ray: Any = None
        self._owns = False
        self._agent: Agent | None = None
        self._pool: list[Any] = []
        self._load: list[int] = []
        # Calls submitted and not yet answered, cancelled ones included until
        # `stop` has seen them end: killing an actor before its cancelled
        # call finished aborting would leave the rollout's runtime running.
        self._unsettled: set[Any] = set()

    def check(self) -> None:
        """Before anything is written: Ray is installed and the address answers."""
        self._ray = _import_ray()
        if self.address is not None:
            _check_reachable(self.address, self.connect_timeout)

    async def start(self, agent: Agent, concurrency: int, user: Any = None) -> None:
        ray = self._ray or _import_ray()
        self._ray = ray
        self._agent = agent
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, **self.init_options}
            if self.address is None:
                # A local instance: workers get this process's import path, so
                # task classes from the caller's modules unpickle there.
                path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
                env = options.setdefault("runtime_env", {}).setdefault("env_vars", {})
                env.setdefault("PYTHONPATH", path)
                # Its servers on loopback: left alone, Ray binds them to the
                # machine's network address, reachable from other hosts.
                options.setdefault("_node_ip_address", "127.0.0.1")
            try:
                ray.init(address=self.address, **options)
            except ConnectionError as exc:
                raise RayUnavailable(f"cannot connect to Ray at {self.address!r}: {exc}") from None
            self._owns = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        count = max(1, min(self.actors or cpus, concurrency))
        actor = ray.remote(num_cpus=1, max_concurrency=max(1, concurrency))(_RolloutActor)
        if self.actor_options:
            actor = actor.options(**self.actor_options)
        agent_ref, user_ref = ray.put(agent), ray.put(user)
        self._make_actor = lambda: actor.remote(agent_ref, user_ref)
        self._pool = [self._make_actor() for _ in range(count)]
        self._load = [0] * count

    async def run(self, task: Task, info: dict[str, Any]) -> Trace:
        lost: list[str] = []
        while True:
            trace = await self._run_once(task, info, lost)
            if trace is not None:
                for why in lost:
                    trace.record_warning(f"ran again: its Ray worker was lost ({why})")
                return trace

    def _lost_worker(self, exc: BaseException) -> bool:
        errors = self._ray.exceptions
        kinds = tuple(getattr(errors, name) for name in ("RayActorError", "WorkerCrashedError", "NodeDiedError",
                                                        "ActorUnavailableError", "ObjectLostError")
                      if hasattr(errors, name))
        return isinstance(exc, kinds)

    async def _run_once(self, task: Task, info: dict[str, Any], lost: list[str]) -> Trace | None:
        """The rollout's trace, or None when its worker died and it may run again."""
        # The least busy actor takes the next rollout.
        index = min(range(len(self._pool)), key=self._load.__getitem__)
        self._load[index] += 1
        actor, ref = self._pool[index], None
        try:
            # Submitting pickles the task, which may fail (TypeError): inside the try.
            ref = actor.run.remote(task, info)
            self._unsettled.add(ref)
            payload = await ref
            self._unsettled.discard(ref)
            trace = Trace.model_validate_json(payload[0])
            trace.record_user_traces([Trace.model_validate_json(p) for p in payload[1:]])
            return trace
        except asyncio.CancelledError:
            if ref is not None:
                # The actor aborts the rollout; `stop` waits for that to end
                # (the ref stays unsettled until then) before killing actors.
                try:
                    self._ray.cancel(ref)
                except Exception:  # `stop` cancels it again; the cancellation must go on
                    pass
            raise
        except Exception as exc:
            # Whatever kept this rollout from coming back (a worker or actor
            # that died, a task that cannot be pickled, ...) is its failure,
            # on its trace, not the end of the run (L32).
            self._unsettled.discard(ref)
            if self._lost_worker(exc):
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                lost.append(why)
                if self._pool[index] is actor:  # the first call to see it dead replaces it
                    self._pool[index] = self._make_actor()
                if len(lost) <= self.retries:
                    log.warning("rollout %s: its Ray worker was lost (%s); it runs again", info.get("rollout_id"), why)
                    return None
                exc = ResourceError(f"the Ray worker running this rollout was lost {len(lost)} times, the last: "
                                    f"{why}; the cluster lost nodes or workers (see `ray status`)")
            return failure_trace(self._agent, task, info, exc, phase="ray")  # type: ignore[arg-type]
        finally:
            self._load[index] -= 1

    async def _settle(self) -> None:
        """Cancel what is still unanswered and wait, at most `abort_wait`
        seconds, for the workers to finish aborting those rollouts."""
        refs = list(self._unsettled)
        self._unsettled.clear()
        if not refs:
            return
        for ref in refs:
            try:
                self._ray.cancel(ref)  # a no-op for a call already cancelled or finished
            except Exception:  # its actor or node is already gone: nothing left to abort
                pass
        waiting = [asyncio.wrap_future(ref.future()) for ref in refs]
        _, late = await asyncio.wait(waiting, timeout=self.abort_wait)
        for future in waiting:
            if future.done() and not future.cancelled():
                future.exception()  # TaskCancelledError, expected: mark it retrieved
        if late:
            for future in late:
                future.cancel()
            log.warning(
                "%d rollouts on Ray workers were still aborting after %ss; their actors are killed now, "
                "so runtimes they started may be left running (raise RayBackend(abort_wait=...))",
                len(late), self.abort_wait,
            )

    async def stop(self) -> None:
        ray = self._ray
        await self._settle()
        for actor in self._pool:
            try:
                ray.kill(actor)
            except Exception:  # already gone with its node: nothing to free
                pass
        self._pool = []
        if self._owns:
            ray.shutdown()
            self._owns = False

