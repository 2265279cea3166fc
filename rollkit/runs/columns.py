"""The columnar store: Parquet tables beside a trace file, built from its JSON lines.

Every trace file rollkit reads (a run folder's traces.jsonl, any .jsonl, or
an imported file in another tool's format) gets six tables in a `.rollkit/`
cache folder next to it (or under the user cache folder when that folder is
not writable): `rollouts`, `turns`, `calls`, `phases`, `signals` and
`messages` (the text of every message: role, content, tool calls as
`name(arguments)`, tool results). They are plain Parquet; DuckDB, Spark or
Ray Data read them as they are. Their columns are rk.frames' (`calls` also
keeps each call's end and running totals, for SQL); a token count the
provider did not report is null, as it is NA in the frames.

The JSON lines stay the source of truth. The tables are written in parts,
each covering a byte range of the source and recording in its Parquet
metadata the source's identity (the range's end and a hash of the bytes
just before it, and of the file's head); a part that no longer matches its
source, or that cannot be read (torn, partial), is dropped and the tables
are rebuilt from the JSON, never trusted. A file that grew (a resumed or
live run) gets a new part for its new lines only; a run that writes its
traces (rollkit.runs.livetables) hands each batch of lines it wrote to
`TableSet.add`, so its tables are complete when it ends. A build from the
file (a first open) makes each part's rollouts table only, what the
rollouts frame reads; a part's other five are built when a table is first
asked for (`files[table]`), from the part's byte range once it is checked
to be the bytes the part was cut from, and its marker lists what it has. A part of 8 MB or more
is built by DuckDB's JSON parser (rollkit.runs.nativebuild); a smaller one,
and one DuckDB must not read, by the Python build here (the reference: both
make the same tables). Rows come straight from
the parsed JSON, never through `Trace` objects (pydantic costs 10x more);
an imported file is first written once as rollkit JSON lines in the cache
folder (its traces do go through `Trace`), then handled the same way.

`rollouts` also holds each trace's byte offset and length in its JSON file
(`_offset`, `_length`), so one trace is parsed back in milliseconds.

This module reads trace files and writes the cache; it runs nothing, draws
nothing and builds no DataFrame (rollkit.runs.lazyrun does).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core._gcpause import paused
from ..core.outcome import MissingSignal, Outcome
from ..core._dependencies import np, pa, pq, tqdm_auto

__all__ = ["TABLES", "CACHE_DIR", "TableSet", "tables_for", "json_source"]

TABLES = ("rollouts", "turns", "calls", "phases", "signals", "messages")
CACHE_DIR = ".rollkit"
# The store's layout version: a part written by another version is rebuilt.
_VERSION = "4"  # 2: trace schema 2 (replies, unreported usage, outcome, the calls of rk.frames.calls); 3: large strings
# 4: the calls' logprob sum and mean and whether they hold token ids; cost
_PHASES = ("boot", "setup", "agent", "finalize", "scoring")
_LIMITS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "max_cost_usd")
_INFO_IDS = ("example_id", "repeat", "rollout_id")
_NAN = math.nan
# Lines and source bytes per part while building, whichever comes first:
# bounds the memory of a build (a part's rows are held as Python lists
# before they become Arrow columns; 50,000 twenty-turn rollouts took 2.6 GB).
_BATCH = 50_000
_PART_BYTES = 128 << 20
# More parts than this and the small ones side by side are merged on open
# (a run that grew often); a part is never merged past the bounds above.
_MAX_PARTS = 24
_SIGNATURE = 4096
# Parts built by DuckDB (rollkit.runs.nativebuild); False: all in Python (the reference).
_NATIVE = True
# A part of fewer source bytes is built in Python: DuckDB's fixed cost (a
# connection, binding the queries: ~0.3 s of CPU a part) is more than what
# Python spends on a few MB (1.5 MB of rollouts: 0.13 s in Python, 0.4 s natively).
_NATIVE_MIN_BYTES = 8 << 20


def _num(value: Any) -> float:
    return _NAN if value is None else float(value)


def _loads() -> Any:
    try:  # about twice as fast as json on trace lines
        import orjson

        return orjson.loads
    except ImportError:
        return json.loads


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
    total = sum(logprobs) if logprobs else _NAN
    return total, (total / len(logprobs) if logprobs else _NAN), tokens.get("ids") is not None


def _calls_text(calls: list[dict[str, Any]] | None) -> str:
    return ", ".join(f"{c.get('name')}({c.get('arguments', '{}')})" for c in calls or ())


_IDS = ("id", *_INFO_IDS)
# Each table's fixed columns, in the order its row tuples hold them.
_COLUMNS = {
    "rollouts": (*_IDS, "task_key", "task_type", "agent", "model", "outcome", "ok", "completed", "aborted", "stop",
                 "stop_condition", "error_type", "error_phase", "error_message", "reward", "turns", "model_calls",
                 "input_tokens", "output_tokens", "total_tokens", "cost_usd", "segments", "agent_time", "model_time",
                 "harness_time", "wait_time", *(f"phase.{p}" for p in _PHASES), "start", "end",
                 "_ordinal", "_offset", "_length", "_scored"),
    # rk.frames.calls' columns, then the end and running totals (for SQL).
    "calls": (*_IDS, "task_key", "call", "segment", "dialect", "committed", "start", "latency", "input_tokens",
              "output_tokens", "cache_read_tokens", "cache_write_tokens", "new_input_tokens", "finish_reason",
              "reply", "reasoning", "tool_calls", "request_messages", "error_type", "error_message", "timing_issue",
              "completion_logprob_sum", "completion_logprob_mean", "has_token_ids", "cost_usd", "end", "cum_turns",
              "cum_input_tokens", "cum_output_tokens", "cum_total_tokens", "cum_agent_time", "cum_cost_usd", "_ordinal"),
    "turns": (*_IDS, "task_key", "turn", "call", "segment", "start", "end", "latency", "input_tokens",
              "output_tokens", "new_input_tokens", "finish_reason", "dialect", "cost_usd", "cum_turns",
              "cum_input_tokens", "cum_output_tokens", "cum_total_tokens", "cum_agent_time", "cum_cost_usd", *_LIMITS,
              "agent_budget", "_ordinal"),
    "phases": (*_IDS, "task_key", "phase", "start", "end", "duration", "offset", "ok", "cost_usd", "_ordinal"),
    "signals": (*_IDS, "task_key", "task_type", "kind", "name", "value", "weight", "missing", "why_missing",
                "error", "_ordinal", "_scored"),
    "messages": ("id", "task_key", "index", "role", "content", "tool_calls", "name", "_ordinal"),
}


_STR = ("id", "task_key", "task_type", "phase", "role", "content", "tool_calls")
# Int columns may hold nulls (a token count not reported); the frames read them as Int64.
_INT = ("turns", "model_calls", "input_tokens", "output_tokens", "total_tokens", "cache_read_tokens",
        "cache_write_tokens", "request_messages", "segments", "_ordinal", "_offset", "_length", "call", "segment",
        "new_input_tokens", "cum_turns", "cum_input_tokens", "cum_output_tokens", "cum_total_tokens", "turn", "index")
_FLOAT = ("reward", "model_time", "harness_time", *(f"phase.{p}" for p in _PHASES), "start", "end", "latency",
          "cum_agent_time", "duration", "offset", "value", "weight", "completion_logprob_sum",
          "completion_logprob_mean", "cost_usd", "cum_cost_usd")
_BOOL = ("completed", "aborted", "committed", "missing", "_scored", "has_token_ids")
# Columns whose values always have one type; the others (ok, the batch ids,
# limits, times that may be 0) are inferred, as pandas infers them in the frames.
_TYPES = {**dict.fromkeys(_STR, "string"), **dict.fromkeys(_INT, "int64"), **dict.fromkeys(_FLOAT, "float64"),
          **dict.fromkeys(_BOOL, "bool_")}


class _Rows:
    """The rows of one part: a tuple per row for each table, and the
    rollouts' reward and metric values (their names vary) kept apart.
    `everything=False`: the rollouts' rows only (a live run's part, a first open's)."""

    def __init__(self, everything: bool = True) -> None:
        self.everything = everything
        self.rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLES}
        self.signals: dict[str, dict[int, float]] = {}

    def columns(self, table: str) -> dict[str, list[Any]]:
        names = _COLUMNS[table]
        rows = self.rows[table]
        columns = dict(zip(names, map(list, zip(*rows)))) if rows else {name: [] for name in names}
        if table == "rollouts":
            for name in sorted(self.signals):
                values = self.signals[name]
                columns[name] = [values.get(i, _NAN) for i in range(len(rows))]
        return columns


