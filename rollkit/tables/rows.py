"""The row engine: the column vocabulary of rk.frames and the store, and
the one row builder every table of a run is made by.

The public API (what the store, the lazy run, the eager frames, the live
monitor and comparisons call; nothing else of this module is for them):

- the vocabulary: `TABLES` (the store's six tables), the frames' columns
  in order (`ROLLOUT_COLUMNS`, `TURN_COLUMNS`, `CALL_COLUMNS`,
  `PHASE_COLUMNS`, `SIGNAL_COLUMNS`, `MESSAGE_COLUMNS`, `USER_TURN_COLUMNS`,
  `BRANCH_COLUMNS`, `COMPARE_COLUMNS`), the ids a batch run writes to
  `trace.info` (`INFO_IDS`), each store table's columns with the ones kept
  for SQL and reading back (`TABLE_COLUMNS`) and the Arrow type of the
  columns that have one (`TABLE_TYPES`);
- building rows: `TableRows` (the rows of one part, per table) and
  `trace_rows` (append one trace's JSON record, a saved line parsed or
  `Trace.model_dump(mode="json")`, to each table), `signal_values` (a
  record's `reward`, `reward.<name>`, `metric.<name>`, as the rollouts
  table has them), `num_or_nan` (a missing number as NaN);
- Arrow tables: `python_tables` and `arrow_table` (the rows typed),
  `empty_table`, `large_strings` (text columns as large strings, so parts
  concatenate);
- frames: `frame_order` (a table's columns in frame order), `shaped` (a
  table's frame as rk.frames gives it), `arrow_frame`, `padded`.

A rollout's reward and token totals are not computed here but by the one
rule in rollkit.core.totals, which the Trace and the training exports call
too. There is one engine: the store (rollkit.tables.columns) writes these
rows to Parquet and a lazy run (rollkit.tables.lazyrun) reads them back
through `shaped`; the eager builders (rollkit.analysis.frames) build the same
rows from `Trace` objects and shape them the same way. The store's DuckDB
build (rollkit.tables.nativebuild) makes the same tables in SQL;
tests/test_nativebuild.py holds the two builds equal, and
tests/test_totals_parity.py holds the reward and token totals of both to
the core's rule.

It sits below the store, the lazy run and the frames (they import it, it
imports none of them). It reads records and builds rows and Arrow tables;
it writes no file, runs nothing and draws nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..core.dependencies import pa, pd
from ..core.sums import sum_in_order
from ..core.messages import ROLES
from ..core.outcome import MissingSignal, Outcome
from ..core.totals import record_cost, record_reward, token_totals
from ..core.trace import PHASES, UNTIMED

__all__ = [
    "TABLES", "ROLLOUT_COLUMNS", "TURN_COLUMNS", "CALL_COLUMNS", "PHASE_COLUMNS", "SIGNAL_COLUMNS",
    "MESSAGE_COLUMNS", "USER_TURN_COLUMNS", "SOURCE_COLUMNS", "source_values", "BRANCH_COLUMNS", "COMPARE_COLUMNS",
    "INFO_IDS", "TABLE_COLUMNS", "TABLE_TYPES", "TableRows", "trace_rows", "signal_values", "num_or_nan",
    "python_tables", "arrow_table", "empty_table", "large_strings", "frame_order", "shaped", "padded", "arrow_frame",
]

_NAN = math.nan
_LIMITS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "max_cost_usd")

# ---- the vocabulary ---------------------------------------------------------------

# The ids a batch evaluation writes to `trace.info` (rollkit.runs.evaluation).
INFO_IDS = ("example_id", "repeat", "rollout_id")
_IDS = ("id", *INFO_IDS)

# Where a task came from (`trace.info["source"]`, written by rk.tasks_from's
# tasks): framework, its version, task or dataset name, sample id, as text.
SOURCE_COLUMNS = ("source_framework", "source_version", "source_task", "source_sample")
ROLLOUT_COLUMNS = (
    *_IDS, "task_key", "task_type", *SOURCE_COLUMNS, "agent", "model", "outcome", "ok", "completed", "aborted",
    "stop", "stop_condition", "error_type", "error_phase", "error_message", "reward",
    "turns", "model_calls", "input_tokens", "output_tokens", "total_tokens", "cost_usd", "cost_estimated",
    "segments", "agent_time", "model_time", "harness_time", "wait_time",
    *(f"phase.{p}" for p in PHASES),
    "start", "end",
)  # followed by reward.<name> and metric.<name> columns, sorted by name
TURN_COLUMNS = (
    *_IDS, "task_key", "turn", "call", "segment", "start", "end", "latency",
    "input_tokens", "output_tokens", "new_input_tokens", "finish_reason", "dialect", "cost_usd",
    "cum_turns", "cum_input_tokens", "cum_output_tokens", "cum_total_tokens", "cum_agent_time", "cum_cost_usd",
    *_LIMITS, "agent_budget",
)
CALL_COLUMNS = (
    *_IDS, "task_key", "call", "segment", "dialect", "committed", "start", "latency",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "new_input_tokens",
    "finish_reason", "reply", "reasoning", "tool_calls", "request_messages", "error_type", "error_message",
    "timing_issue", "completion_logprob_sum", "completion_logprob_mean", "has_token_ids", "cost_usd",
)
PHASE_COLUMNS = (*_IDS, "task_key", "phase", "start", "end", "duration", "offset", "ok", "cost_usd")
SIGNAL_COLUMNS = (*_IDS, "task_key", "task_type", "kind", "name", "value", "weight", "missing", "why_missing", "error")
MESSAGE_COLUMNS = ("id", "task_key", "index", "role", "content", "tool_calls", "name")
USER_TURN_COLUMNS = (
    *_IDS, "task_key", "user_turn", "segment", "by", "text", "replying_to", "similarity", "diverged",
)
BRANCH_COLUMNS = (
    "id", "root", "branch", "forked_from", "split_turn", "task_key", "model", "ok", "stop", "reward",
    "turns", "turns_after_split", "total_tokens", "agent_time",
)
COMPARE_COLUMNS = ("key", "example_id", "repeat", "signal", "a", "b", "diff", "outcome")

# The store's tables (rollkit.tables.columns), one per frame above.
TABLES = ("rollouts", "turns", "calls", "phases", "signals", "messages")
_FRAME_COLUMNS = {"rollouts": ROLLOUT_COLUMNS, "turns": TURN_COLUMNS, "calls": CALL_COLUMNS,
                  "phases": PHASE_COLUMNS, "signals": SIGNAL_COLUMNS, "messages": MESSAGE_COLUMNS}
# Each table's fixed columns, in the order its row tuples hold them: the
# frame's, then what the store keeps for SQL and for reading back (the row's
# place in its file, `_ordinal`, `_offset`, `_length`; `_scored`: a signals
# row stands for a scored run's signal, not for an unscored run's marker).
TABLE_COLUMNS = {
    "rollouts": (*ROLLOUT_COLUMNS, "_ordinal", "_offset", "_length", "_scored"),
    "calls": (*CALL_COLUMNS, "end", "cum_turns", "cum_input_tokens", "cum_output_tokens", "cum_total_tokens",
              "cum_agent_time", "cum_cost_usd", "_ordinal"),
    "turns": (*TURN_COLUMNS, "_ordinal"),
    "phases": (*PHASE_COLUMNS, "_ordinal"),
    "signals": (*SIGNAL_COLUMNS, "_ordinal", "_scored"),
    "messages": (*MESSAGE_COLUMNS, "_ordinal"),
}
# Token counts: nullable integers, NA where not reported.
_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_INT = ("turns", "model_calls", "input_tokens", "output_tokens", "total_tokens", "cache_read_tokens",
        "cache_write_tokens", "request_messages", "segments", "_ordinal", "_offset", "_length", "call", "segment",
        "new_input_tokens", "cum_turns", "cum_input_tokens", "cum_output_tokens", "cum_total_tokens", "turn", "index")  # may hold nulls: the frames read a count as Int64


# ---- the row builder: one trace's JSON record -> a row of every table ------------


def num_or_nan(value: Any) -> float:
    return _NAN if value is None else float(value)

def _raw(value: Any) -> Any:
    """Missing as NaN, a value as it is (an int limit stays an int, as in the frames)."""
    return _NAN if value is None else value


def _text(content: Any) -> str:
    """A message's content as text (a list of parts: their text joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def _logprob_stats(tokens: dict[str, Any] | None) -> tuple[float, float, bool]:
    """A call's logprob sum and mean (NaN: none) and whether it holds token
    ids, as rk.frames.calls has them (`TokenLogprobs.logprob_sum`)."""
    if not tokens:
        return _NAN, _NAN, False
    logprobs = tokens.get("logprobs")
    total = sum_in_order(logprobs) if logprobs else _NAN
    return total, (total / len(logprobs) if logprobs else _NAN), tokens.get("ids") is not None


