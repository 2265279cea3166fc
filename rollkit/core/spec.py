"""What a rollout runs: a frozen description, built by the agent.

`RolloutSpec` names everything one rollout needs from outside its task: the
model, the harness, where its runtime comes from (a factory, or one runtime
lent to every rollout), the budgets, the signals the harness and the judges
add, the network policy, a name, the event bus of whoever else listens
(the agent's subscribers), and the clock it reads time from. `rk.Agent` builds one per rollout from its
configuration (`agent.spec`); a `Rollout` reads only this, never the agent,
so the rollout sits below the agent. This module checks nothing and runs
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .budgets import RolloutLimits, RolloutTimeouts
from .clock import SYSTEM_CLOCK, Clock
from .events import EventBus
from .harness import Harness
from .hooks import BoundHook
from .models import Model
from .runtime import NetworkPolicy, Runtime

__all__ = ["RolloutSpec", "SpecSource"]


@dataclass(frozen=True, eq=False)
class RolloutSpec:
    """Model, harness, runtime factory, budgets, signals, network policy and
    name of one rollout; `events` hears every event of the rollout too."""

    model: Model
    harness: Harness
    runtime: Runtime | Callable[[], Runtime]
    limits: RolloutLimits
    timeouts: RolloutTimeouts
    # @metric hooks of the harness, then the judges' @reward/@metric (L29).
    signals: tuple[BoundHook, ...]
    network: NetworkPolicy
    name: str
    events: EventBus
    # What the rollout and its session read time from (rollkit.core.clock).
    clock: Clock = field(default=SYSTEM_CLOCK)

    @property
    def lends_runtime(self) -> bool:
        """One runtime lent to every rollout (its owner keeps it alive)."""
        return isinstance(self.runtime, Runtime)

    def make_runtime(self) -> Runtime:
        if isinstance(self.runtime, Runtime):
            raise TypeError("this agent lends one runtime to all rollouts; it cannot make owned ones")
        return self.runtime()

    def describe(self) -> dict[str, Any]:
        """What a trace records as its agent: the name, the model's and the harness's own description."""
        return {"name": self.name, **self.model.describe(), **self.harness.describe()}


class SpecSource(Protocol):
    """Whatever describes a rollout to run (`rk.Agent` is one)."""

    @property
    def spec(self) -> RolloutSpec: ...
