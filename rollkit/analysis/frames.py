"""DataFrames of traces: `rk.frames`, the runs layer's tables as pandas.

This module owns the DataFrame builders. The five the columnar store has a
table for (rollouts, turns, calls, phases, signals) are built by the one
engine of rollkit.tables.rows, which also owns the column vocabulary (re-exported
here: `rk.frames.ROLLOUT_COLUMNS` ...): traces go through its row builder as
their saved lines would (`Trace.model_dump(mode="json")`), then Arrow and
pandas the way a lazy run reads the store's Parquet (`rows.shaped`), so an
eager frame and the store's frame of the same traces are one computation.
A path or a lazy run is read from its tables (rollkit.tables.lazyrun), no
`Trace` built.

The builders, each `traces -> pandas.DataFrame`, one row per thing. Every
frame has `example_id`, `repeat` and `rollout_id` right after the trace `id`,
read from `trace.info` where a batch evaluation wrote them (missing otherwise).

- `rollouts(traces)`: one row per rollout (ids, task, where an `rk.tasks_from`
  task came from (`source_framework`, `source_version`, `source_task`,
  `source_sample`), outcome, ok, stop, error,
  reward, one column per reward `reward.<name>` and per metric `metric.<name>`
  (the `signal_values` of its record: missing unless scored), turns, token
  totals and `cost_usd` (dollars: rollkit.core.prices; NaN where a price is
  unknown, never 0), agent/model/harness time and one duration column per
  phase `phase.<name>`; `wait_time` is the time spent waiting for the user
  between segments, which costs no agent time).
- `turns(traces)`: one row per committed turn, with the cumulative budget
  columns right after it and the limits they count against.
- `calls(traces)`: one row per model call, answered or not: its dialect,
  start and latency, usage with cache tokens, finish reason, what the model
  returned (reply text, reasoning, the names of the tools it called) or the
  error it raised, and its logprob sum and mean.
- `phases(traces)`: one row per phase span that started, with its dollars.
- `signals(traces)`: one row per reward or metric, with why it is missing
  when it is (`rollkit.core.outcome.MissingSignal`: "run failed", "run
  aborted", "scoring raised", "scoring timed out", "returned None", "not in
  the source").
- `user_turns(traces)`, `branches(traces)`, `forecast(trace_or_rollout)`,
  `compare(a, b)`: frames the store has no table for, built from the objects.

Each builder takes traces, or the path of a trace file (any format `rk.load`
reads) or run folder, or a lazy run: a path or a lazy run is read through
its columnar tables, no `Trace` built.

Missing stays missing: NaN in numeric columns (pandas NA in the token
counts, which are nullable integers: a count the provider did not report is
NA, never 0), None elsewhere. An empty input gives an empty frame with the
same columns.

This module reads traces and builds frames; it builds no row itself
(rollkit.tables.rows does), writes no file (rollkit.tables.columns does), runs
nothing and draws nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from typing import Any

from ..core.dependencies import pd
from ..core.forecast import as_columns, forecast as forecast_rows
from ..core.gcpause import paused
from ..core.outcome import MissingSignal
from ..core.store import check_traces, load
from ..core.trace import Trace
from .compare import Comparison, compare as compare_traces
from ..tables.lazyrun import LazyRun, open_run
from ..tables.rows import (BRANCH_COLUMNS, CALL_COLUMNS, COMPARE_COLUMNS, MESSAGE_COLUMNS, PHASE_COLUMNS, ROLLOUT_COLUMNS,
                   SIGNAL_COLUMNS, TURN_COLUMNS, USER_TURN_COLUMNS, INFO_IDS, TableRows, arrow_table,
                   large_strings, num_or_nan, trace_rows, arrow_frame)

__all__ = [
    "rollouts", "turns", "calls", "phases", "signals", "user_turns", "branches", "forecast", "compare",
    "ROLLOUT_COLUMNS", "COMPARE_COLUMNS", "TURN_COLUMNS", "CALL_COLUMNS", "PHASE_COLUMNS", "SIGNAL_COLUMNS",
    "MESSAGE_COLUMNS", "USER_TURN_COLUMNS", "BRANCH_COLUMNS",
]

# Why a signal has no value: the texts of the `why_missing` column, one
# definition (rollkit.core.outcome.MissingSignal), kept here by name.
RUN_FAILED = MissingSignal.RUN_FAILED
RUN_ABORTED = MissingSignal.RUN_ABORTED
NOT_SCORED = MissingSignal.NOT_SCORED
SCORING_RAISED = MissingSignal.SCORING_RAISED
SCORING_TIMED_OUT = MissingSignal.SCORING_TIMED_OUT
RETURNED_NONE = MissingSignal.RETURNED_NONE
NOT_IN_SOURCE = MissingSignal.NOT_IN_SOURCE


# ---- the builders -------------------------------------------------------------------

# What no store frame reads, left out of each trace's record (the messages
# are most of a trace; a reply is on its call in the record).
_UNREAD = {"messages", "user_turns"}
# What each frame's rows never read of a trace (dumping it is half the work).
_PAYLOADS = {"__all__": {"reply", "tokens", "request"}}
_UNREAD_BY_KIND: dict[str, dict[str, Any]] = {
    "turns": {**dict.fromkeys(_UNREAD, True), "model_calls": _PAYLOADS}, "calls": dict.fromkeys(_UNREAD, True),
    "rollouts": {**dict.fromkeys(_UNREAD, True), "model_calls": _PAYLOADS},
    "phases": {**dict.fromkeys(_UNREAD, True), "segments": True, "model_calls": _PAYLOADS},
    "signals": {**dict.fromkeys(_UNREAD, True), "segments": True, "model_calls": True},
}


def trace_list(traces: Iterable[Trace] | str | os.PathLike[str]) -> list[Trace]:
    if isinstance(traces, (str, os.PathLike)):  # a trace file (any format rk.load reads), or a run folder
        return load(traces)
    if isinstance(traces, LazyRun):
        return traces.traces()
    return check_traces(traces, who="a frame", hint="(e.g. rk.load('runs/traces.jsonl')), or a trace file's path")


def _no_gc(build: Callable[..., Any]) -> Callable[..., Any]:
    """Build with the cyclic collector paused (rollkit.core.gcpause): a
    frame makes millions of objects and frees none, so a collection would
    only walk them again."""

    @functools.wraps(build)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with paused():
            return build(*args, **kwargs)

    return wrapper


@_no_gc
def _stored_frame(kind: str, traces: Any) -> Any:
    """Frame `kind` of traces, a path or a lazy run. A path or a lazy run is
    read from its tables; traces go through the row builder as their saved
    lines would."""
    if isinstance(traces, (str, os.PathLike)):
        traces = open_run(traces)
    if isinstance(traces, LazyRun):
        return traces.frame(kind)
    rows = TableRows((kind,))  # the rows of that frame only
    unread = _UNREAD_BY_KIND[kind]
    for ordinal, trace in enumerate(trace_list(traces)):
        trace_rows(rows, trace.model_dump(mode="json", exclude=unread), ordinal, 0, 0)
    return arrow_frame(kind, large_strings(arrow_table(rows, kind)))


def rollouts(traces: Iterable[Trace]) -> Any:
    """One row per rollout. Reward and metric columns (`reward.<name>`,
    `metric.<name>`) are NaN where a signal is missing, was never computed
    or the run was not scored; `reward` is NaN for a run that was not
    scored (L23)."""
    return _stored_frame("rollouts", traces)


def turns(traces: Iterable[Trace]) -> Any:
    """One row per committed turn (model call answered and kept), with the
    budget totals right after it (`cum_*`) and the limits they count
    against (NaN: no limit). `agent_budget` is the agent-time budget in
    seconds (L9)."""
    return _stored_frame("turns", traces)


def calls(traces: Iterable[Trace]) -> Any:
    """One row per model call, answered or not, in the order calls ended:
    `call` its index, `latency` end - start in seconds, the usage counts
    (NA: not reported), `reply` the text the model returned, `reasoning`
    its thinking, `tool_calls` the names of the tools it called, joined by
    ", " ("" when it called none; None when no reply came back),
    `request_messages` how many messages its request held, the error it
    raised, `timing_issue` when an importer had to mend its times, and of
    the reply's tokens (where the endpoint returned them, see
    `ModelCall.tokens`; the lists themselves stay on the trace) the sum and
    mean of their logprobs (NaN: none returned) and `has_token_ids`."""
    return _stored_frame("calls", traces)


def phases(traces: Iterable[Trace]) -> Any:
    """One row per phase span that started, in lifecycle order. `offset` is
    the start in seconds after the rollout's first phase began; `duration`
    is NaN for a span that never ended (a trace saved before close); the
    agent phase carries the rollout's dollars (`Trace.cost_by_phase`)."""
    return _stored_frame("phases", traces)