def _calls_text(calls: list[dict[str, Any]] | None) -> str:
    return ", ".join(f"{c.get('name')}({c.get('arguments', '{}')})" for c in calls or ())


_STR = ("id", "task_key", "task_type", *SOURCE_COLUMNS, "phase", "role", "content", "tool_calls")
_FLOAT = ("reward", "model_time", "harness_time", *(f"phase.{p}" for p in PHASES), "start", "end", "latency",
          "cum_agent_time", "duration", "offset", "value", "weight", "completion_logprob_sum",
          "completion_logprob_mean", "cost_usd", "cum_cost_usd")
_BOOL = ("completed", "aborted", "committed", "missing", "_scored", "has_token_ids", "cost_estimated")
# Columns whose values always have one type; the others (ok, the batch ids,
# limits, times that may be 0) are inferred, as pandas infers them in the frames.
TABLE_TYPES = {**dict.fromkeys(_STR, "string"), **dict.fromkeys(_INT, "int64"), **dict.fromkeys(_FLOAT, "float64"),
          **dict.fromkeys(_BOOL, "bool_")}


class TableRows:
    """The rows of one part: a tuple per row for each table, and the
    rollouts' reward and metric values (their names vary) kept apart.
    `tables`: the tables to build rows for (a first open's part and a live
    run's build the rollouts only, an eager frame the one it gives, a
    part's later build the ones it lacks)."""

    def __init__(self, tables: Iterable[str] = TABLES) -> None:
        self.tables = frozenset(tables)
        self.rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLES}
        self.signals: dict[str, dict[int, float]] = {}

    def columns(self, table: str) -> dict[str, list[Any]]:
        names = TABLE_COLUMNS[table]
        rows = self.rows[table]
        columns = dict(zip(names, map(list, zip(*rows)))) if rows else {name: [] for name in names}
        if table == "rollouts":
            for name in sorted(self.signals):
                values = self.signals[name]
                columns[name] = [values.get(i, _NAN) for i in range(len(rows))]
        return columns


