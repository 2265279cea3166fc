"""Runtimes: the box a harness program runs in.

A runtime has a lifetime (`start`, `stop`, `stopped`) and an execution network
policy it either enforces or refuses (L6). A rollout either owns its runtime
(creates, starts and stops it) or borrows one that someone else keeps alive;
a borrowed runtime that is stopped is that someone's lifetime bug (L3).

`LocalRuntime` is no box at all: the harness runs in this process. It can
enforce no network restriction, so it refuses any. Runtimes do not know about
rollouts, traces or models.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .cancellation import Overrun, finish
from .errors import SandboxError

__all__ = ["Runtime", "LocalRuntime", "NetworkPolicy"]


class NetworkPolicy(BaseModel):
    """Where programs in the runtime may connect. Empty lists mean no
    restriction. The framework's own routes (interception, tools) are always
    kept reachable, whatever is blocked. Each entry is `*` (every host), a
    host name (`*.example.org` or `.example.org` for a domain), an address
    or a network (`10.0.0.0/8`); addresses are compared in one canonical
    spelling (rollkit.core.network_policy), and one that names no host is
    refused here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow: list[str] = Field(default_factory=list)
    block: list[str] = Field(default_factory=list)

    @field_validator("allow", "block")
    @classmethod
    def _hosts(cls, entries: list[str]) -> list[str]:
        from .network_policy import Rule

        for entry in entries:
            Rule(entry)  # a ValueError naming the entry
        return entries

    @property
    def restricts(self) -> bool:
        return bool(self.allow or self.block)


class Runtime:
    """Base runtime. Subclasses override `_start`, `_stop` and, if they can
    enforce restrictions, `_enforce`."""

    kind = "runtime"
    # Whether a rollout in this runtime can be forked at an earlier turn
    # (rollout.fork): the fork gets a fresh runtime, which is only the same
    # world if the runtime holds no state the turns changed.
    forkable = False
    unforkable_reason = "it cannot be copied as it was at an earlier turn"  # said after "it runs in a X, and"

    def __init__(self) -> None:
        self._state = "new"  # new -> starting -> running -> stopped
        self._stopping: asyncio.Future[None] | None = None

    @property
    def started(self) -> bool:
        return self._state != "new"

    @property
    def stopped(self) -> bool:
        return self._state == "stopped"

    @property
    def alive(self) -> bool:
        return self._state == "running"

    async def start(self) -> None:
        if self._state == "running":
            return
        if self._state == "stopped":
            raise SandboxError(f"{self.kind} runtime was stopped and cannot start again; make a new one")
        # "starting" counts as started, so a start cut short (cancelled, or
        # failed halfway) is still stopped by whoever owns the runtime.
        self._state = "starting"
        await self._start()
        self._state = "running"

    async def stop(self) -> None:
        """Stop the runtime and free what it holds. The stop runs to its end
        even if the caller is cancelled meanwhile (rollkit.core.cancellation):
        marked stopped at once, a stop cut short would never be retried and
        would leave its programs and files behind. A second call waits for
        the first one's stop. Under a deadline (the rollout's teardown
        deadline, rollkit.core.cancellation.deadline) a stop that overruns
        is cancelled, `_abandon` kills what it left, and `Overrun` is raised."""
        if self._stopping is None:
            self._state = "stopped"
            self._stopping = asyncio.ensure_future(self._stop())
        elif self._stopping.cancelled():
            return  # an earlier stop overran and was abandoned
        try:
            await finish(self._stopping)
        except Overrun:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """The stop overran its deadline and was cancelled: free at once,
        without waiting, whatever must not outlive the runtime (subclasses
        that hold processes kill them here)."""

    async def apply_network_policy(self, policy: NetworkPolicy, keep: list[str]) -> dict[str, Any]:
        """Apply `policy`, keeping `keep` (the framework's routes) reachable.
        Returns what is in force, for the trace. Refuses what it cannot enforce."""
        if policy.restricts:
            return await self._enforce(policy, keep)
        return {"enforced": False, "allow": [], "block": [], "kept": list(keep)}

    async def _enforce(self, policy: NetworkPolicy, keep: list[str]) -> dict[str, Any]:
        raise SandboxError(
            f"{self.kind} runtime cannot enforce a network policy (asked: allow={policy.allow}, "
            f"block={policy.block}); use a runtime that can, or drop the policy"
        )

    async def _start(self) -> None:
        pass

    async def _stop(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._state})"


class LocalRuntime(Runtime):
    """No box: the harness runs in this process."""

    kind = "local"
    forkable = True  # it holds nothing: a fresh one is the same world
