"""Turn values: the chance of success from each turn of a rollout, by forking.

`turn_values(trace, agent, n=16)` forks `trace` after each of its turns
(rollkit.core.forks) and runs `n` continuations from each fork to their end,
plus `n` fresh rollouts of the task (turn 0), all through rk.evaluate's
machinery: at most `concurrency` at once, a progress bar, a run folder with
`out=` and `resume=True`. Each continuation is scored by the task's own
rewards; the success rate from turn k, with a 95% Wilson score interval
(Wilson 1927, "Probable inference, the law of succession, and statistical
inference"), estimates how likely the rollout was to succeed once turn k's
reply was given. The largest drop between consecutive turns marks the
decisive mistake (the "point of no return"), the largest rise the decisive
good move.

A turn whose reply ended the rollout (no tool call: the agent yielded for
good) needs no continuation: its value is the rollout's own outcome.
Continuations that failed (an error, not a wrong answer) are not counted
as failures of the agent: they are `unscored`.

`turn_values_many(traces, agent, n)` does the same for a batch in one run
and answers where failing rollouts go wrong (`drops()`), and
`TurnValueBatch.export(path)` writes the per-turn values as step-level
labels (process reward data) in the layout documented on `export`.

This module owns the sweep and its bookkeeping; the interval is
rollkit.analysis.stats.wilson_interval; the figures are the notebook layer's
(`rk.plots.turn_values`, `rk.plots.drop_turns`, `rk.notebook.TurnValueView`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.agent import Agent
from ..core.errors import UsageError
from ..core.forks import ForkError, prefix_of, task_of
from ..core.messages import AssistantMessage
from ..core.task import Task
from ..core.trace import Trace
from . import interrupts
from .evaluation import EvalResult, execute_plan, plan_run
from ..analysis.stats import wilson_interval
from ..core.dependencies import pa, pandas, pq

if TYPE_CHECKING:
    import pandas

__all__ = ["turn_values", "turn_values_async", "turn_values_many", "turn_values_many_async", "TurnValues",
           "TurnValueBatch", "TurnValueError"]

Success = Callable[[Trace], bool] | float


class TurnValueError(UsageError, ValueError):
    """A sweep that cannot be made as asked; the message names why."""


@dataclass
class _Source:
    trace: Trace
    task: Task
    # Stable name of the source rollout: its rollout_id (else its trace id)
    # and a hash of its conversation, so a resumed sweep never takes the
    # continuations of another trace that had the same rollout_id.
    name: str
    turns: list[int]  # turns to fork after (0 = fresh rollouts of the task)
    final: dict[int, bool]  # turns whose reply ended the rollout -> its own success
    succeeded: bool | None  # the rollout's own outcome (None: failed or unscored)


def _succeeded(success: Success, trace: Trace) -> bool | None:
    """True/False, or None when the trace cannot say (failed or unscored)."""
    if trace.failed:
        return None
    if callable(success):
        return bool(success(trace))
    reward = trace.scored_reward
    return None if reward is None else reward >= success


def _action(trace: Trace, turn: int) -> str:
    """What the agent did at `turn`: its tool calls, or the start of its text."""
    if turn == 0:
        return "(start)"
    message = trace.messages[trace.sampled[turn - 1]]
    if isinstance(message, AssistantMessage) and message.tool_calls:
        return "; ".join(f"{c.name}({_args(c.arguments)})" for c in message.tool_calls)
    text = (getattr(message, "content", None) or "").strip().replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _args(arguments: str) -> str:
    try:
        values = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(values, dict) and len(values) == 1:
        return str(next(iter(values.values())))
    return arguments


def _source(trace: Any, turns: Iterable[int] | None, task: Task | None, success: Success) -> _Source:
    if not isinstance(trace, Trace):
        raise TypeError(f"turn values are of a rk.Trace, got {type(trace).__name__}")
    if trace.user_turns and any(u.by != "caller" or u.index > 0 for u in trace.user_turns):
        raise TurnValueError(
            f"trace {trace.id} is a conversation with a user: its continuations would need the user too; "
            "turn values are of rollouts that run by themselves (no user turns)"
        )
    n = trace.num_turns
    if n == 0:
        raise TurnValueError(f"trace {trace.id} has no committed turn to fork after")
    chosen = list(range(n + 1)) if turns is None else sorted(set(turns))
    for k in chosen:
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
            raise TurnValueError(f"turns must be whole numbers from 0 to {n} (trace {trace.id} has {n} turns), got {k!r}")
    if not callable(success) and (isinstance(success, bool) or not isinstance(success, (int, float))):
        raise TurnValueError(f"success must be a reward threshold (a number) or a function of a trace, got {success!r}")
    final: dict[int, bool] = {}
    if n in chosen:
        last = trace.messages[trace.sampled[n - 1]] if len(trace.sampled) == n else None
        if isinstance(last, AssistantMessage) and not last.tool_calls:
            own = _succeeded(success, trace)
            if own is None:
                raise TurnValueError(f"trace {trace.id} has no scored outcome to value its last turn with")
            final[n] = own
    if task is None:
        try:
            task = task_of(trace)
        except ForkError as exc:
            raise TurnValueError(str(exc)) from None
    for k in chosen:
        if k and k not in final:
            prefix_of(trace, k)  # refuses a failed trace or rewritten history now, naming why
    digest = hashlib.blake2b(
        json.dumps([m.model_dump(mode="json") for m in trace.messages], sort_keys=True).encode(), digest_size=6,
    ).hexdigest()
    name = f"{trace.info.get('rollout_id') or trace.id}~{digest}"
    return _Source(trace, task, name, chosen, final, _succeeded(success, trace))


def _turn_task(task: Task, key: str) -> Task:
    """`task` under another key (the run names each turn's continuations by
    it), its data and everything else untouched: its rewards see the task as
    it is."""
    keyed = copy.copy(task)
    keyed.__class__ = _keyed_class(type(task))
    keyed._turn_key = key  # type: ignore[attr-defined]
    return keyed


@functools.lru_cache(maxsize=None)
def _keyed_class(cls: type) -> type:
    # Same module and qualified name, so the trace records the task's own
    # class (TaskRef) and a fork of a continuation rebuilds it.
    return type(cls.__name__, (cls,), {"key": property(lambda self: self._turn_key),
                                       "__module__": cls.__module__, "__qualname__": cls.__qualname__})


@dataclass
class TurnValues:
    """The success rate from each turn of one rollout (see the module docstring).

    `frame()` has one row per turn: turn, action (what the agent did then),
    n (scored continuations), successes, rate, low and high (95% Wilson),
    unscored, and forked (False for a final turn valued by the rollout's own
    outcome). `continuations` maps each turn to its traces."""

    trace: Trace
    rows: list[dict[str, Any]]
    continuations: dict[int, list[Trace]] = field(default_factory=dict)
    succeeded: bool | None = None  # the rollout's own outcome, None when failed or unscored

    def frame(self) -> pandas.DataFrame:
        return pandas.DataFrame(self.rows, columns=list(_COLUMNS))

    def _steps(self) -> list[tuple[int, float]]:
        values = [(r["turn"], r["rate"]) for r in self.rows if r["rate"] is not None]
        return [(b[0], b[1] - a[1]) for a, b in zip(values, values[1:])]

    @property
    def drop(self) -> tuple[int, float] | None:
        """(turn, change) of the largest fall in the success rate from the
        turn before: the decisive mistake, None when it never falls. It is
        picked after the fact among noisy rates: read it with the intervals
        of the two turns (a fall whose intervals overlap is not yet a
        finding; raise `n`)."""
        falls = [s for s in self._steps() if s[1] < 0]
        return min(falls, key=lambda s: s[1]) if falls else None

    @property
    def rise(self) -> tuple[int, float] | None:
        """(turn, change) of the largest rise: the decisive good move."""
        rises = [s for s in self._steps() if s[1] > 0]
        return max(rises, key=lambda s: s[1]) if rises else None

    def __repr__(self) -> str:
        drop = f", largest drop at turn {self.drop[0]} ({self.drop[1]:+.2f})" if self.drop else ""
        return f"<TurnValues of trace {self.trace.id}: {len(self.rows)} turns{drop}>"

    def _repr_html_(self) -> str:
        return self.frame().to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-")


_COLUMNS = ("turn", "action", "n", "successes", "rate", "low", "high", "unscored", "forked")


@dataclass
class TurnValueBatch:
    """Turn values of many rollouts, from one run: `values[i]` is the
    TurnValues of the i-th source trace; `result` the run's EvalResult."""

    values: list[TurnValues]
    result: EvalResult

    def frame(self) -> pandas.DataFrame:
        """One row per (trace, turn): trace_id, example_id, then TurnValues' columns."""
        rows = [{"trace_id": v.trace.id, "example_id": v.trace.info.get("example_id", v.trace.task.key), **r}
                for v in self.values for r in v.rows]
        return pandas.DataFrame(rows, columns=["trace_id", "example_id", *_COLUMNS])

    def drops(self) -> pandas.DataFrame:
        """Where each rollout went wrong: one row per trace, with its own
        outcome (`succeeded`), the turn of its largest drop and its size
        (NA where the rate never falls)."""
        rows = []
        for v in self.values:
            drop = v.drop
            rows.append({
                "trace_id": v.trace.id, "example_id": v.trace.info.get("example_id", v.trace.task.key),
                "succeeded": pandas.NA if v.succeeded is None else v.succeeded,
                "drop_turn": drop[0] if drop else pandas.NA, "drop": drop[1] if drop else pandas.NA,
                "turns": v.trace.num_turns,
            })
        return pandas.DataFrame(rows).astype({"drop_turn": "Int64", "drop": "Float64"})

    def export(self, path: str | os.PathLike[str]) -> Path:
        """Write the per-turn values as step-level labels (process reward
        data). A `.parquet` path writes Parquet (pyarrow), anything else JSON
        lines; one record per (trace, turn >= 1) with:

        - `trace_id`, `example_id`, `turn` (1-based: the k-th model reply);
        - `messages`: the conversation up to and including that reply, as
          role/content/tool_calls/tool_call_id dicts (the state and the step);
        - `value`: the success rate from after that reply, `low`/`high` its
          95% Wilson interval, `n` scored continuations, `successes`;
        - `delta`: value minus the previous turn's value (the step's own
          contribution; the first turn is compared with turn 0, the task's
          fresh rollouts, when it was valued), null when either is missing.
        """
        target = Path(path)
        records = []
        for v in self.values:
            previous = None
            for row in v.rows:
                if row["turn"] >= 1:
                    upto = v.trace.sampled[row["turn"] - 1] + 1
                    records.append({
                        "trace_id": v.trace.id, "example_id": v.trace.info.get("example_id", v.trace.task.key),
                        "turn": row["turn"],
                        "messages": [m.model_dump(mode="json", exclude_none=True) for m in v.trace.messages[:upto]],
                        "value": row["rate"], "low": row["low"], "high": row["high"], "n": row["n"],
                        "successes": row["successes"],
                        "delta": None if previous is None or row["rate"] is None else row["rate"] - previous,
                    })
                previous = row["rate"]
        if target.suffix == ".parquet":
            for record in records:
                record["messages"] = json.dumps(record["messages"])  # one JSON string: a schema every reader takes
            pq.write_table(pa.Table.from_pylist(records), target)
        else:
            with open(target, "w", encoding="utf-8") as file:
                file.writelines(json.dumps(r) + "\n" for r in records)
        return target