def trace_rows(rows: TableRows, t: dict[str, Any], ordinal: int, offset: int, length: int) -> None:
    """Append the rows of one trace's JSON record (its saved line, parsed, or
    `Trace.model_dump(mode="json")`) to each table of `rows.tables`: the one
    row builder of the store and the eager frames."""
    info = t.get("info") or {}
    ids = (t["id"], info.get("example_id"), info.get("repeat"), info.get("rollout_id"))
    task = t["task"]
    key, task_type = task["key"], task["type"]
    calls = t.get("model_calls") or []
    built, table = rows.tables, rows.rows
    unreported: tuple[bool, bool] = (False, False)
    if "calls" in built or "turns" in built:
        limits = t.get("limits") or {}
        limit_values = tuple(_raw(limits.get(name)) for name in _LIMITS)
        budget = _raw((t.get("timeouts") or {}).get("agent"))
        unreported = _call_rows(table, built, ids, key, calls, t.get("messages") or (), limit_values, budget,
                                ordinal)
    elif "rollouts" in built:
        unreported = _unreported(calls)
    if "rollouts" in built:
        _rollout_row(rows, t, ids, key, task_type, calls, unreported, (ordinal, offset, length))
    if "phases" in built:
        present = _phase_spans(t.get("phases") or {})[3]
        _phase_rows(table["phases"], ids, key, present, t.get("ok"), record_cost(t), ordinal)
    if "signals" in built:
        errors = t.get("errors") or []
        _signal_rows(table["signals"], ids, key, task_type, t, errors[0] if errors else None,
                     "scoring" in (t.get("phases") or {}), bool(t.get("aborted", False)), ordinal)
    if "messages" in built:
        _message_rows(table["messages"], ids[0], key, t.get("messages") or (), ordinal)


