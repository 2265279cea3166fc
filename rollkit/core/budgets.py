"""Budgets: how much a rollout may spend, by count and by time.

`RolloutLimits` (turns, tokens and dollars, L11) and `RolloutTimeouts` (seconds per
phase; the agent budget is cumulative, L9) are frozen values checked when
built. This module only describes budgets: the session checks the limits,
the rollout keeps the deadlines. It imports nothing of rollkit, so every
module may use it (`rk.RolloutLimits` and `rollkit.core.agent` re-export it).
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["RolloutLimits", "RolloutTimeouts"]


class RolloutLimits(BaseModel):
    """Turn, token and dollar budgets; None means no limit. Each is checked
    before a model call against the trace aggregate of the same name (L11,
    L12; `max_cost_usd` against `trace.cost_usd`, priced by
    rollkit.core.prices: the model must have a price, or the rollout is
    refused at open, and rk.evaluate refuses once before any rollout).
    `max_user_turns` caps the turns a `rk.User` takes (rollkit.core.users).

    `cost_cap` says how `max_cost_usd` holds. "soft", the default: like the
    token limits, checked before each call against what was spent, so the
    call that crosses the limit runs (soft by one turn). "hard": a call is
    also refused when its worst case could cross the limit: its
    `max_tokens` (or the model's `output_limit()` where the call sends
    none) at the model's output rate, after a prompt as long as the last
    call's whole exchange (input and output tokens; the first call: none);
    a model whose output limit is unknown is refused at open."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    # How often a rk.User may speak in a run with one (agent.run(task,
    # user=...)); the turn past it is refused and the run stops with
    # stop_condition "max_user_turns".
    max_user_turns: int | None = None
    # Dollars; soft by one turn like the token limits (L12). Left out of a
    # dump when unset, so traces without it read as before.
    max_cost_usd: float | None = Field(default=None, exclude_if=functools.partial(operator.is_, None))
    # "soft" (default) or "hard", see above; left out of a dump when soft.
    cost_cap: Literal["soft", "hard"] = Field(default="soft", exclude_if=functools.partial(operator.eq, "soft"))

    @field_validator("max_cost_usd", mode="before")
    @classmethod
    def _dollars(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
            raise ValueError(f"max_cost_usd must be a number of dollars >= 0, or None for no limit; got {value!r}")
        return float(value)

    @field_validator("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "max_user_turns",
                     mode="before")
    @classmethod
    def _whole_and_non_negative(cls, value: Any, info: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"{info.field_name} must be a whole number >= 0, or None for no limit; got {value!r}"
            )
        return value


class RolloutTimeouts(BaseModel):
    """Seconds per phase; None means no deadline. `agent` is cumulative over
    all segments and charged only while the agent runs (L9)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    setup: float | None = 120.0
    agent: float | None = None
    finalize: float | None = 120.0
    scoring: float | None = 120.0
    # Harness cleanup, tool services and runtime stop each get this long;
    # a hung teardown only warns, it never hangs close().
    teardown: float | None = 30.0

    @field_validator("*", mode="before")
    @classmethod
    def _positive(cls, value: Any, info: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"timeout {info.field_name} must be a number of seconds > 0, or None; got {value!r}")
        return float(value)