def _values(source: _Source, traces: list[Trace], success: Success) -> TurnValues:
    by_turn: dict[int, list[Trace]] = {}
    for trace in traces:
        by_turn.setdefault(trace.info["_turn"], []).append(trace)
    rows = []
    for k in source.turns:
        if k in source.final:
            won = int(source.final[k])
            rows.append(dict(turn=k, action=_action(source.trace, k), n=1, successes=won, rate=float(won),
                             low=float(won), high=float(won), unscored=0, forked=False))
            continue
        outcomes = [_succeeded(success, t) for t in by_turn.get(k, [])]
        scored = [o for o in outcomes if o is not None]
        wins = sum(scored)
        rate, low, high = (None, None, None) if not scored else (wins / len(scored), *wilson_interval(wins, len(scored)))
        rows.append(dict(turn=k, action=_action(source.trace, k), n=len(scored), successes=wins, rate=rate,
                         low=low, high=high, unscored=len(outcomes) - len(scored), forked=True))
    return TurnValues(source.trace, rows, {k: by_turn.get(k, []) for k in source.turns}, source.succeeded)


async def _sweep(sources: list[_Source], agent: Agent, n: int, success: Success, *, concurrency: int,
                 out: Any, resume: bool, progress: bool) -> tuple[list[TurnValues], EvalResult]:
    tasks: list[Task] = []
    starts: dict[str, Any] = {}
    turn_of: dict[str, tuple[int, int]] = {}
    for i, source in enumerate(sources):
        for k in source.turns:
            if k in source.final:
                continue
            key = f"{source.name}@t{k}"
            if key in turn_of:
                raise TurnValueError(f"two source traces share the name {source.name!r}; give each its own rollout_id")
            turn_of[key] = (i, k)
            tasks.append(_turn_task(source.task, key))
            if k:
                starts[key] = prefix_of(source.trace, k)
    if not tasks:
        result = EvalResult([], [], out=None, manifest={})
    else:
        plan = plan_run(agent, tasks, repeats=n, concurrency=concurrency, out=out, resume=resume, backend="local",
                     progress=progress, group_scorers=None)
        plan.starts = starts
        result = await execute_plan(plan)
    grouped: list[list[Trace]] = [[] for _ in sources]
    for trace in result.traces:
        key = trace.info["rollout_id"].rpartition("#")[0]
        i, k = turn_of[key]
        trace.record_info(_turn=k)
        grouped[i].append(trace)
    values = [_values(source, traces, success) for source, traces in zip(sources, grouped)]
    for trace in result.traces:
        trace.forget_info("_turn")
    return values, result