def _rollout_row(rows: TableRows, t: dict[str, Any], ids: tuple[Any, ...], key: str, task_type: str,
                 calls: list[dict[str, Any]], unreported: tuple[bool, bool], place: tuple[int, int, int]) -> None:
    """The trace's row of `rollouts`, its reward and metric values beside it
    (`place`: its ordinal, byte offset and length in the file)."""
    agent = t.get("agent") or {}
    errors = t.get("errors") or []
    error = errors[0] if errors else None
    segments = t.get("segments") or []
    spans = t.get("phases") or {}
    stop_condition = t.get("stop_condition")
    last = next((call for call in reversed(calls) if call.get("committed")), None)
    durations, start, end, _ = _phase_spans(spans)
    agent_time = sum_in_order(float(seg.get("charged", 0.0)) for seg in segments)
    model_time = sum_in_order(_latency(c) for c in calls)
    # Every segment's start, read or not: a segment without one is no trace's (the line is named, as rk.load names it).
    starts = [float(segment["start"]) for segment in segments]
    waited = sum_in_order(max(0.0, start_after - float(before["end"]))
                 for before, start_after in zip(segments, starts[1:]) if before.get("end") is not None)
    signal = signal_values(t)
    row_number = len(rows.rows["rollouts"])
    rows.rows["rollouts"].append((
        *ids, key, task_type, *source_values(t.get("info") or {}), agent.get("name"), agent.get("model"), Outcome.of_record(t).label, t.get("ok"),
        bool(t.get("completed", False)), bool(t.get("aborted", False)), error["type"] if error else stop_condition,
        stop_condition, error["type"] if error else None, error.get("phase") if error else None,
        error["message"] if error else None, num_or_nan(signal.pop("reward")),
        int(last.get("cum_turns", 0)) if last else 0, len(calls), *token_totals(None if last is None else (last.get("cum_input_tokens"), last.get("cum_output_tokens"),
                                                  last.get("cum_total_tokens")), *unreported),
        num_or_nan(record_cost(t)), (t.get("info") or {}).get("cost_estimated") is True, len(segments),
        agent_time, model_time,
        _NAN if model_time != model_time else max(0.0, agent_time - model_time), waited, *durations, num_or_nan(start), num_or_nan(end), *place, "scoring" in spans,
    ))
    for name, value in signal.items():
        rows.signals.setdefault(name, {})[row_number] = num_or_nan(value)


def _source_text(value: Any) -> str | None:
    """A provenance value as its column holds it: text as it is, an integer
    of 64 bits in digits, anything else missing (as the native build reads it)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63:
        return str(value)
    return None


def source_values(info: dict[str, Any]) -> tuple[str | None, str | None, str | None, str | None]:
    """The SOURCE_COLUMNS of a trace's info: its `source` where that names a
    framework (rk.tasks_from's provenance; an importer's `source`, the
    values a census keeps, names none), all missing otherwise. The task is
    `task`, else `dataset` (reasoning-gym's name)."""
    source = info.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("framework"), str):
        return None, None, None, None
    task = _source_text(source.get("task"))
    return (source["framework"], _source_text(source.get("version")),
            _source_text(source.get("dataset")) if task is None else task, _source_text(source.get("sample_id")))


