"""DataFrames from traces: the tables a notebook explores after a run.

Nine builders, each `traces -> pandas.DataFrame` (the last two take a
trace or two runs), one row per thing. Every frame has `example_id`,
`repeat` and `rollout_id` right after the trace `id`, read from
`trace.info` where a batch evaluation wrote them (missing otherwise), so a
report can group by task or by rollout.

- `rollouts(traces)`: one row per rollout (ids, task, ok, stop, error,
  reward, one column per reward `reward.<name>` and per metric
  `metric.<name>`, turns, token totals and `cost_usd` (dollars:
  rollkit.core.prices; NaN where a price is unknown, never 0), agent/model/harness time and one
  duration column per phase `phase.<name>`; `wait_time` is the time spent
  waiting for the user between segments, which costs no agent time).
- `turns(traces)`: one row per committed turn, with the cumulative budget
  columns right after it and the limits they count against.
- `calls(traces)`: one row per model call, answered or not: its dialect,
  start and latency, usage with cache tokens, finish reason, and what the
  model returned (reply text, reasoning, the names of the tools it called)
  or the error it raised; replies a program later rewrote out of its
  history included.
- `phases(traces)`: one row per phase span that started, with the dollars
  its model calls cost.
- `signals(traces)`: one row per reward or metric, with why it is missing
  when it is ("run failed", "run aborted", "scoring raised", "scoring timed
  out", "returned None", "not in the source" for a trace imported from a
  tool that did not record it).
- `user_turns(traces)`: one row per time the user spoke (who, what, what it
  answered, and for a replay the similarity and whether the agent diverged).
- `forecast(trace_or_rollout)`: one row per limit, with the turn it would
  end the run at, which binds first and which are unreachable
  (rollkit.core.forecast).
- `compare(a, b)`: one row per (task, signal) of a paired comparison of
  two runs (rk.compare): each run's value, B - A and the outcome.
- `branches(traces)`: one row per branch of a forked rollout (the original
  and each fork, rk.fork): where it split off, reward, stop, turns, tokens.

Each builder takes traces, or the path of a trace file (any format
`rk.load` reads) or run folder, which it loads itself.

Missing stays missing: NaN in numeric columns (pandas NA in the token
counts, which are nullable integers: a count the provider did not report is
NA, never 0), None elsewhere. A rollout's token totals are NA when one of
its turns has no reported usage.
An empty input gives an empty frame with the same columns. Frames are built
column by column from plain lists (one pass over the traces, one DataFrame
constructor call), because thousands of traces are the normal case.

This module only reads traces; it runs nothing and draws nothing.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd

from ..core._gcpause import paused
from ..core.outcome import MissingSignal
from ..core.store import _checked, load
from ..core.trace import PHASES, Trace

__all__ = [
    "rollouts", "turns", "calls", "phases", "signals", "user_turns", "branches", "forecast", "compare",
    "ROLLOUT_COLUMNS", "COMPARE_COLUMNS", "TURN_COLUMNS", "CALL_COLUMNS", "PHASE_COLUMNS", "SIGNAL_COLUMNS", "USER_TURN_COLUMNS", "BRANCH_COLUMNS",
]

_NAN = math.nan
_LIMITS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "max_cost_usd")

# Why a signal has no value: the texts of the `why_missing` column, one
# definition (rollkit.core.outcome.MissingSignal), kept here by name.
RUN_FAILED = MissingSignal.RUN_FAILED
RUN_ABORTED = MissingSignal.RUN_ABORTED
NOT_SCORED = MissingSignal.NOT_SCORED
SCORING_RAISED = MissingSignal.SCORING_RAISED
SCORING_TIMED_OUT = MissingSignal.SCORING_TIMED_OUT
RETURNED_NONE = MissingSignal.RETURNED_NONE
NOT_IN_SOURCE = MissingSignal.NOT_IN_SOURCE

# The ids a batch evaluation writes to `trace.info` (rollkit.runs.evaluation).
_INFO_IDS = ("example_id", "repeat", "rollout_id")

ROLLOUT_COLUMNS = (
    "id", *_INFO_IDS, "task_key", "task_type", "agent", "model", "outcome", "ok", "completed", "aborted",
    "stop", "stop_condition", "error_type", "error_phase", "error_message", "reward",
    "turns", "model_calls", "input_tokens", "output_tokens", "total_tokens", "cost_usd",
    "segments", "agent_time", "model_time", "harness_time", "wait_time",
    *(f"phase.{p}" for p in PHASES),
    "start", "end",
)  # followed by reward.<name> and metric.<name> columns, sorted by name
TURN_COLUMNS = (
    "id", *_INFO_IDS, "task_key", "turn", "call", "segment", "start", "end", "latency",
    "input_tokens", "output_tokens", "new_input_tokens", "finish_reason", "dialect", "cost_usd",
    "cum_turns", "cum_input_tokens", "cum_output_tokens", "cum_total_tokens", "cum_agent_time", "cum_cost_usd",
    *_LIMITS, "agent_budget",
)
CALL_COLUMNS = (
    "id", *_INFO_IDS, "task_key", "call", "segment", "dialect", "committed", "start", "latency",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "new_input_tokens",
    "finish_reason", "reply", "reasoning", "tool_calls", "request_messages", "error_type", "error_message",
    "timing_issue", "completion_logprob_sum", "completion_logprob_mean", "has_token_ids", "cost_usd",
)
# Token counts: nullable integers, NA where not reported.
_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
PHASE_COLUMNS = ("id", *_INFO_IDS, "task_key", "phase", "start", "end", "duration", "offset", "ok", "cost_usd")
USER_TURN_COLUMNS = (
    "id", *_INFO_IDS, "task_key", "user_turn", "segment", "by", "text", "replying_to", "similarity", "diverged",
)
BRANCH_COLUMNS = (
    "id", "root", "branch", "forked_from", "split_turn", "task_key", "model", "ok", "stop", "reward",
    "turns", "turns_after_split", "total_tokens", "agent_time",
)
SIGNAL_COLUMNS = ("id", *_INFO_IDS, "task_key", "task_type", "kind", "name", "value", "weight", "missing", "why_missing", "error")


def _list(traces: Iterable[Trace] | str | os.PathLike[str]) -> list[Trace]:
    if isinstance(traces, (str, os.PathLike)):  # a trace file (any format rk.load reads), or a run folder
        return load(traces)
    if hasattr(traces, "traces") and callable(traces.traces):  # a lazy run (rollkit.runs.lazyrun)
        return traces.traces()
    return _checked(traces, who="a frame", hint="(e.g. rk.load('runs/traces.jsonl')), or a trace file's path")


def _stored(build: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
    """A path is read through its columnar tables (rollkit.runs.lazyrun), a
    lazy run through its own: no Trace is built."""

    @functools.wraps(build)
    def wrapper(traces: Any, *args: Any, **kwargs: Any) -> pd.DataFrame:
        from ..runs.lazyrun import LazyRun, open_run

        if isinstance(traces, (str, os.PathLike)):
            traces = open_run(traces)
        if isinstance(traces, LazyRun):
            return getattr(traces, build.__name__)()
        return build(traces, *args, **kwargs)

    return wrapper


def _no_gc(build: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
    """Build with the cyclic collector paused (rollkit.core._gcpause): a
    frame makes millions of objects and frees none, so a collection would
    only walk them again (the four frames over 50,000 freshly loaded traces:
    11.9 s paused, 13.1 s not, on a loaded machine)."""

    @functools.wraps(build)
    def wrapper(*args: Any, **kwargs: Any) -> pd.DataFrame:
        with paused():
            return build(*args, **kwargs)

    return wrapper


def _num(value: float | None) -> float:
    return _NAN if value is None else value


def _frame(columns: dict[str, list[Any]], order: Iterable[str]) -> pd.DataFrame:
    return pd.DataFrame({name: columns[name] for name in order}, columns=list(order))


def _table(rows: list[tuple[Any, ...]], names: list[str]) -> pd.DataFrame:
    """A frame from one tuple per row: a tuple per row and one transpose at
    the end cost a fraction of appending to each column's list."""
    columns = list(zip(*rows)) if rows else [() for _ in names]
    return pd.DataFrame({name: list(values) for name, values in zip(names, columns)}, columns=names)