def signals(traces: Iterable[Trace]) -> Any:
    """One row per reward or metric of each rollout.

    A run that was not scored (it failed, was aborted, or never closed) has
    no signals of its own; it gets one row per signal its task type has in
    the other traces given, all missing with `why_missing` saying why (or a
    single row with no name when no other trace names them), so a failure
    never silently drops out of a report."""
    return _stored_frame("signals", traces)


# ---- frames the store has no table for ------------------------------------------


def _columns_frame(columns: dict[str, list[Any]], order: Iterable[str]) -> Any:
    return pd.DataFrame({name: columns[name] for name in order}, columns=list(order))


def _ids(cols: dict[str, list[Any]], trace: Trace) -> None:
    """Append the trace id and the batch ids from `trace.info` (None if absent)."""
    info = trace.info
    cols["id"].append(trace.id)
    for name in INFO_IDS:
        cols[name].append(info.get(name))


@_no_gc
def user_turns(traces: Iterable[Trace]) -> Any:
    """One row per user turn: `by` (which rk.User, "person" for someone in a
    notebook), `text` (what the user said), `replying_to` (the agent reply it
    answered) and, for a rk.RecordedUser replay, `similarity` and `diverged`
    (NaN / None for other users)."""
    traces = trace_list(traces)
    cols: dict[str, list[Any]] = {name: [] for name in USER_TURN_COLUMNS}
    for trace in traces:
        for turn in trace.user_turns:
            _ids(cols, trace)
            cols["task_key"].append(trace.task.key)
            cols["user_turn"].append(turn.index)
            cols["segment"].append(turn.segment)
            cols["by"].append(turn.by)
            cols["text"].append("\n".join(m.content or "" for m in turn.messages))
            cols["replying_to"].append(turn.replying_to)
            cols["similarity"].append(num_or_nan(turn.similarity))
            cols["diverged"].append(turn.diverged)
    return _columns_frame(cols, USER_TURN_COLUMNS)