def _phase_rows(phases_out: list[tuple[Any, ...]], ids: tuple[Any, ...], key: str,
                present: list[tuple[str, float, Any]], ok: Any, cost_usd: Any, ordinal: int) -> None:
    t0 = min((s for _, s, _ in present), default=0.0)
    for phase, s, e in present:
        phases_out.append((*ids, key, phase, s, num_or_nan(e), _NAN if e is None else float(e) - s, s - t0, ok,
                           num_or_nan(cost_usd) if phase == "agent" else 0.0, ordinal))


def _latency(call: dict[str, Any]) -> float:
    """A call's end - start; NaN (NA) when its source did not time it (Trace's ModelCall.latency)."""
    return _NAN if call.get("timing_issue") == UNTIMED else float(call["end"]) - float(call["start"])


# A call's integer fields, and its usage's: int() makes 2.5 2, where rk.load refuses the line.
_CALL_INTEGERS = ("index", "segment", "new_input_tokens", "cum_turns", "cum_input_tokens", "cum_output_tokens",
                  "cum_total_tokens", "request_messages")
_USAGE_INTEGERS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _integral(call: dict[str, Any], usage: dict[str, Any]) -> None:
    """Raise ValueError (the line is then read as rk.load reads it, and
    refused) where an integer field of `call` or of its `usage` (read once,
    by the caller) holds a fraction."""
    for value in (*map(call.get, _CALL_INTEGERS), *map(usage.get, _USAGE_INTEGERS)):
        if value.__class__ is float and not value.is_integer():
            raise ValueError(f"a call's integer field holds {value}")


def _unreported(calls: list[dict[str, Any]]) -> tuple[bool, bool]:
    """Whether a turn did not report its input, its output tokens (what
    _call_rows finds, and the fields it must find in each call)."""
    unreported_in = unreported_out = False
    for call in calls:
        int(call["index"]), int(call["segment"])  # a call without them is not a trace's: the line is named
        usage = call.get("usage") or {}
        _integral(call, usage)
        if call.get("committed"):
            unreported_in = unreported_in or _count(usage.get("input_tokens")) is None
            unreported_out = unreported_out or _count(usage.get("output_tokens")) is None
    return unreported_in, unreported_out


def _phase_spans(spans: dict[str, Any]) -> tuple[list[float], float | None, float | None,
                                                 list[tuple[str, float, Any]]]:
    """Each phase's duration (NaN: not run or still open), the first start,
    the last end, and the phases run (name, start, end or None)."""
    durations: list[float] = []
    start = end = None
    present = []
    for phase in PHASES:
        span = spans.get(phase)
        if span is None:
            durations.append(_NAN)
            continue
        s = float(span["start"])
        e = span.get("end")
        present.append((phase, s, e))
        durations.append(_NAN if e is None else float(e) - s)
        start = s if start is None else min(start, s)
        if e is not None:
            end = float(e) if end is None else max(end, float(e))
    return durations, start, end, present