def _ids(cols: dict[str, list[Any]], trace: Trace) -> None:
    """Append the trace id and the batch ids from `trace.info` (None if absent)."""
    info = trace.info
    cols["id"].append(trace.id)
    for name in _INFO_IDS:
        cols[name].append(info.get(name))


def _last_turn(trace: Trace) -> Any:
    for call in reversed(trace.model_calls):
        if call.committed:
            return call
    return None


def _waited(trace: Trace) -> float:
    """Wall time between segments: the rollout waiting for its user (L9: free)."""
    segments = trace.segments
    return sum(
        max(0.0, after.start - before.end)
        for before, after in zip(segments, segments[1:])
        if before.end is not None
    )


@_stored
@_no_gc
def rollouts(traces: Iterable[Trace]) -> pd.DataFrame:
    """One row per rollout. Reward and metric columns (`reward.<name>`,
    `metric.<name>`) are NaN where a signal is missing or was never computed;
    `reward` is NaN for a run that was not scored."""
    traces = _list(traces)
    reward_names: dict[str, None] = {}
    metric_names: dict[str, None] = {}
    for trace in traces:
        reward_names.update(dict.fromkeys(trace.rewards))
        metric_names.update(dict.fromkeys(trace.metrics))
    rewards_in, metrics_in = sorted(reward_names), sorted(metric_names)
    rows = []
    for trace in traces:
        error = trace.error
        info, agent, phase_spans = trace.info, trace.agent, trace.phases
        # The last committed call carries the totals (the trace's own running
        # aggregates are private attributes, slow to read through pydantic).
        last = _last_turn(trace)
        durations = []
        start = end = None
        for phase in PHASES:
            span = phase_spans.get(phase)
            if span is None:
                durations.append(_NAN)
                continue
            durations.append(_num(span.duration))
            start = span.start if start is None else min(start, span.start)
            if span.end is not None:
                end = span.end if end is None else max(end, span.end)
        agent_time, model_time = trace.agent_time, trace.model_time
        rewards, metrics = trace.rewards, trace.metrics
        input_tokens, output_tokens, total_tokens = _token_totals(trace, last)
        rows.append((
            trace.id, info.get("example_id"), info.get("repeat"), info.get("rollout_id"),
            trace.task.key, trace.task.type, agent.get("name"), agent.get("model"),
            trace.outcome.label, trace.ok, trace.completed, trace.aborted, trace.stop, trace.stop_condition,
            error.type if error else None, error.phase if error else None, error.message if error else None,
            _num(trace.scored_reward),  # missing, not 0, for a run that was not scored (L23)
            last.cum_turns if last else 0, len(trace.model_calls), input_tokens, output_tokens, total_tokens,
            _num(trace.cost_usd),
            len(trace.segments), agent_time, model_time, max(0.0, agent_time - model_time), _waited(trace),
            *durations, _num(start), _num(end),
            *[_num(rewards.get(name)) for name in rewards_in], *[_num(metrics.get(name)) for name in metrics_in],
        ))
    names = [*ROLLOUT_COLUMNS, *(f"reward.{n}" for n in rewards_in), *(f"metric.{n}" for n in metrics_in)]
    frame = _table(rows, names)
    return frame.astype({"ok": "object", "turns": "int64", "model_calls": "int64", "input_tokens": "Int64",
                         "output_tokens": "Int64", "total_tokens": "Int64"})