def _trace_rows(rows: _Rows, t: dict[str, Any], ordinal: int, offset: int, length: int) -> None:
    """Append the rows of one parsed trace to every table (the same values
    rollkit.notebook.frames computes from a `Trace`)."""
    info = t.get("info") or {}
    trace_id = t["id"]
    ids = (trace_id, info.get("example_id"), info.get("repeat"), info.get("rollout_id"))
    task = t["task"]
    key, task_type = task["key"], task["type"]
    agent = t.get("agent") or {}
    errors = t.get("errors") or []
    error = errors[0] if errors else None
    calls = t.get("model_calls") or []
    segments = t.get("segments") or []
    spans = t.get("phases") or {}
    rewards = t.get("rewards") or {}
    metrics = t.get("metrics") or {}
    weights = t.get("reward_weights") or {}
    scored = "scoring" in spans
    aborted = bool(t.get("aborted", False))
    stop_condition = t.get("stop_condition")
    ok = t.get("ok")
    last = next((call for call in reversed(calls) if call.get("committed")), None)
    durations, start, end, present = _phase_spans(spans)
    agent_time = sum(float(seg.get("charged", 0.0)) for seg in segments)
    model_time = sum(float(c["end"]) - float(c["start"]) for c in calls)
    waited = sum(max(0.0, float(after["start"]) - float(before["end"]))
                 for before, after in zip(segments, segments[1:]) if before.get("end") is not None)
    reward = None
    if scored and not all(v is None for v in rewards.values()):
        reward = sum(v * weights.get(n, 1.0) for n, v in rewards.items() if v is not None)
    table = rows.rows
    limits = t.get("limits") or {}
    limit_values = tuple(_raw(limits.get(name)) for name in _LIMITS)
    budget = _raw((t.get("timeouts") or {}).get("agent"))
    messages = t.get("messages") or ()
    unreported_in, unreported_out = (_call_rows(table, ids, key, calls, messages, limit_values, budget, ordinal)
                                     if rows.everything else _unreported(calls))
    token_totals = _token_totals(last, unreported_in, unreported_out)
    # The trace's cost as Trace.cost_usd reads it: the source's total, else the running total.
    cost_usd = info.get("cost_usd")
    if cost_usd is None:
        cost_usd = calls[-1].get("cum_cost_usd") if calls else 0.0
    row_number = len(table["rollouts"])
    table["rollouts"].append((
        *ids, key, task_type, agent.get("name"), agent.get("model"), Outcome.of_record(t).label, ok,
        bool(t.get("completed", False)), aborted, error["type"] if error else stop_condition, stop_condition,
        error["type"] if error else None, error.get("phase") if error else None, error["message"] if error else None,
        _num(reward), int(last.get("cum_turns", 0)) if last else 0, len(calls), *token_totals, _num(cost_usd),
        len(segments),
        agent_time, model_time, max(0.0, agent_time - model_time), waited, *durations, _num(start), _num(end),
        ordinal, offset, length, scored,
    ))
    for prefix, values in (("reward.", rewards), ("metric.", metrics)):
        for name, value in values.items():
            rows.signals.setdefault(prefix + name, {})[row_number] = _num(value)
    if rows.everything:
        _phase_rows(table["phases"], ids, key, present, ok, cost_usd, ordinal)
        _signal_rows(table["signals"], ids, key, task_type, t, error, scored, aborted, ordinal)
        _message_rows(table["messages"], trace_id, key, messages, ordinal)


