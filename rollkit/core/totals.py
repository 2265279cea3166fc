"""A rollout's reward and token totals: the one rule each is computed by.

This module owns two rules, over plain values so that a `Trace` and a
trace's JSON record (a saved line, parsed) both call them:

- `scored_reward`: the weighted sum of the rewards that have a value
  (a weight defaults to 1.0, added left to right: `sum_in_order`), None
  when the run was not scored or no reward has a value: a missing reward
  is never a 0 (L23, L30). `record_reward` reads it off a JSON record.
- `token_totals`: (input, output, total) tokens of a rollout, the last
  committed turn's running totals; a total is None where one of its turns
  did not report that count (NA, never 0), (0, 0, 0) before any turn.
  `record_token_totals` reads them off a JSON record's model calls.
- `cost_total`: the rollout's dollars: the source's own total when an
  importer recorded one, else the last call's running total (None: a
  turn's price is unknown, NA, never 0), 0.0 before any call.
  `record_cost` reads it off a JSON record.

`Trace.scored_reward`, its `num_*_tokens` and `cost_usd`, the row engine
(rollkit.tables.rows) and the training exports (rollkit.interop.exports)
call these; the native SQL build (rollkit.tables.nativebuild) cannot call
Python, so tests/test_totals_parity.py holds its columns to these rules
over every fixture.

It imports nothing of rollkit but `sums`; it reads values and returns
numbers, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .sums import sum_in_order

__all__ = ["scored_reward", "record_reward", "token_totals", "record_token_totals", "cost_total", "record_cost"]


def scored_reward(scored: bool, rewards: Mapping[str, Any], weights: Mapping[str, Any]) -> float | None:
    """The weighted sum of the `rewards` that have a value, or None when the
    run was not `scored` or none has one."""
    valued = [(name, value) for name, value in rewards.items() if value is not None]
    if not scored or not valued:
        return None
    return float(sum_in_order(value * weights.get(name, 1.0) for name, value in valued))


def record_reward(record: Mapping[str, Any]) -> float | None:
    """`scored_reward` of a trace's JSON record (scored: it has a scoring phase)."""
    return scored_reward("scoring" in (record.get("phases") or {}), record.get("rewards") or {},
                         record.get("reward_weights") or {})


def token_totals(last: Sequence[Any] | None, unreported_input: bool,
                 unreported_output: bool) -> tuple[int | None, int | None, int | None]:
    """Input, output and total tokens from the last committed turn's running
    totals `last` (cum input, cum output, cum total; None: no turn yet);
    `unreported_*`: whether some turn did not report that count."""
    if last is None:
        return 0, 0, 0
    cum_input, cum_output, cum_total = (int(v or 0) for v in last)
    return (None if unreported_input else cum_input,
            None if unreported_output else cum_output,
            None if unreported_input or unreported_output else cum_total)


def record_token_totals(calls: Iterable[Mapping[str, Any]]) -> tuple[int | None, int | None, int | None]:
    """`token_totals` of a JSON record's model calls (only committed ones count)."""
    last = None
    unreported_input = unreported_output = False
    for call in calls:
        if call.get("committed"):
            last = call
            usage = call.get("usage") or {}
            unreported_input = unreported_input or usage.get("input_tokens") is None
            unreported_output = unreported_output or usage.get("output_tokens") is None
    return token_totals(None if last is None else (last.get("cum_input_tokens"), last.get("cum_output_tokens"),
                                                   last.get("cum_total_tokens")), unreported_input, unreported_output)


def cost_total(imported: Any, last_running_total: Any, called: bool) -> float | None:
    """The rollout's dollars: `imported` (the source's own total) when there
    is one, else the last call's `last_running_total` (None: unknown), 0.0
    when no call was `called`."""
    if imported is not None:
        return float(imported)
    if not called:
        return 0.0
    return None if last_running_total is None else float(last_running_total)


def record_cost(record: Mapping[str, Any]) -> float | None:
    """`cost_total` of a trace's JSON record."""
    calls = record.get("model_calls") or ()
    return cost_total((record.get("info") or {}).get("cost_usd"), calls[-1].get("cum_cost_usd") if calls else None,
                      bool(calls))