def _token_totals(trace: Trace, last: Any) -> tuple[int | None, int | None, int | None]:
    """A rollout's input, output and total tokens (its running totals); None
    (NA) where one of its turns did not report that count."""
    if last is None:
        return 0, 0, 0
    unreported_in = unreported_out = False
    for call in trace.model_calls:
        if call.committed:
            usage = call.usage
            unreported_in = unreported_in or usage.input_tokens is None
            unreported_out = unreported_out or usage.output_tokens is None
    return (None if unreported_in else last.cum_input_tokens, None if unreported_out else last.cum_output_tokens,
            None if unreported_in or unreported_out else last.cum_total_tokens)


@_stored
@_no_gc
def turns(traces: Iterable[Trace]) -> pd.DataFrame:
    """One row per committed turn (model call answered and kept), with the
    budget totals right after it (`cum_*`) and the limits they count
    against (NaN: no limit). `agent_budget` is the agent-time budget in
    seconds (L9)."""
    traces = _list(traces)
    cols: dict[str, list[Any]] = {name: [] for name in TURN_COLUMNS}
    for trace in traces:
        limits = [_num(trace.limits.get(name)) for name in _LIMITS]
        budget = _num(trace.timeouts.get("agent"))
        key = trace.task.key
        number = 0
        for call in trace.model_calls:
            if not call.committed:
                continue
            number += 1
            usage = call.usage
            _ids(cols, trace)
            cols["task_key"].append(key)
            cols["turn"].append(number)
            cols["call"].append(call.index)
            cols["segment"].append(call.segment)
            cols["start"].append(call.start)
            cols["end"].append(call.end)
            cols["latency"].append(call.end - call.start)
            cols["input_tokens"].append(usage.input_tokens)
            cols["output_tokens"].append(usage.output_tokens)
            cols["new_input_tokens"].append(call.new_input_tokens)
            cols["finish_reason"].append(call.finish_reason)
            cols["dialect"].append(call.dialect)
            cols["cost_usd"].append(_num(call.cost_usd))
            cols["cum_turns"].append(call.cum_turns)
            cols["cum_input_tokens"].append(call.cum_input_tokens)
            cols["cum_output_tokens"].append(call.cum_output_tokens)
            cols["cum_total_tokens"].append(call.cum_total_tokens)
            cols["cum_agent_time"].append(call.cum_agent_time)
            cols["cum_cost_usd"].append(_num(call.cum_cost_usd))
            for name, limit in zip(_LIMITS, limits):
                cols[name].append(limit)
            cols["agent_budget"].append(budget)
    frame = _frame(cols, TURN_COLUMNS)
    ints = ("turn", "call", "segment", "new_input_tokens",
            "cum_turns", "cum_input_tokens", "cum_output_tokens", "cum_total_tokens")
    return frame.astype({**{name: "int64" for name in ints}, "input_tokens": "Int64", "output_tokens": "Int64"})


