"""Training rows: one chat-template row per branch, to Parquet or JSON lines
(`rk.export(source, "rows.parquet", format="sft")`).

A branch is a rollout: a root rollout is one row, and a fork (rk.fork) is a
row of its own holding its whole conversation (the prefix it was forked
from included), with `parent_id` and `forked_at_turn` (null for a root).
A row is laid out as chat-template trainers take it (TRL's SFTTrainer,
Axolotl, prime-rl): `messages` in the OpenAI chat shape (`role`, `content`,
`tool_calls` with `function.arguments` as JSON text, `tool_call_id`,
`name`, and the assistant's readable thinking as `reasoning_content`, the
key Qwen3's and DeepSeek's templates read; never folded into `content`),
and `tools`, the schemas the agent was offered, as JSON text (a JSON Schema
has no fixed Parquet type); then the columns a data pipeline filters on
(`COLUMNS`, plus `reward.<name>` / `metric.<name>` per signal).
`is_truncated` is true when a limit stopped the run (`_limited`), it was
cut short (aborted), or its last reply ended at the length limit
(finish reason "length").

Rows are built from each trace's JSON object, never from `Trace` objects:
a run (file, folder, opened run) is read line by line from its JSON lines
at the byte offsets its columnar store keeps (`where=` picks the lines by
SQL over the rollouts table), and written in row groups, so memory stays
bounded by a group whatever the run's size. A list of traces goes through
the same row builder (each trace dumped as the JSON it is saved as).

This module writes files only; it loads pyarrow when it writes Parquet.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core._gcpause import paused
from ...core._sums import sum_in_order
from ...core.errors import UsageError
from ...core.outcome import Outcome
from ..columns import _loads
from . import ExportSource, written_whole
from ...core._dependencies import pa, pq

__all__ = ["write", "COLUMNS", "SUFFIXES"]

SUFFIXES = (".parquet", ".jsonl")
# The columns of a row besides the per-signal ones, in file order.
COLUMNS = ("id", "run_id", "task_key", "task_type", "agent", "model", "parent_id", "forked_at_turn", "messages",
           "tools", "reward", "outcome", "ok", "stop_condition", "has_error", "error_type", "is_truncated", "turns",
           "input_tokens", "output_tokens", "total_tokens", "cost_usd")
# A row group closes at this many rows or this many bytes of source JSON,
# whichever comes first: the memory of an export is about one group's.
_GROUP_ROWS = 2000
_GROUP_BYTES = 32 << 20
_SIGNAL_PREFIXES = ("reward.", "metric.")


def write(source: ExportSource, path: Path | None, *, rows_per_group: int = _GROUP_ROWS) -> Path:
    """Write one training row per branch to `path` (.parquet or .jsonl) and return it."""
    if path is None:
        raise UsageError("rk.export(format='sft') writes a file: give a path ending in .parquet or .jsonl")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(f"rk.export(format='sft'): {path.name!r} ends in {suffix or 'no suffix'}; "
                         f"name the file with one of {', '.join(SUFFIXES)} (Parquet or JSON lines)")
    if not isinstance(rows_per_group, int) or rows_per_group < 1:
        raise UsageError(f"rk.export(format='sft'): rows_per_group must be a whole number >= 1, got {rows_per_group!r}")
    signals, records = _records(source)
    sink = _ParquetSink(signals) if suffix == ".parquet" else _JsonLinesSink()
    try:
        with written_whole(path) as part, paused():  # rows are freed a group at a time: no collector walks
            _write_groups(sink, part, records, signals, rows_per_group)
    except BaseException:
        sink.close()
        raise
    return path


def _write_groups(sink: Any, part: Path, records: Iterator[tuple[dict[str, Any], int]], signals: list[str],
                  rows_per_group: int) -> None:
    sink.open(part)
    batch: list[dict[str, Any]] = []
    held = 0
    for record, size in records:
        batch.append(training_row(record, signals))
        held += size
        if len(batch) >= rows_per_group or held >= _GROUP_BYTES:
            sink.write(batch)
            batch, held = [], 0
    if batch:
        sink.write(batch)
    sink.close()


# ---- reading the source --------------------------------------------------------


def _records(source: ExportSource) -> tuple[list[str], Iterator[tuple[dict[str, Any], int]]]:
    """The signal columns, and each trace's JSON object with its size in bytes."""
    if source.run is None:
        traces = list(source.traces())
        names = {f"{prefix}{name}" for t in traces
                 for prefix, values in (("reward.", t.rewards), ("metric.", t.metrics)) for name in values}
        return sorted(names), _dumped(traces)
    run = source.run
    names = [c for c in run.arrow_schema("rollouts") if c.startswith(_SIGNAL_PREFIXES)]
    return sorted(names), _lines(source)