def _phase_rows(phases_out: list[tuple[Any, ...]], ids: tuple[Any, ...], key: str,
                present: list[tuple[str, float, Any]], ok: Any, cost_usd: Any, ordinal: int) -> None:
    t0 = min((s for _, s, _ in present), default=0.0)
    for phase, s, e in present:
        phases_out.append((*ids, key, phase, s, _num(e), _NAN if e is None else float(e) - s, s - t0, ok,
                           _num(cost_usd) if phase == "agent" else 0.0, ordinal))


def _unreported(calls: list[dict[str, Any]]) -> tuple[bool, bool]:
    """Whether a turn did not report its input, its output tokens (what
    _call_rows finds, and the fields it must find in each call)."""
    unreported_in = unreported_out = False
    for call in calls:
        int(call["index"]), int(call["segment"])  # a call without them is not a trace's: the line is named
        if call.get("committed"):
            usage = call.get("usage") or {}
            unreported_in = unreported_in or _count(usage.get("input_tokens")) is None
            unreported_out = unreported_out or _count(usage.get("output_tokens")) is None
    return unreported_in, unreported_out


def _token_totals(last: dict[str, Any] | None, unreported_in: bool, unreported_out: bool) -> tuple[int | None, ...]:
    """Input, output and total tokens at the last turn; a total is missing
    (NA) where one of its turns did not report that count, as in the frames."""
    if last is None:
        return (0, 0, 0)
    return (None if unreported_in else int(last.get("cum_input_tokens", 0)),
            None if unreported_out else int(last.get("cum_output_tokens", 0)),
            None if unreported_in or unreported_out else int(last.get("cum_total_tokens", 0)))