@_stored
@_no_gc
def calls(traces: Iterable[Trace]) -> pd.DataFrame:
    """One row per model call, answered or not, in the order calls ended:
    `call` its index, `latency` end - start in seconds, the usage counts
    (NA: not reported), `reply` the text the model returned, `reasoning`
    its thinking, `tool_calls` the names of the tools it called, joined by
    ", " ("" when it called none; None when no reply came back),
    `request_messages` how many messages its request held, the error it
    raised, `timing_issue` when an importer had to mend its times, and
    of the reply's tokens (where the endpoint returned them, see
    `ModelCall.tokens`; the lists themselves stay on the trace) the sum
    and mean of their logprobs (NaN: none returned) and `has_token_ids`."""
    traces = _list(traces)
    rows = []
    for trace in traces:
        info, key = trace.info, trace.task.key
        for call in trace.model_calls:
            usage, reply, error = call.usage, call.reply, call.error
            rows.append((
                trace.id, info.get("example_id"), info.get("repeat"), info.get("rollout_id"), key,
                call.index, call.segment, call.dialect, call.committed, call.start, call.end - call.start,
                usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
                call.new_input_tokens, call.finish_reason,
                reply.content if reply is not None else None, reply.reasoning if reply is not None else None,
                ", ".join(c.name for c in reply.tool_calls) if reply is not None else None,
                call.request_messages, error.type if error else None, error.message if error else None,
                call.timing_issue, *_logprob_stats(call.tokens), _num(call.cost_usd),
            ))
    frame = _table(rows, list(CALL_COLUMNS))
    return frame.astype({"call": "int64", "segment": "int64", "committed": "bool", "new_input_tokens": "int64",
                         "request_messages": "Int64", **{name: "Int64" for name in _COUNTS},
                         "completion_logprob_sum": "float64", "completion_logprob_mean": "float64",
                         "has_token_ids": "bool"})