def _fork_of(trace: Trace) -> tuple[str, int] | None:
    origin = trace.info.get("forked_from")
    if isinstance(origin, (list, tuple)) and len(origin) == 2:
        return str(origin[0]), int(origin[1])
    return None


@_no_gc
def branches(traces: Iterable[Trace]) -> Any:
    """One row per branch: each original that was forked and each fork of it
    (a fork of a fork too), rows of one tree together, the original first.
    `root` is the original's id, `split_turn` the turn after which a fork
    left its parent (None for the original), `turns_after_split` what it did
    on its own. Traces that are neither forked nor forks are left out."""
    traces = trace_list(traces)
    by_id = {trace.id: trace for trace in traces}
    children: dict[str, list[Trace]] = {}
    for trace in traces:
        origin = _fork_of(trace)
        if origin is not None:
            children.setdefault(origin[0], []).append(trace)
    cols: dict[str, list[Any]] = {name: [] for name in BRANCH_COLUMNS}

    def add(trace: Trace, root: str, label: str) -> None:
        origin = _fork_of(trace)
        split = origin[1] if origin else None
        cols["id"].append(trace.id)
        cols["root"].append(root)
        cols["branch"].append(label)
        cols["forked_from"].append(origin[0] if origin else None)
        cols["split_turn"].append(split)
        cols["task_key"].append(trace.task.key)
        cols["model"].append(trace.agent.get("model"))
        cols["ok"].append(trace.ok)
        cols["stop"].append(trace.stop)
        cols["reward"].append(num_or_nan(trace.scored_reward))
        cols["turns"].append(trace.num_turns)
        cols["turns_after_split"].append(trace.num_turns - (split or 0))
        cols["total_tokens"].append(trace.num_total_tokens)
        cols["agent_time"].append(trace.agent_time)
        for number, child in enumerate(children.get(trace.id, []), start=1):
            add(child, root, f"{label}/fork@{_fork_of(child)[1]}#{number}")  # type: ignore[index]

    for trace in traces:
        origin = _fork_of(trace)
        is_root = origin is None or origin[0] not in by_id  # a fork whose parent is not given roots its tree
        if is_root and (origin is not None or trace.id in children):
            add(trace, trace.id, "original" if origin is None else f"fork@{origin[1]} of {origin[0]}")
    return _columns_frame(cols, BRANCH_COLUMNS)


def forecast(source: Any) -> Any:
    """The budget forecast of a trace, or of a rollout still running (a
    `rk.Rollout` or a notebook rollout, whose agent time so far counts):
    one row per limit, `ends_after` the turn it would end the run after,
    `binds_first`, `reachable`, and a `note` in words."""
    trace = source if isinstance(source, Trace) else getattr(source, "trace", None)
    if not isinstance(trace, Trace):
        raise TypeError(f"forecast takes a rk.Trace or a rollout, got {type(source).__name__}")
    running = None if isinstance(source, Trace) else getattr(source, "agent_time", None)
    columns = as_columns(forecast_rows(trace, agent_time=running))
    return pd.DataFrame(columns, columns=list(columns))


def compare(a: Any, b: Any = None, **options: Any) -> Any:
    """One row per (task, signal) of a paired comparison (`rk.compare`;
    per (task, repeat) with `by="repeat"`): the value in run A and in B,
    B - A, and the outcome seen from B ("win", "tie", "loss", "missing in A",
    "missing in B", "missing in both", "only in A", "only in B"). `a` is a
    `Comparison`, or two runs and the options of `rk.compare`. Missing
    values are NaN and keep their row."""
    comparison = a if isinstance(a, Comparison) else compare_traces(a, b, **options)
    columns: dict[str, list[Any]] = {name: [] for name in COMPARE_COLUMNS}
    for row in comparison.rows:
        for name in COMPARE_COLUMNS:
            value = row[name]
            columns[name].append(num_or_nan(value) if name in ("a", "b", "diff") else value)
    return _columns_frame(columns, COMPARE_COLUMNS)