def _dumped(traces: list[Any]) -> Iterator[tuple[dict[str, Any], int]]:
    loads = _loads()
    for trace in traces:
        text = trace.model_dump_json()
        yield loads(text), len(text)


def _lines(source: ExportSource) -> Iterator[tuple[dict[str, Any], int]]:
    """The JSON object of each rollout selected, with its size in bytes."""
    loads = _loads()
    for line in source.lines():
        yield loads(line), len(line)


# ---- one row -------------------------------------------------------------------


def training_row(t: dict[str, Any], signals: list[str]) -> dict[str, Any]:
    """The training row of one trace's JSON object (as saved), with a value
    for each of `signals` ("reward.<name>" / "metric.<name>"; null where the
    trace has none)."""
    info = t.get("info") or {}
    agent = t.get("agent") or {}
    origin = info.get("forked_from")
    errors = t.get("errors") or []
    tools = info.get("tools")
    turns, tokens, last_finish = _totals(t.get("model_calls") or ())
    stop = t.get("stop_condition")
    row = {
        "id": t["id"], "run_id": info.get("run_id"), "task_key": t["task"]["key"], "task_type": t["task"]["type"],
        "agent": agent.get("name"), "model": agent.get("model"),
        "parent_id": origin[0] if origin else None, "forked_at_turn": int(origin[1]) if origin else None,
        "messages": [_message(m) for m in t.get("messages") or ()],
        "tools": None if tools is None else json.dumps(tools, ensure_ascii=False),
        "reward": _reward(t), "outcome": Outcome.of_record(t).label, "ok": t.get("ok"), "stop_condition": stop,
        "has_error": bool(errors), "error_type": errors[0].get("type") if errors else None,
        "is_truncated": _limited(stop, t.get("limits") or {}) or bool(t.get("aborted")) or last_finish == "length",
        "turns": turns, "input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": tokens[2],
        "cost_usd": _cost(t),
    }
    rewards, metrics = t.get("rewards") or {}, t.get("metrics") or {}
    for name in signals:
        values = rewards if name.startswith("reward.") else metrics
        row[name] = _number(values.get(name.split(".", 1)[1]))
    return row


def _cost(t: dict[str, Any]) -> float | None:
    """The rollout's dollars as Trace.cost_usd reads them: the source's
    total, else the last call's running total (null: unknown, never 0)."""
    total = (t.get("info") or {}).get("cost_usd")
    if total is None:
        calls = t.get("model_calls") or ()
        total = calls[-1].get("cum_cost_usd") if calls else 0.0
    return _number(total)


def _message(m: dict[str, Any]) -> dict[str, Any]:
    """A message in the chat shape templates read; content is always text
    (images and other parts are left out: a text trainer has no use for a
    reference to them)."""
    role = m["role"]
    content = m.get("content")
    if content.__class__ is not str:
        content = ""
    if role == "assistant":
        calls = m.get("tool_calls")
        return {"role": role, "content": content, "reasoning_content": m.get("reasoning") or None,
                "tool_calls": [{"id": c["id"], "type": "function",
                                "function": {"name": c["name"], "arguments": c.get("arguments") or "{}"}}
                               for c in calls] if calls else None,
                "tool_call_id": None, "name": None}
    if role == "tool":
        return {"role": role, "content": content, "reasoning_content": None, "tool_calls": None,
                "tool_call_id": m.get("tool_call_id"), "name": m.get("name")}
    return {"role": role, "content": content, "reasoning_content": None, "tool_calls": None, "tool_call_id": None,
            "name": None}