def _logprob_stats(tokens: Any) -> tuple[float, float, bool]:
    """A call's (logprob sum, mean, has token ids: an empty list counts as none, as the
    file leaves it out); NaN where not returned."""
    if tokens is None:
        return math.nan, math.nan, False
    total, mean = tokens.logprob_sum, tokens.logprob_mean
    return (math.nan if total is None else total), (math.nan if mean is None else mean), bool(tokens.ids)


@_stored
@_no_gc
def phases(traces: Iterable[Trace]) -> pd.DataFrame:
    """One row per phase span that started, in lifecycle order. `offset` is
    the start in seconds after the rollout's first phase began; `duration`
    is NaN for a span that never ended (a trace saved before close)."""
    traces = _list(traces)
    cols: dict[str, list[Any]] = {name: [] for name in PHASE_COLUMNS}
    for trace in traces:
        # The PHASES key names the row, not Span.name: a loaded file may hold anything there.
        spans = [(p, trace.phases[p]) for p in PHASES if p in trace.phases]
        if not spans:
            continue
        t0 = min(span.start for _, span in spans)
        costs = trace.cost_by_phase
        for phase, span in spans:
            _ids(cols, trace)
            cols["task_key"].append(trace.task.key)
            cols["phase"].append(phase)
            cols["start"].append(span.start)
            cols["end"].append(_num(span.end))
            cols["duration"].append(_num(span.duration))
            cols["offset"].append(span.start - t0)
            cols["ok"].append(trace.ok)
            cols["cost_usd"].append(_num(costs.get(phase)))
    return _frame(cols, PHASE_COLUMNS)


def _why(trace: Trace, name: str, value: float | None) -> tuple[str | None, str | None]:
    """Why a signal of a scored run is missing (None: it is not), as the
    column's text, and the recorded error when scoring raised or timed out."""
    if value is not None:
        return None, None
    error = trace.signal_errors.get(name)
    why = MissingSignal.of_error(error)
    detail = error if why in (MissingSignal.SCORING_RAISED, MissingSignal.SCORING_TIMED_OUT) else None
    return why.value, detail


def _unscored_reason(trace: Trace) -> tuple[str, str | None]:
    outcome = trace.outcome
    why = MissingSignal.of_outcome(outcome.kind)
    return why.value, f"{outcome.error_type}: {outcome.message}" if why is MissingSignal.RUN_FAILED else None


@_stored
@_no_gc
def signals(traces: Iterable[Trace]) -> pd.DataFrame:
    """One row per reward or metric of each rollout.

    A run that was not scored (it failed, was aborted, or never closed) has
    no signals of its own; it gets one row per signal its task type has in
    the other traces given, all missing with `why_missing` saying why (or a
    single row with no name when no other trace names them), so a failure
    never silently drops out of a report."""
    traces = _list(traces)
    # Signal names per task type, in first-seen order, from the scored runs.
    known: dict[str, dict[tuple[str, str], float | None]] = {}
    for trace in traces:
        if trace.scored:
            names = known.setdefault(trace.task.type, {})
            for name in trace.rewards:
                names.setdefault(("reward", name), trace.reward_weights.get(name, 1.0))
            for name in trace.metrics:
                names.setdefault(("metric", name), None)
    cols: dict[str, list[Any]] = {name: [] for name in SIGNAL_COLUMNS}

    def add(trace: Trace, kind: str | None, name: str | None, value: float | None,
            weight: float | None, why: str | None, error: str | None) -> None:
        _ids(cols, trace)
        cols["task_key"].append(trace.task.key)
        cols["task_type"].append(trace.task.type)
        cols["kind"].append(kind)
        cols["name"].append(name)
        cols["value"].append(_num(value))
        cols["weight"].append(_num(weight))
        cols["missing"].append(value is None)
        cols["why_missing"].append(why)
        cols["error"].append(error)

    for trace in traces:
        if not trace.scored:
            why, error = _unscored_reason(trace)
            expected = known.get(trace.task.type)
            if not expected:
                add(trace, None, None, None, None, why, error)
            for (kind, name), weight in (expected or {}).items():
                add(trace, kind, name, None, weight, why, error)
            continue
        for name, value in trace.rewards.items():
            add(trace, "reward", name, value, trace.reward_weights.get(name, 1.0), *_why(trace, name, value))
        for name, value in trace.metrics.items():
            add(trace, "metric", name, value, None, *_why(trace, name, value))
    frame = _frame(cols, SIGNAL_COLUMNS)
    return frame.astype({"missing": "bool"})