def _check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TurnValueError(f"n must be a whole number >= 1 (continuations per turn), got {n!r}")
    return n


async def turn_values_async(
    trace: Trace, agent: Agent, *, n: int = 16, turns: Iterable[int] | None = None, task: Task | None = None,
    success: Success = 1.0, concurrency: int = 32, out: str | os.PathLike[str] | None = None,
    resume: bool = False, progress: bool = True,
) -> TurnValues:
    """See `turn_values`."""
    source = _source(trace, turns, task, success)
    values, _ = await _sweep([source], agent, _check_n(n), success, concurrency=concurrency, out=out,
                             resume=resume, progress=progress)
    return values[0]


def turn_values(
    trace: Trace, agent: Agent, *, n: int = 16, turns: Iterable[int] | None = None, task: Task | None = None,
    success: Success = 1.0, concurrency: int = 32, out: str | os.PathLike[str] | None = None,
    resume: bool = False, progress: bool = True,
) -> Any:
    """The chance of success from each turn of `trace`, with `agent` running
    `n` continuations per turn (see the module docstring).

    - `turns`: which turns to value (0 = fresh rollouts of the task; default
      all, 0 to the last);
    - `task`: the trace's task, when it cannot be rebuilt from the trace;
    - `success`: a reward threshold (default 1.0: reward >= 1) or a function
      of a trace returning whether it succeeded;
    - `concurrency`, `out`, `resume`, `progress`: as in rk.evaluate.

    Like rk.evaluate: it runs and returns `TurnValues`; in async code (a
    notebook cell) write `await rk.turn_values_async(...)` (called where an
    event loop runs, it raises a UsageError saying so). Bad arguments are
    refused at once either way (TurnValueError, ForkError).
    """
    source = _source(trace, turns, task, success)
    count = _check_n(n)

    async def sweep() -> TurnValues:
        values, _ = await _sweep([source], agent, count, success, concurrency=concurrency, out=out,
                                 resume=resume, progress=progress)
        return values[0]

    return interrupts.run_sync(sweep(), what="turn-value sweep", called="rk.turn_values(...)",
                               instead="await rk.turn_values_async(...)")