def _call_rows(table: dict[str, list[tuple[Any, ...]]], built: frozenset[str], ids: tuple[Any, ...], key: str,
               calls: list[dict[str, Any]], messages: Any, limit_values: tuple[Any, ...], budget: Any,
               ordinal: int) -> tuple[bool, bool]:
    """A calls row per model call and a turns row per committed one, for
    those of the two tables `built`; whether a turn did not report its
    input, its output tokens."""
    number = 0
    unreported_in = unreported_out = False
    calls_out, turns_out = table["calls"], table["turns"]
    with_calls, with_turns = "calls" in built, "turns" in built
    for call in calls:
        usage = call.get("usage") or {}
        _integral(call, usage)
        err = call.get("error")
        c_start, c_end = float(call["start"]), float(call["end"])
        latency = _latency(call)
        committed = bool(call.get("committed", False))
        input_tokens, output_tokens = _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
        index, segment = int(call["index"]), int(call["segment"])
        new_input, finish, dialect = int(call.get("new_input_tokens", 0)), call.get("finish_reason"), call.get("dialect")
        totals = (int(call.get("cum_turns", 0)), int(call.get("cum_input_tokens", 0)),
                  int(call.get("cum_output_tokens", 0)), int(call.get("cum_total_tokens", 0)),
                  float(call.get("cum_agent_time", 0.0)), num_or_nan(call.get("cum_cost_usd")))
        cost = num_or_nan(call.get("cost_usd"))
        if with_calls:  # a turns frame alone reads no reply, logprobs or cache counts
            reply = _reply(call, messages, committed)
            calls_out.append((
                *ids, key, index, segment, dialect, committed, c_start, latency, input_tokens, output_tokens,
                _count(usage.get("cache_read_tokens")), _count(usage.get("cache_write_tokens")), new_input, finish,
                reply.get("content") if reply is not None else None,
                reply.get("reasoning") if reply is not None else None,
                ", ".join(c["name"] for c in reply.get("tool_calls") or ()) if reply is not None else None,
                _count(call.get("request_messages")), err["type"] if err else None, err["message"] if err else None,
                call.get("timing_issue"), *_logprob_stats(call.get("tokens")), cost, c_end, *totals, ordinal,
            ))
        if committed:
            number += 1
            unreported_in = unreported_in or input_tokens is None
            unreported_out = unreported_out or output_tokens is None
        if committed and with_turns:
            turns_out.append((*ids, key, number, index, segment, c_start, c_end, latency, input_tokens,
                              output_tokens, new_input, finish, dialect, cost, *totals, *limit_values, budget,
                              ordinal))
    return unreported_in, unreported_out


def _signal_rows(signals_out: list[tuple[Any, ...]], ids: tuple[Any, ...], key: str, task_type: str,
                 t: dict[str, Any], error: dict[str, Any] | None, scored: bool, aborted: bool, ordinal: int) -> None:
    """A row per reward and metric of a scored trace, else one marker row
    saying why it has none."""
    rewards, metrics = t.get("rewards") or {}, t.get("metrics") or {}
    weights = t.get("reward_weights") or {}
    if scored:
        signal_errors = t.get("signal_errors") or {}
        for name, value in rewards.items():
            why, err_text = _why(signal_errors, name, value)
            signals_out.append((*ids, key, task_type, "reward", name, num_or_nan(value), num_or_nan(weights.get(name, 1.0)),
                                value is None, why, err_text, ordinal, True))
        for name, value in metrics.items():
            why, err_text = _why(signal_errors, name, value)
            signals_out.append((*ids, key, task_type, "metric", name, num_or_nan(value), _NAN, value is None, why,
                                err_text, ordinal, True))
    else:  # one marker row; the frame gives it one row per signal the task type has elsewhere
        if error:
            why, err_text = MissingSignal.RUN_FAILED.value, f"{error['type']}: {error['message']}"
        else:
            why, err_text = (MissingSignal.RUN_ABORTED if aborted else MissingSignal.NOT_SCORED).value, None
        signals_out.append((*ids, key, task_type, None, None, _NAN, _NAN, True, why, err_text, ordinal, False))


def _message_rows(messages_out: list[tuple[Any, ...]], trace_id: str, key: str, messages: Any, ordinal: int) -> None:
    """A row per message: its text, the tool calls it made, the tool it answers for."""
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:  # no trace's: the line is read as rk.load reads it, and refused
            raise ValueError(f"a message's role is {role!r}")
        content = message.get("content")
        if content.__class__ is not str:
            content = _text(content)
        if role == "assistant":
            messages_out.append((trace_id, key, index, role, content, _calls_text(message.get("tool_calls")),
                                 None, ordinal))
        else:
            messages_out.append((trace_id, key, index, role, content, "",
                                 message.get("name") or message.get("tool_call_id") if role == "tool" else None,
                                 ordinal))