@_no_gc
def user_turns(traces: Iterable[Trace]) -> pd.DataFrame:
    """One row per user turn: `by` (which rk.User, "person" for someone in a
    notebook), `text` (what the user said), `replying_to` (the agent reply it
    answered) and, for a rk.RecordedUser replay, `similarity` and `diverged`
    (NaN / None for other users)."""
    traces = _list(traces)
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
            cols["similarity"].append(_num(turn.similarity))
            cols["diverged"].append(turn.diverged)
    return _frame(cols, USER_TURN_COLUMNS)


def _fork_of(trace: Trace) -> tuple[str, int] | None:
    origin = trace.info.get("forked_from")
    if isinstance(origin, (list, tuple)) and len(origin) == 2:
        return str(origin[0]), int(origin[1])
    return None


@_no_gc
def branches(traces: Iterable[Trace]) -> pd.DataFrame:
    """One row per branch: each original that was forked and each fork of it
    (a fork of a fork too), rows of one tree together, the original first.
    `root` is the original's id, `split_turn` the turn after which a fork
    left its parent (None for the original), `turns_after_split` what it did
    on its own. Traces that are neither forked nor forks are left out."""
    traces = _list(traces)
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
        cols["reward"].append(_num(trace.scored_reward))
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
    return _frame(cols, BRANCH_COLUMNS)


def forecast(source: Any) -> pd.DataFrame:
    """The budget forecast of a trace, or of a rollout still running (a
    `rk.Rollout` or a notebook rollout, whose agent time so far counts):
    one row per limit, `ends_after` the turn it would end the run after,
    `binds_first`, `reachable`, and a `note` in words."""
    from ..core.forecast import as_columns, forecast as forecast_rows

    trace = source if isinstance(source, Trace) else getattr(source, "trace", None)
    if not isinstance(trace, Trace):
        raise TypeError(f"forecast takes a rk.Trace or a rollout, got {type(source).__name__}")
    running = None if isinstance(source, Trace) else getattr(source, "agent_time", None)
    columns = as_columns(forecast_rows(trace, agent_time=running))
    return pd.DataFrame(columns, columns=list(columns))


COMPARE_COLUMNS = ("key", "example_id", "repeat", "signal", "a", "b", "diff", "outcome")


def compare(a: Any, b: Any = None, **options: Any) -> pd.DataFrame:
    """One row per (task, signal) of a paired comparison (`rk.compare`;
    per (task, repeat) with `by="repeat"`): the value in run A and in B,
    B - A, and the outcome seen from B ("win", "tie", "loss", "missing in A",
    "missing in B", "missing in both", "only in A", "only in B"). `a` is a
    `Comparison`, or two runs and the options of `rk.compare`. Missing
    values are NaN and keep their row."""
    from ..runs.compare import Comparison, compare as _compare

    comparison = a if isinstance(a, Comparison) else _compare(a, b, **options)
    columns: dict[str, list[Any]] = {name: [] for name in COMPARE_COLUMNS}
    for row in comparison.rows:
        for name in COMPARE_COLUMNS:
            value = row[name]
            columns[name].append(_num(value) if name in ("a", "b", "diff") else value)
    return _frame(columns, COMPARE_COLUMNS)
