"""Budget forecast: which limit will end a rollout, and at about which turn.

From the turns a trace has so far, each limit's use is projected forward at
its rate per turn, and the turn it would bind at is worked out the way the
session checks it (L11, L12). The rate is the marginal one, what each turn
after the first added (`per_turn_rate`): the first turn also carries the
prompt, which later turns do not pay again; with one turn only, that turn's
use is all there is to go by.

- `max_turns` N: the run does N turns, then the next call is refused;
- a token limit: the first turn after which the total has reached the
  limit is the last one (the turn that crosses still completes; the next
  call is refused). Already reached: the turn it was reached at;
- agent time (`timeouts.agent`): it runs out during a turn, which fails the
  run (L10); `ends_after` counts the turns completed before it.

The limit with the smallest `ends_after` binds first. A limit that could
only bind after it is unreachable: it never ends this rollout, whatever its
value (the reported pain of caps that contradict each other: a token cap
tripping at turn 5 of a 12-turn budget). A limit whose use does not grow is
unreachable too. With no turn yet there is no rate: only `max_turns` has a
forecast. A run that has ended (a stop, an error, an abort, closed) has
nothing left to forecast: limits it reached say so, the others are "not
reached". This module computes rows of plain values; `rk.frames.forecast`
makes the DataFrame and the panel shows `forecast_text`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from .session import LIMIT_NAMES
from .trace import Trace

__all__ = ["Forecast", "forecast", "forecast_text", "as_columns", "per_turn_rate", "ended"]


@dataclass
class Forecast:
    """One limit's forecast. `ends_after`: the turns the run would have done
    when this limit ends it (None: it would not). `per_turn`: the use per
    turn it is projected at (`per_turn_rate`; agent time: its average).
    `note` says it in words."""

    limit: str
    value: float
    used: float
    per_turn: float | None
    ends_after: int | None
    reached: bool
    binds_first: bool = False
    reachable: bool = True
    note: str = ""


def _cumulative(turns: list[Any], attr: str) -> list[float]:
    return [getattr(call, attr) for call in turns]


def per_turn_rate(series: list[float]) -> float | None:
    """How much a limit's use grows per turn, from its running totals after
    each turn: the marginal rate `(last - first) / (turns - 1)` (the first
    turn carries the prompt), or the one turn's use; None with no turn."""
    if not series:
        return None
    if len(series) == 1:
        return float(series[0])
    return (series[-1] - series[0]) / (len(series) - 1)


def ended(trace: Trace) -> str | None:
    """Why the run is over ("ended by max_turns", ...), or None while it can go on."""
    if trace.aborted:
        return "ended: aborted"
    if trace.stop is not None:
        return f"ended by {trace.stop}"
    if trace.completed:
        return "ended: no limit was reached"
    return None


def _token_forecast(name: str, limit: int, series: list[float]) -> Forecast:
    n = len(series)
    used = series[-1] if series else 0.0
    rate = per_turn_rate(series)
    for k, value in enumerate(series, start=1):
        if value >= limit:
            return Forecast(name, limit, used, rate, k, True)
    if rate is None:
        return Forecast(name, limit, used, None, 0 if limit <= 0 else None, limit <= 0)
    if rate <= 0:
        return Forecast(name, limit, used, rate, None, False)
    return Forecast(name, limit, used, rate, n + max(1, math.ceil((limit - used) / rate)), False)


def _time_forecast(budget: float, used: float, n: int) -> Forecast:
    if n == 0 or used <= 0:
        return Forecast("agent_time", budget, used, None, None, used >= budget)
    rate = used / n
    # It runs out during turn k where k * rate first exceeds the budget; the
    # turns before it completed.
    during = math.floor(budget / rate) + 1
    return Forecast("agent_time", budget, used, rate, max(n, during - 1), used >= budget)


def forecast(trace: Trace, *, agent_time: float | None = None) -> list[Forecast]:
    """The forecast of every limit `trace` runs under (its `limits` and its
    agent-time budget). `agent_time` is the time charged so far when the
    rollout is still running (Rollout.agent_time); otherwise the trace's."""
    rows: list[Forecast] = []
    committed = trace.turns
    turns = len(committed)
    for name, attr in LIMIT_NAMES.items():
        limit = trace.limits.get(name)
        if limit is None:
            continue
        if name == "max_turns":
            rows.append(Forecast(name, limit, turns, 1.0 if turns else None, limit, turns >= limit))
        else:
            series = _cumulative(committed, f"cum_{attr.removeprefix('num_')}")
            if None in series:  # a turn's cost is unknown: no forecast of the dollar limit
                continue
            rows.append(_token_forecast(name, limit, series))
    budget = trace.timeouts.get("agent")
    if budget is not None:
        used = trace.agent_time if agent_time is None else agent_time
        rows.append(_time_forecast(budget, used, turns))
    over = ended(trace)
    if over is None:
        _rank(rows)
    else:
        _settle(rows, trace, over)
    return rows


def _settle(rows: list[Forecast], trace: Trace, over: str) -> None:
    """An ended run: what it reached, and nothing projected."""
    for row in rows:
        if row.reached:
            row.binds_first = row.limit == trace.stop_condition
            row.note = f"{row.limit} {_when(row)}"
        else:
            row.ends_after, row.reachable = None, False
            row.note = f"{row.limit}: not reached ({over})"


def _when(row: Forecast) -> str:
    if row.reached:
        return f"reached at turn {row.ends_after}" if row.limit != "agent_time" else "used up"
    if row.limit == "agent_time":
        return f"runs out during turn {row.ends_after + 1}"  # type: ignore[operator]
    return f"at about turn {row.ends_after}"


def _rank(rows: list[Forecast]) -> None:
    known = [r for r in rows if r.ends_after is not None]
    # Ties: a turn or token limit before agent time (it refuses the call
    # that would have run out of time).
    first = min(known, key=lambda r: (r.ends_after, r.limit == "agent_time")) if known else None
    for row in rows:
        if row is first:
            row.binds_first = True
            row.note = f"binds first: {row.limit} {_when(row)}"
        elif row.ends_after is None and row.per_turn is None:
            row.note = f"{row.limit}: no forecast yet (no turn so far)"
        elif row.ends_after is None:
            row.reachable = False
            row.note = f"{row.limit} is unreachable: its use does not grow"
        elif first is not None and row.ends_after > first.ends_after:  # type: ignore[operator]
            row.reachable = False
            row.note = (f"{row.limit} is unreachable: {first.limit} ends the run first "
                        f"(about turn {first.ends_after}; this one at about turn {row.ends_after})")
        else:
            row.note = f"{row.limit} {_when(row)} as well"


def forecast_text(trace: Trace, *, agent_time: float | None = None, rows: list[Forecast] | None = None) -> str:
    """One line: which limit binds first and when, and which cannot bind
    (`rows`: the trace's forecast when the caller has it already)."""
    over = ended(trace)
    if over is not None:
        return over
    rows = forecast(trace, agent_time=agent_time) if rows is None else rows
    first = next((r for r in rows if r.binds_first), None)
    if first is None:
        return "no limits to forecast" if not rows else "no forecast yet: no turn so far"
    unreachable = [r.limit for r in rows if not r.reachable]
    return first.note + (f" ({', '.join(unreachable)} unreachable)" if unreachable else "")


def as_columns(rows: list[Forecast]) -> dict[str, list[Any]]:
    """Rows as columns (for a DataFrame)."""
    return {f.name: [getattr(r, f.name) for r in rows] for f in fields(Forecast)}