def _reply(call: dict[str, Any], messages: Any, committed: bool) -> dict[str, Any] | None:
    """A call's reply: its own, or the message right after its request when
    the store left it out as that message (rollkit.core.trace.ModelCall)."""
    reply = call.get("reply")
    if reply is not None:
        return reply
    count = call.get("request_messages")
    if (committed and count is not None and call.get("request") is None and count < len(messages)
            and messages[count].get("role") == "assistant"):
        return messages[count]
    return None


def _count(value: Any) -> int | None:
    """A token count, None when not reported."""
    return None if value is None else int(value)


def signal_values(record: dict[str, Any]) -> dict[str, float | None]:
    """The signal columns of one trace's record, as a rollouts row has them:
    `reward` (rollkit.core.totals.record_reward: the weighted sum of the
    rewards that have a value; None when the run was not scored or none has
    one, L23), then `reward.<name>` and
    `metric.<name>` (None when missing, or when the run was not scored: a
    value scoring never produced is not a score). The run monitor
    (rollkit.runs.live) reads a finished trace's signals with this too."""
    scored = "scoring" in (record.get("phases") or {})
    out: dict[str, float | None] = {"reward": record_reward(record)}
    for name, value in (record.get("rewards") or {}).items():
        out[f"reward.{name}"] = value if scored else None
    for name, value in (record.get("metrics") or {}).items():
        out[f"metric.{name}"] = value if scored else None
    return out


def _why(errors: dict[str, str], name: str, value: Any) -> tuple[str | None, str | None]:
    """Why a scored run's signal is missing (None: it is not), as the
    `why_missing` column says it, and the recorded error when scoring
    raised or timed out (rollkit.core.outcome.MissingSignal)."""
    if value is not None:
        return None, None
    error = errors.get(name)
    why = MissingSignal.of_error(error)
    return why.value, error if why in (MissingSignal.SCORING_RAISED, MissingSignal.SCORING_TIMED_OUT) else None



def python_tables(rows: TableRows, tables: Iterable[str] = TABLES) -> dict[str, Any]:
    """The Python build's Arrow tables of a part's rows (`tables` of them): a
    column's type is its kind's when known, else inferred from its values,
    as pandas infers them in the frames."""
    return {table: arrow_table(rows, table) for table in tables}


def arrow_table(rows: TableRows, table: str) -> Any:
    """One table of `python_tables`."""
    columns = rows.columns(table)
    arrays = {}
    for column, values in columns.items():
        kind = TABLE_TYPES.get(column)
        # All missing: a null column, read back as None (object), as the frames
        # have a column of Nones (a calls table's tool_calls when no reply came back).
        if kind is not None and any(v is not None for v in values):
            try:  # a known type converts faster than an inferred one
                arrays[column] = pa.array(values, type=getattr(pa, kind)(), from_pandas=True)
                continue
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass
        try:
            array = pa.array(values, from_pandas=True)  # NaN: null, so SQL sees it missing
            if array.type == pa.null() and any(isinstance(v, float) for v in values):
                array = array.cast(pa.float64())  # all NaN: still a number column
            arrays[column] = array
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types (an id that is an int here, a str there)
            arrays[column] = pa.array([None if v is None else str(v) for v in values])
    return pa.table(arrays) if arrays else pa.table({"_ordinal": pa.array([], pa.int64())})


def empty_table(table: str) -> Any:
    """Table `table` of no traces, as the row builder types it."""
    return arrow_table(TableRows(), table)