def _limited(stop: str | None, limits: dict[str, Any]) -> bool:
    """Whether a limit stopped the run: one of its `limits` (max_turns, the
    token limits), or an imported stop that names one (inspect's "message
    limit", tau2's "max_steps", verifiers' "truncated")."""
    if not stop:
        return False
    return stop in limits or stop.startswith("max_") or "limit" in stop or "truncat" in stop


def _reward(t: dict[str, Any]) -> float | None:
    """The weighted reward, null when the run was not scored or every reward
    is missing (a missing reward is never a 0: Trace.scored_reward)."""
    rewards = t.get("rewards") or {}
    if "scoring" not in (t.get("phases") or {}) or all(v is None for v in rewards.values()):
        return None
    weights = t.get("reward_weights") or {}
    return float(sum_in_order(v * weights.get(n, 1.0) for n, v in rewards.items() if v is not None))


def _totals(calls: Any) -> tuple[int, tuple[int | None, int | None, int | None], str | None]:
    """Turns, token totals (null where a turn did not report that count, as
    in the frames) and the last turn's finish reason."""
    last = None
    unreported_in = unreported_out = False
    for call in calls:
        if call.get("committed"):
            last = call
            usage = call.get("usage") or {}
            unreported_in = unreported_in or usage.get("input_tokens") is None
            unreported_out = unreported_out or usage.get("output_tokens") is None
    if last is None:
        return 0, (0, 0, 0), None
    return int(last.get("cum_turns", 0)), (
        None if unreported_in else int(last.get("cum_input_tokens", 0)),
        None if unreported_out else int(last.get("cum_output_tokens", 0)),
        None if unreported_in or unreported_out else int(last.get("cum_total_tokens", 0)),
    ), last.get("finish_reason")


def _number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


# ---- writing -------------------------------------------------------------------


def schema(signals: list[str]) -> Any:
    """The Parquet schema of the rows: typed even when there are none."""
    text = pa.string()
    call = pa.struct([("id", text), ("type", text),
                      ("function", pa.struct([("name", text), ("arguments", text)]))])
    message = pa.struct([("role", text), ("content", text), ("reasoning_content", text),
                         ("tool_calls", pa.list_(call)), ("tool_call_id", text), ("name", text)])
    types = {"forked_at_turn": pa.int64(), "messages": pa.list_(message), "reward": pa.float64(), "ok": pa.bool_(),
             "has_error": pa.bool_(), "is_truncated": pa.bool_(), "turns": pa.int64(), "input_tokens": pa.int64(),
             "output_tokens": pa.int64(), "total_tokens": pa.int64(), "cost_usd": pa.float64()}
    fields = [pa.field(name, types.get(name, text)) for name in COLUMNS]
    fields += [pa.field(name, pa.float64()) for name in signals]
    return pa.schema(fields, metadata={b"rollkit.export": b"sft"})


class _ParquetSink:
    """Rows to Parquet, one row group per batch written."""

    def __init__(self, signals: list[str]) -> None:
        self.schema = schema(signals)
        self.writer: Any = None

    def open(self, path: Path) -> None:
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")

    def write(self, rows: list[dict[str, Any]]) -> None:
        self.writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class _JsonLinesSink:
    """Rows to JSON lines, the same keys and values as the Parquet rows."""

    def __init__(self) -> None:
        self.file: Any = None

    def open(self, path: Path) -> None:
        self.file = open(path, "w", encoding="utf-8")

    def write(self, rows: list[dict[str, Any]]) -> None:
        self.file.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