def _phase_spans(spans: dict[str, Any]) -> tuple[list[float], float | None, float | None,
                                                 list[tuple[str, float, Any]]]:
    """Each phase's duration (NaN: not run or still open), the first start,
    the last end, and the phases run (name, start, end or None)."""
    durations: list[float] = []
    start = end = None
    present = []
    for phase in _PHASES:
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


def _call_rows(table: dict[str, list[tuple[Any, ...]]], ids: tuple[Any, ...], key: str, calls: list[dict[str, Any]],
               messages: Any, limit_values: tuple[Any, ...], budget: Any, ordinal: int) -> tuple[bool, bool]:
    """A calls row per model call and a turns row per committed one; whether
    a turn did not report its input, its output tokens."""
    number = 0
    unreported_in = unreported_out = False
    calls_out, turns_out = table["calls"], table["turns"]
    for call in calls:
        usage = call.get("usage") or {}
        err = call.get("error")
        c_start, c_end = float(call["start"]), float(call["end"])
        committed = bool(call.get("committed", False))
        input_tokens, output_tokens = _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
        index, segment = int(call["index"]), int(call["segment"])
        new_input, finish, dialect = int(call.get("new_input_tokens", 0)), call.get("finish_reason"), call.get("dialect")
        totals = (int(call.get("cum_turns", 0)), int(call.get("cum_input_tokens", 0)),
                  int(call.get("cum_output_tokens", 0)), int(call.get("cum_total_tokens", 0)),
                  float(call.get("cum_agent_time", 0.0)), _num(call.get("cum_cost_usd")))
        cost = _num(call.get("cost_usd"))
        reply = _reply(call, messages, committed)
        calls_out.append((
            *ids, key, index, segment, dialect, committed, c_start, c_end - c_start, input_tokens, output_tokens,
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
            turns_out.append((*ids, key, number, index, segment, c_start, c_end, c_end - c_start, input_tokens,
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
            signals_out.append((*ids, key, task_type, "reward", name, _num(value), _num(weights.get(name, 1.0)),
                                value is None, why, err_text, ordinal, True))
        for name, value in metrics.items():
            why, err_text = _why(signal_errors, name, value)
            signals_out.append((*ids, key, task_type, "metric", name, _num(value), _NAN, value is None, why,
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


def _why(errors: dict[str, str], name: str, value: Any) -> tuple[str | None, str | None]:
    """As rollkit.notebook.frames reads a missing signal, from the raw record."""
    if value is not None:
        return None, None
    error = errors.get(name)
    why = MissingSignal.of_error(error)
    return why.value, error if why in (MissingSignal.SCORING_RAISED, MissingSignal.SCORING_TIMED_OUT) else None


# ---- the source's identity ------------------------------------------------------


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _head(path: Path, end: int = _SIGNATURE) -> str:
    """A hash of the file's first bytes, never past `end`: a part records the
    head it covers, so a part written while the file was small (a run's
    first traces) still matches once the file has grown."""
    with open(path, "rb") as f:
        return _digest(f.read(min(end, _SIGNATURE)))


def _before(path: Path, end: int) -> str:
    """A hash of the bytes just before `end`: a rewritten file differs there."""
    with open(path, "rb") as f:
        f.seek(max(0, end - _SIGNATURE))
        return _digest(f.read(min(end, _SIGNATURE)))


# ---- where the cache lives ------------------------------------------------------


def _cache_folder(source: Path) -> Path:
    """`.rollkit/<file name>/` beside the source, or the same under the user
    cache folder (keyed by the source's absolute path) when that is not writable."""
    beside = source.parent / CACHE_DIR / source.name
    try:
        beside.mkdir(parents=True, exist_ok=True)
        probe = beside / ".probe"
        probe.write_bytes(b"")
        probe.unlink()
        return beside
    except OSError:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rollkit" / "columns"
        key = _digest(str(source.resolve()).encode())
        folder = root / f"{source.name}-{key}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder


def _is_rollkit_jsonl(path: Path) -> bool:
    from ..core.store import _sniff, ROLLKIT

    return _sniff(path).name == ROLLKIT


def json_source(path: Path) -> Path:
    """The rollkit JSON lines the tables of `path` are built from: the file
    itself, or for another tool's format a copy written once in the cache
    folder (rewritten when the original's size, mtime or head changes)."""
    if _is_rollkit_jsonl(path):
        return path
    from ..core.store import load, save

    folder = _cache_folder(path)
    stat = path.stat()
    stamp = json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "head": _head(path), "v": _VERSION})
    copy, stamp_file = folder / "traces.jsonl", folder / "source.json"
    if copy.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return copy
    save(load(path), copy)  # written whole, then moved into place
    stamp_file.write_text(stamp)
    return copy


# ---- parts ----------------------------------------------------------------------


def _part_name(start: int, end: int) -> str:
    return f"part-{start:014d}-{end:014d}"


class TableSet:
    """The tables of one rollkit JSON lines file: the valid parts (one set of
    six Parquet files per byte range of the source), made current on creation.
    `files[table]` lists the Parquet files of a table, in source order."""

    def __init__(self, source: Path, *, cache: Path | None = None, progress: bool | None = None) -> None:
        self.source = source
        self.progress = progress
        self.folder = cache or _cache_folder(source)
        self.built_lines = 0
        self.files: dict[str, list[Path]] = {}
        self._refresh()

    # Each part's metadata: the byte range it covers, the hash before its
    # end, the source's head hash, its line count and the first ordinal.
    def _read_parts(self) -> list[dict[str, Any]] | None:
        parts = []
        for marker in sorted(self.folder.glob("part-*.json")):
            try:
                meta = json.loads(marker.read_text())
                meta["tables"] = _listed(meta)
                for table in meta["tables"]:
                    file = self.folder / table / f"{marker.stem}.parquet"
                    stored = footer(file).metadata or {}
                    if stored.get(b"rollkit.part") != marker.stem.encode() or stored.get(b"rollkit.v") != _VERSION.encode():
                        return None
            except (OSError, ValueError, Exception):  # a torn or partial part: rebuild, never trust
                return None
            meta["name"] = marker.stem
            parts.append(meta)
        return parts

    def _valid(self, parts: list[dict[str, Any]], size: int) -> bool:
        expected = 0
        heads: dict[int, str] = {}
        for part in parts:
            if part["start"] != expected or part["end"] > size:
                return False
            reach = min(part["end"], _SIGNATURE)
            if reach not in heads:
                heads[reach] = _head(self.source, reach)
            if part["head"] != heads[reach]:
                return False
            if part["before"] != _before(self.source, part["end"]):
                return False
            expected = part["end"]
        return True

    def _clear(self) -> None:
        for marker in self.folder.glob("part-*.json"):
            marker.unlink()
        for table in TABLES:
            for file in (self.folder / table).glob("*.parquet") if (self.folder / table).exists() else ():
                file.unlink()

    def _refresh(self) -> None:
        size = self.source.stat().st_size
        parts = self._read_parts()
        if parts is None or not self._valid(parts, size):
            self._clear()
            parts = []
        covered = parts[-1]["end"] if parts else 0
        ordinal = sum(p["lines"] for p in parts)
        if covered < size:
            parts.extend(self._build(covered, size, ordinal))
        self._settle(parts)

    def _complete(self, table: str) -> None:
        """Build the tables the parts lacking `table` lack (a part built by
        a first open has its rollouts only), from their bytes of the source,
        after checking those bytes are still what the part was built from
        (if not: the tables are made current first, as opening would)."""
        if all(table in p["tables"] for p in self.parts):
            return
        # As the folder is now: another process may have built them, or merged parts (a live run's writer).
        parts = self._read_parts()
        if parts is None or [p["name"] for p in parts] != [p["name"] for p in self.parts] \
                or not self._valid(parts, self.source.stat().st_size):
            self._refresh()
        else:
            self.parts = parts
        lacking = [p for p in self.parts if table not in p["tables"]]
        with paused(), _progress(self.source, sum(p["end"] - p["start"] for p in lacking), self.progress) as bar, \
                open(self.source, "rb") as f:
            for part in lacking:
                f.seek(part["start"])
                data = f.read(part["end"] - part["start"])
                starts, ends, lengths = _lines(data, np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1)
                missing = tuple(t for t in TABLES if t not in part["tables"])
                ordinal = sum(p["lines"] for p in self.parts[:self.parts.index(part)])
                part.update(self._part(data, starts, ends, lengths, part["start"], ordinal, missing, part))
                bar.update(len(data))

    def _settle(self, parts: list[dict[str, Any]]) -> None:
        if len(parts) > _MAX_PARTS:
            parts = self._compact(parts)
        self.parts = parts
        self.built_lines = sum(p["lines"] for p in parts)
        self.files = _Files(self)

    def add(self, data: bytes, start: int) -> None:
        """Bring the tables up to `start + len(data)`, where `data` is
        complete lines just written to the source at `start` (a run writing
        its traces, rollkit.runs.livetables): the part is built from these
        bytes, as a build from the file would build it, without reading
        them back. Parts another process built meanwhile (a monitor opening
        the live run) are kept and only what they miss is added; anything
        else (a gap before `start`, parts that no longer match) is built
        from the file, as opening it would."""
        end = start + len(data)
        parts = self._read_parts()
        covered = parts[-1]["end"] if parts else 0
        if parts is None or not start <= covered <= end or not self._valid(parts, end):  # not ours to patch
            self._refresh()
            return
        if covered < end:
            piece = data[covered - start:]
            starts, ends, lengths = _lines(piece, np.flatnonzero(np.frombuffer(piece, dtype=np.uint8) == 10) + 1)
            parts.append(self._part(piece, starts, ends, lengths, covered, sum(p["lines"] for p in parts),
                                    self._FIRST))
        self._settle(parts)

    def _build(self, start: int, size: int, ordinal: int) -> list[dict[str, Any]]:
        # Building makes millions of tuples and frees none until a part is
        # written: the cyclic collector would walk them again and again.
        with paused(), _progress(self.source, size - start, self.progress) as bar:
            return self._build_parts(start, ordinal, bar)

    # A first open builds the rollouts only; the other tables wait until asked for (_complete).
    _FIRST = ("rollouts",)

    def _build_parts(self, start: int, ordinal: int, bar: Any) -> list[dict[str, Any]]:
        """Parts for the complete lines of the source from `start` (_BATCH
        lines or _PART_BYTES of source each). A last line without its
        newline (torn, or still being written) waits."""
        made = []
        with open(self.source, "rb") as f:
            for part_start, data, ends in _blocks(f, start):
                starts, ends, lengths = _lines(data, ends)
                made.append(self._part(data, starts, ends, lengths, part_start, ordinal, self._FIRST))
                ordinal += len(starts)
                bar.update(len(data))
        return made

    def _part(self, data: bytes, starts: Any, ends: Any, lengths: Any, part_start: int, ordinal: int,
              tables: tuple[str, ...] = TABLES, built: dict[str, Any] | None = None) -> dict[str, Any]:
        """The part of `data` (the source's lines from `part_start`) built
        and written: `tables` of it, beside those of `built` (its marker)."""
        part = None
        if _NATIVE and len(starts) and len(data) >= _NATIVE_MIN_BYTES:
            part = self._native(data, starts, ends, lengths, part_start, ordinal, tables, built)
        if part is None:
            made = _python_tables(self._python_rows(data, starts, ends, part_start, ordinal, tables), tables)
            part = self._write_part(made.items(), part_start, part_start + len(data), len(starts),
                                    "python", built)
        return part

    def _native(self, data: bytes, starts: Any, ends: Any, lengths: Any, part_start: int, ordinal: int,
                tables: tuple[str, ...], built: dict[str, Any] | None) -> dict[str, Any] | None:
        """The part built by DuckDB (rollkit.runs.nativebuild) and written,
        each table as soon as it is made; None when the Python build must
        make it (it names a bad line; its files replace any written here)."""
        from .nativebuild import NativeUnfit, native_tables

        try:
            import duckdb

            offsets = np.empty(len(starts) + 1, dtype=np.int64)
            if len(starts) and (starts[1:] == ends[:-1]).all() and starts[0] == 0:  # no blank lines between
                offsets[0], offsets[1:] = 0, ends
                lines = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(data))
            else:
                lines = pa.array([bytes(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist())], pa.large_binary()) \
                    .cast(pa.large_string())
            lines.validate(full=True)  # UTF-8: a line that is not is the Python build's to report
            made = native_tables(lines, ordinal, starts + part_start, lengths, _COLUMNS, _TYPES, tables)
            return self._write_part(made, part_start, part_start + len(data), len(starts), "native", built)
        except (NativeUnfit, duckdb.Error, pa.ArrowException):
            return None

    def _python_rows(self, data: bytes, starts: Any, ends: Any, part_start: int, ordinal: int,
                     tables: tuple[str, ...]) -> _Rows:
        rows = _Rows(everything=set(tables) != {"rollouts"})
        loads = _loads()
        view = memoryview(data)
        for s, e in zip(starts.tolist(), ends.tolist()):
            try:
                _trace_rows(rows, loads(view[s:e]), ordinal, part_start + s, e - s)
            except (ValueError, KeyError, TypeError, AttributeError):
                _bad_line(self.source, part_start + s)
            ordinal += 1
        return rows

    def _write_part(self, tables: Iterable[tuple[str, Any]], start: int, end: int, lines: int,
                    build: str, built: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write a part's tables, then its marker, listing them beside those
        `built` already (the marker of the part they complete)."""
        name = _part_name(start, end)
        written = list(built["tables"]) if built else []
        for table, arrow in tables:
            arrow = _large_strings(arrow).replace_schema_metadata({"rollkit.part": name, "rollkit.v": _VERSION})
            folder = self.folder / table
            folder.mkdir(parents=True, exist_ok=True)
            _atomic(lambda tmp: pq.write_table(arrow, tmp, compression="lz4"), folder / f"{name}.parquet")
            written.append(table)
        if built:
            build = "+".join(sorted({*built["build"].split("+"), build}))
        meta = {"start": start, "end": end, "lines": lines, "head": _head(self.source, end),
                "before": _before(self.source, end), "build": build,
                "tables": [t for t in TABLES if t in written]}
        # The marker last: a part without it is ignored (and cleared with the next rebuild).
        _atomic(lambda tmp: Path(tmp).write_text(json.dumps(meta)), self.folder / f"{name}.json")
        return {**meta, "name": name}

    def _compact(self, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The parts with each run of small neighbours merged into one, as
        long as the merged part stays within the build's bounds (a million
        rollouts' twenty full parts stay as they are)."""
        kept: list[dict[str, Any]] = []
        group: list[dict[str, Any]] = []
        for part in [*parts, None]:
            if group and (part is None or sum(p["lines"] for p in group) + part["lines"] > _BATCH
                          or part["end"] - group[0]["start"] > _PART_BYTES):
                kept.extend(self._merge(group) if len(group) > 1 else group)
                group = []
            if part is not None:
                group.append(part)
        return kept

    def _merge(self, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One part of `parts`, with the tables all of them have (the others
        are built for the merged part when first asked for)."""
        name = _part_name(parts[0]["start"], parts[-1]["end"])
        common = [t for t in TABLES if all(t in p["tables"] for p in parts)]
        for table in common:
            merged = _concat([pq.read_table(self.folder / table / f"{p['name']}.parquet") for p in parts])
            merged = merged.replace_schema_metadata({"rollkit.part": name, "rollkit.v": _VERSION})
            _atomic(lambda tmp: pq.write_table(merged, tmp, compression="lz4"), self.folder / table / f"{name}.parquet")
        meta = {"start": parts[0]["start"], "end": parts[-1]["end"], "lines": sum(p["lines"] for p in parts),
                "head": _head(self.source, parts[-1]["end"]), "before": parts[-1]["before"],
                "build": "+".join(sorted({b for p in parts for b in p.get("build", "python").split("+")})),
                "tables": common}
        _atomic(lambda tmp: Path(tmp).write_text(json.dumps(meta)), self.folder / f"{name}.json")
        for p in parts:
            if p["name"] != name:
                (self.folder / f"{p['name']}.json").unlink()
                for table in TABLES:
                    (self.folder / table / f"{p['name']}.parquet").unlink(missing_ok=True)
        return [{**meta, "name": name}]


def _listed(meta: dict[str, Any]) -> list[str]:
    """The tables a part's marker says it has (a marker from before tables
    were built on demand lists none: it has all six)."""
    tables = meta.get("tables", list(TABLES))
    if not isinstance(tables, list) or "rollouts" not in tables or not set(tables) <= set(TABLES):
        raise ValueError(f"a part's tables are {tables!r}")
    return tables


class _Files(Mapping):
    """`TableSet.files`: each table's Parquet files, in source order; a
    table some part lacks is built for it when first asked for."""

    def __init__(self, tables: TableSet) -> None:
        self._tables = tables

    def __getitem__(self, table: str) -> list[Path]:
        if table not in TABLES:
            raise KeyError(table)
        self._tables._complete(table)
        return [self._tables.folder / table / f"{p['name']}.parquet" for p in self._tables.parts]

    def __iter__(self) -> Iterator[str]:
        return iter(TABLES)

    def __len__(self) -> int:
        return len(TABLES)


def _python_tables(rows: _Rows, tables: tuple[str, ...] = TABLES) -> dict[str, Any]:
    """The Python build's Arrow tables of a part's rows: a column's type is
    its kind's when known, else inferred from its values, as pandas infers
    them in the frames."""
    made = {}
    for table in tables:
        columns = rows.columns(table)
        arrays = {}
        for column, values in columns.items():
            kind = _TYPES.get(column)
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
        made[table] = pa.table(arrays) if arrays else pa.table({"_ordinal": pa.array([], pa.int64())})
    return made


_WHITESPACE = b" \t\n\r\x0b\x0c"


def _blocks(f: Any, start: int) -> Any:
    """(part start, bytes, line ends within them) for each part of the file
    from `start`: a part ends at the line that makes it _BATCH lines (not
    counting blank ones) or _PART_BYTES long; the complete lines only."""
    f.seek(start)
    pending = b""
    at = start
    while True:
        data = pending + f.read(max(0, _PART_BYTES - len(pending)))
        if not data:
            return
        ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
        cut = _cut(data, ends)
        if cut is None and len(data) >= _PART_BYTES:  # the line crossing the bound goes on past what was read
            rest = f.readline()
            if rest.endswith(b"\n"):
                data += rest
                ends = np.append(ends, len(data))
                cut = len(ends) - 1
        if cut is None:  # the end of the file: its complete lines, the rest waits
            if not len(ends):
                return
            yield at, memoryview(data)[:ends[-1]], ends
            return
        end = int(ends[cut])
        # A view of the part, not a copy of it (128 MB copied a part cost a tenth of a native build).
        yield at, memoryview(data)[:end], ends[:cut + 1]
        pending, at = data[end:], at + end


def _blank(data: bytes, starts: Any, ends: Any) -> Any:
    """Which lines hold only whitespace (only those starting with it are looked at)."""
    blank = np.zeros(len(starts), dtype=bool)
    if len(starts):
        first = np.frombuffer(data, dtype=np.uint8)[starts]
        for k in np.flatnonzero(np.isin(first, np.frombuffer(_WHITESPACE, dtype=np.uint8))).tolist():
            blank[k] = not bytes(data[starts[k]:ends[k]]).strip()
    return blank


def _cut(data: bytes, ends: Any) -> int | None:
    if not len(ends):
        return None
    starts = np.concatenate(([0], ends[:-1]))
    counted = np.cumsum(~_blank(data, starts, ends))
    over = np.flatnonzero((counted >= _BATCH) | (ends >= _PART_BYTES))
    return int(over[0]) if len(over) else None


def _lines(data: bytes, ends: Any) -> tuple[Any, Any, Any]:
    """The start, end and length of each non-blank line of a part."""
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
    ends = ends.astype(np.int64)
    keep = ~_blank(data, starts, ends)
    starts, ends = starts[keep], ends[keep]
    return starts, ends, ends - starts


# A build of at least this many bytes shows a progress bar (a smaller one is over before it would draw).
_PROGRESS_BYTES = 32 << 20


@contextmanager
def _progress(source: Path, total: int, show: bool | None) -> Any:
    """A tqdm.auto bar of the source bytes read (a widget in notebooks, text
    on stderr in a terminal), or a stand-in that counts nothing."""
    if show is False or (show is None and total < _PROGRESS_BYTES):
        yield _NoBar()
        return

    with tqdm_auto.tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, dynamic_ncols=True,
              desc=f"building the tables of {source.name}") as bar:
        yield bar


class _NoBar:
    def update(self, n: int) -> None:
        pass


def _large_strings(table: Any) -> Any:
    """Text columns stored as Arrow's large_string: pandas (3) holds its str
    columns as large_string, so a frame read from these tables takes them as
    they are instead of casting every text column of the run on each read
    (a fifth of opening a run's rollouts frame, measured at a million rows)."""
    fields = [pa.field(f.name, pa.large_string()) if f.type == pa.string() else f for f in table.schema]
    return table.cast(pa.schema(fields)) if fields != list(table.schema) else table


def _bad_line(path: Path, offset: int) -> None:
    from ..core.store import line_error

    with open(path, "rb") as f:
        number = f.read(offset).count(b"\n") + 1
        raw = f.readline()
    raise line_error(path, number, raw)


def _atomic(write: Any, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=target.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_FOOTERS: dict[tuple[str, int, int, int], Any] = {}


def footer(file: Path) -> Any:
    """A Parquet file's footer (pyarrow FileMetaData: schema, row counts,
    key-value metadata), read once per version of the file in a process:
    opening a run reads every part's footer, and each frame would again."""
    stat = file.stat()
    key = (str(file), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    meta = _FOOTERS.get(key)
    if meta is None:
        meta = pq.read_metadata(file)
        if len(_FOOTERS) >= 4096:  # parts are rewritten, not edited: old versions' entries just age out
            _FOOTERS.clear()
        _FOOTERS[key] = meta
    return meta


def _concat(tables: list[Any]) -> Any:
    tables = [t.replace_schema_metadata(None) for t in tables]
    return pa.concat_tables(tables, promote_options="permissive")


def tables_for(path: str | os.PathLike[str], *, progress: bool | None = None) -> TableSet:
    """The current tables of a trace file or run folder (built or brought up to date now)."""
    from ..core.store import _resolve

    source = _resolve(path)
    if not source.exists():
        raise FileNotFoundError(f"no trace file at {source}")
    return TableSet(json_source(source), progress=progress)