def large_strings(table: Any) -> Any:
    """Text columns stored as Arrow's large_string: pandas (3) holds its str
    columns as large_string, so a frame read from these tables takes them as
    they are instead of casting every text column of the run on each read
    (a fifth of opening a run's rollouts frame, measured at a million rows)."""
    fields = [pa.field(f.name, pa.large_string()) if f.type == pa.string() else f for f in table.schema]
    return table.cast(pa.schema(fields)) if fields != list(table.schema) else table


# ---- from a table to its frame ----------------------------------------------------

# What a table's Arrow types become in its frame: a count may be null (NA,
# never 0); `ok` is True, False or None.
_DTYPES: dict[str, dict[str, str]] = {
    "rollouts": {"ok": "object", "turns": "int64", "model_calls": "int64",
                 **dict.fromkeys(("input_tokens", "output_tokens", "total_tokens"), "Int64")},
    "turns": {"input_tokens": "Int64", "output_tokens": "Int64"},
    "calls": {"committed": "bool", **dict.fromkeys((*_COUNTS, "request_messages"), "Int64")},
    "phases": {},
    "signals": {"missing": "bool"},
    "messages": {},
}


def frame_order(kind: str, names: Iterable[str]) -> list[str]:
    """The columns of frame `kind` in order, given the names its table
    holds: the fixed ones, then for rollouts the `reward.<name>` and the
    `metric.<name>` columns, each sorted by name; signals also read
    `_scored` (which rows are markers of an unscored run, see `shaped`)."""
    fixed = list(_FRAME_COLUMNS[kind])
    if kind == "signals":
        return [*fixed, "_scored"]
    if kind != "rollouts":
        return fixed
    names = list(names)
    return [*fixed, *sorted(n for n in names if n.startswith("reward.")),
            *sorted(n for n in names if n.startswith("metric."))]


def shaped(kind: str, frame: Any) -> Any:
    """The frame of table `kind` as rk.frames gives it, from its columns in
    `frame_order` as Arrow reads them into pandas: the store's lazy run and
    the eager builders both end here."""
    if kind == "signals":
        return _expanded_signals(frame)
    return frame.astype(_DTYPES[kind]) if _DTYPES[kind] else frame


def _expanded_signals(frame: Any) -> Any:
    """The signals frame: each unscored run's marker row (`_scored` false)
    becomes one row per signal its task type has in the scored runs (first
    seen order, the first weight), all missing with why, in place; a run
    whose task type has none elsewhere keeps its one row without a name."""
    order = list(SIGNAL_COLUMNS)
    scored = frame["_scored"].to_numpy(dtype=bool)
    if scored.all():
        return frame[order].astype({"missing": "bool"})
    frame = frame.assign(_at=range(len(frame)), _sub=0)
    known = frame[scored].drop_duplicates(["task_type", "kind", "name"])[["task_type", "kind", "name", "weight"]]
    markers = frame[~scored].drop(columns=["kind", "name", "weight"])
    expanded = markers.merge(known, on="task_type", how="inner", sort=False)
    expanded["_sub"] = expanded.groupby("_at").cumcount()
    lone = markers[~markers["task_type"].isin(set(known["task_type"]))].assign(
        kind=None, name=None, weight=float("nan"))
    whole = pd.concat([frame[scored], expanded, lone], ignore_index=True)
    whole = whole.sort_values(["_at", "_sub"], kind="stable").reset_index(drop=True)[order]
    # The dtypes the columns had before the rows without values were added.
    keep = {name: frame[name].dtype for name in order if frame[name].dtype != object}
    return whole.astype({**keep, "missing": "bool"})


def arrow_frame(kind: str, table: Any) -> Any:
    """Frame `kind` of its Arrow table (a column the table lacks: all None)."""
    return shaped(kind, padded(table.to_pandas(split_blocks=True), frame_order(kind, table.column_names)))


def padded(frame: Any, order: Iterable[str]) -> Any:
    """`frame`'s columns in `order`, a column it lacks all None."""
    order = list(order)
    for name in order:
        if name not in frame.columns:
            frame[name] = pd.Series([None] * len(frame), dtype=object)
    return frame[order]