async def turn_values_many_async(
    traces: Iterable[Trace], agent: Agent, *, n: int = 16, success: Success = 1.0, concurrency: int = 32,
    out: str | os.PathLike[str] | None = None, resume: bool = False, progress: bool = True,
) -> TurnValueBatch:
    """See `turn_values_many`."""
    return await _many(_sources(traces, success), agent, _check_n(n), success, concurrency, out, resume, progress)


def turn_values_many(
    traces: Iterable[Trace], agent: Agent, *, n: int = 16, success: Success = 1.0, concurrency: int = 32,
    out: str | os.PathLike[str] | None = None, resume: bool = False, progress: bool = True,
) -> Any:
    """Turn values of every trace in `traces` (every turn, `n` continuations
    each), in one run; returns a `TurnValueBatch`. In async code write
    `await rk.turn_values_many_async(...)` (see `turn_values`)."""
    sources = _sources(traces, success)
    return interrupts.run_sync(_many(sources, agent, _check_n(n), success, concurrency, out, resume, progress),
                               what="turn-value sweep", called="rk.turn_values_many(...)",
                               instead="await rk.turn_values_many_async(...)")


def _sources(traces: Iterable[Trace], success: Success) -> list[_Source]:
    sources = [_source(t, None, None, success) for t in traces]
    if not sources:
        raise TurnValueError("no traces to value: pass at least one rk.Trace")
    return sources


async def _many(sources: list[_Source], agent: Agent, n: int, success: Success, concurrency: int, out: Any,
                resume: bool, progress: bool) -> TurnValueBatch:
    values, result = await _sweep(sources, agent, n, success, concurrency=concurrency, out=out, resume=resume,
                                  progress=progress)
    return TurnValueBatch(values, result)
