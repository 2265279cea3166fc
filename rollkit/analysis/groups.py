"""Group (cross-trace) scoring: judging all the repeats of one task at once.

This module owns group scorers and their results: `GroupSignal` (one scorer's
judgement of one task's traces), the built-in scorers `pass_at_k` and
`best_of_n`, turning the `group_scorers=` argument of `rk.evaluate` into named
scorers, and running a task's scorers (a scorer that raises or returns a
non-number records a missing value with the reason, never a crash).

Group signals (pass@k, best-of-n, ...) are not on the traces, which were
written before the group was complete; they are their own table,
`EvalResult.groups` / `EvalResult.group_signals()`, one line per (task, group
scorer) in a run folder's `groups.jsonl`.

This module does not decide when a group is complete or run rollouts
(rollkit.runs.evaluation does), nor read or write the run folder (rollkit.tables.runfolder
reads groups.jsonl, rollkit.runs.evaluation appends to it). It judges traces only.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.trace import Trace
from ..tables.runfolder import GroupSignal

__all__ = ["GroupScorer", "GroupSignal", "pass_at_k", "best_of_n", "named_scorers", "run_group"]

GroupScorer = Callable[[list[Trace]], Any]


def agent_failed(trace: Trace) -> bool:
    """The agent itself failed (a HarnessError: it crashed or ran out of agent
    time). Spending all the time is a wrong answer, not a finished one (L10),
    so for pass@k such a repeat is an attempt that did not pass. Failures of
    the provider, the runtime, the tools or the task are not the agent's
    answer and stay out."""
    return trace.error is not None and trace.error.type == "HarnessError"


def pass_at_k(k: int, threshold: float = 1.0) -> GroupScorer:
    """Group scorer `pass@k`: the chance that at least one of k repeats drawn
    from the n attempts passes (reward >= threshold), by the unbiased
    estimator 1 - C(n-c, k) / C(n, k), c the passing repeats. Attempts are the
    repeats with a reward plus those where the agent failed (counted as not
    passing, see `agent_failed`); infrastructure failures and aborts are left
    out; with fewer than k attempts the value is missing."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"pass_at_k needs k >= 1, got {k!r}")

    def score(traces: list[Trace]) -> float | None:
        judged = [t for t in traces if t.scored_reward is not None or agent_failed(t)]
        n = len(judged)
        if n < k:
            return None  # not enough repeats to judge: missing, not zero
        c = sum(1 for t in judged if t.scored_reward is not None and t.scored_reward >= threshold)
        if n - c < k:
            return 1.0
        return 1.0 - math.comb(n - c, k) / math.comb(n, k)

    score.__name__ = f"pass@{k}"
    return score


def best_of_n() -> GroupScorer:
    """Group scorer `best_of_n`: the highest reward among the task's scored
    repeats (missing when none was scored, e.g. all failed)."""

    def score(traces: list[Trace]) -> float | None:
        rewards = [t.scored_reward for t in traces if t.scored_reward is not None]
        return max(rewards) if rewards else None

    score.__name__ = "best_of_n"
    return score


def named_scorers(scorers: Any) -> dict[str, GroupScorer]:
    """The `group_scorers=` argument (None, one scorer, a list, or a dict of
    name -> scorer) as name -> scorer; refuses clashing names and non-callables."""
    if scorers is None:
        return {}
    if callable(scorers):
        scorers = [scorers]
    if isinstance(scorers, Mapping):
        named = dict(scorers)
    else:
        named = {}
        for scorer in scorers:
            name = getattr(scorer, "__name__", None) or type(scorer).__name__
            if name in named:
                raise ValueError(f"two group scorers are named {name!r}; pass a dict of name -> scorer")
            named[name] = scorer
    for name, scorer in named.items():
        if not callable(scorer):
            raise TypeError(f"group scorer {name!r} must be a function of a list of traces, got {type(scorer).__name__}")
    return named


async def run_group(example_id: str, traces: list[Trace], scorers: dict[str, GroupScorer]) -> list[GroupSignal]:
    """Judge one task's traces. A scorer that raises records a missing value
    with the reason (as L27 does for a trace's signals), never a crash."""
    results = []
    ordered = sorted(traces, key=lambda t: t.info.get("repeat", 0))
    for name, scorer in scorers.items():
        try:
            value = scorer(list(ordered))
            if inspect.isawaitable(value):
                value = await value
            values = value if isinstance(value, Mapping) else {name: value}
            for key, item in values.items():
                if item is not None and (isinstance(item, bool) or not isinstance(item, numbers.Real)):
                    raise TypeError(f"returned {type(item).__name__} {item!r}; return a number, None, or a mapping")
                number = None if item is None else float(item)
                results.append(GroupSignal(example_id, str(key), number, len(traces), scorer=name))
        except Exception as exc:
            results.append(GroupSignal(example_id, name, None, len(traces), f"{type(exc).__name__}: {exc}", scorer=name))
    return results
