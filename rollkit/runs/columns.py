"""The columnar store: Parquet tables beside a trace file, built from its JSON lines.

Every trace file rollkit reads (a run folder's traces.jsonl, any .jsonl, or
an imported file in another tool's format) gets six tables in a `.rollkit/`
cache folder next to it (or under the user cache folder when that folder is
not writable): `rollouts`, `turns`, `calls`, `phases`, `signals` and
`messages` (the text of every message: role, content, tool calls as
`name(arguments)`, tool results). They are plain Parquet; DuckDB, Spark or
Ray Data read them as they are.

The JSON lines stay the source of truth. The tables are written in parts,
each covering a byte range of the source and recording in its Parquet
metadata the source's identity (the range's end and a hash of the bytes
just before it, and of the file's head); a part that no longer matches its
source, or that cannot be read (torn, partial), is dropped and the tables
are rebuilt from the JSON, never trusted. A file that grew (a resumed or
live run) gets a new part for its new lines only. Rows come straight from
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["TABLES", "CACHE_DIR", "TableSet", "tables_for", "json_source"]

TABLES = ("rollouts", "turns", "calls", "phases", "signals", "messages")
CACHE_DIR = ".rollkit"
# The store's layout version: a part written by another version is rebuilt.
_VERSION = "1"
_PHASES = ("boot", "setup", "agent", "finalize", "scoring")
_LIMITS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens")
_INFO_IDS = ("example_id", "repeat", "rollout_id")
_NAN = math.nan
# Lines per part while building: bounds the memory of a build (a part's rows
# are held as Python lists before they become Arrow columns).
_BATCH = 50_000
# More parts than this are merged into one on open (a run that grew often).
_MAX_PARTS = 24
_SIGNATURE = 4096
_NOT_IN_SOURCE = "not in the source"
_TIMED_OUT = "scoring timed out"


def _num(value: Any) -> float:
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


def _calls_text(calls: list[dict[str, Any]] | None) -> str:
    return ", ".join(f"{c.get('name')}({c.get('arguments', '{}')})" for c in calls or ())


class _Rows:
    """The rows of one part, one list per column, appended trace by trace."""

    def __init__(self) -> None:
        self.cols: dict[str, dict[str, list[Any]]] = {name: {} for name in TABLES}
        self.count = {name: 0 for name in TABLES}

    def add(self, table: str, row: dict[str, Any]) -> None:
        cols, n = self.cols[table], self.count[table]
        for name, value in row.items():
            column = cols.get(name)
            if column is None:  # a column first seen now (a new reward name): missing before
                column = cols[name] = [None] * n
            column.append(value)
        self.count[table] = n + 1
        for name, column in cols.items():
            if len(column) == n:
                column.append(None)


def _sum(values: Iterable[float]) -> float:
    return sum(values)  # type: ignore[return-value]


def _trace_rows(rows: _Rows, t: dict[str, Any], ordinal: int, offset: int, length: int, source: int) -> None:
    """Append the rows of one parsed trace to every table (the same values
    rollkit.notebook.frames computes from a `Trace`)."""
    info = t.get("info") or {}
    ids = {"id": t["id"], **{name: info.get(name) for name in _INFO_IDS}}
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
    limits = t.get("limits") or {}
    timeouts = t.get("timeouts") or {}
    aborted = bool(t.get("aborted", False))
    stop_condition = t.get("stop_condition")
    last = None
    for call in reversed(calls):
        if call.get("committed"):
            last = call
            break
    durations: dict[str, float] = {}
    start = end = None
    for phase in _PHASES:
        span = spans.get(phase)
        if span is None:
            durations[f"phase.{phase}"] = _NAN
            continue
        s = float(span["start"])
        e = span.get("end")
        durations[f"phase.{phase}"] = _NAN if e is None else float(e) - s
        start = s if start is None else min(start, s)
        if e is not None:
            end = float(e) if end is None else max(end, float(e))
    agent_time = _sum(float(seg.get("charged", 0.0)) for seg in segments)
    model_time = _sum(float(c["end"]) - float(c["start"]) for c in calls)
    waited = _sum(max(0.0, float(after["start"]) - float(before["end"]))
                  for before, after in zip(segments, segments[1:]) if before.get("end") is not None)
    reward = None
    if scored and not all(v is None for v in rewards.values()):
        reward = sum(v * weights.get(n, 1.0) for n, v in rewards.items() if v is not None)
    usage_last = last or {}
    rollout = {
        **ids, "task_key": key, "task_type": task_type, "agent": agent.get("name"), "model": agent.get("model"),
        "ok": t.get("ok"), "completed": bool(t.get("completed", False)), "aborted": aborted,
        "stop": error["type"] if error else stop_condition, "stop_condition": stop_condition,
        "error_type": error["type"] if error else None, "error_phase": error.get("phase") if error else None,
        "error_message": error["message"] if error else None, "reward": _num(reward),
        "turns": int(usage_last.get("cum_turns", 0)), "model_calls": len(calls),
        "input_tokens": int(usage_last.get("cum_input_tokens", 0)),
        "output_tokens": int(usage_last.get("cum_output_tokens", 0)),
        "total_tokens": int(usage_last.get("cum_total_tokens", 0)),
        "segments": len(segments), "agent_time": agent_time, "model_time": model_time,
        "harness_time": max(0.0, agent_time - model_time), "wait_time": waited,
        **durations, "start": _num(start), "end": _num(end),
        **{f"reward.{n}": _num(v) for n, v in rewards.items()},
        **{f"metric.{n}": _num(v) for n, v in metrics.items()},
        "_ordinal": ordinal, "_source": source, "_offset": offset, "_length": length,
    }
    rows.add("rollouts", rollout)
    limit_values = {name: _raw(limits.get(name)) for name in _LIMITS}
    budget = _raw(timeouts.get("agent"))
    number = 0
    for call in calls:
        usage = call.get("usage") or {}
        err = call.get("error")
        c_start, c_end = float(call["start"]), float(call["end"])
        committed = bool(call.get("committed", False))
        row = {
            **ids, "task_key": key, "call": int(call["index"]), "segment": int(call["segment"]),
            "start": c_start, "end": c_end, "latency": c_end - c_start,
            "input_tokens": int(usage.get("input_tokens", 0)), "output_tokens": int(usage.get("output_tokens", 0)),
            "new_input_tokens": int(call.get("new_input_tokens", 0)), "finish_reason": call.get("finish_reason"),
            "dialect": call.get("dialect"),
            "cum_turns": int(call.get("cum_turns", 0)), "cum_input_tokens": int(call.get("cum_input_tokens", 0)),
            "cum_output_tokens": int(call.get("cum_output_tokens", 0)),
            "cum_total_tokens": int(call.get("cum_total_tokens", 0)),
            "cum_agent_time": float(call.get("cum_agent_time", 0.0)),
        }
        rows.add("calls", {**row, "committed": committed, "error_type": err["type"] if err else None,
                           "error_message": err["message"] if err else None, "_ordinal": ordinal})
        if committed:
            number += 1
            row["turn"] = number
            rows.add("turns", {**row, **limit_values, "agent_budget": budget, "_ordinal": ordinal})
    present = [(p, spans[p]) for p in _PHASES if p in spans]
    if present:
        t0 = min(float(span["start"]) for _, span in present)
        for phase, span in present:
            s = float(span["start"])
            e = span.get("end")
            rows.add("phases", {
                **ids, "task_key": key, "phase": phase, "start": s, "end": _num(e),
                "duration": _NAN if e is None else float(e) - s, "offset": s - t0, "ok": t.get("ok"),
                "_ordinal": ordinal,
            })
    signal_errors = t.get("signal_errors") or {}

    def signal(kind: str | None, name: str | None, value: Any, weight: Any, why: str | None, err: str | None) -> None:
        rows.add("signals", {
            **ids, "task_key": key, "task_type": task_type, "kind": kind, "name": name, "value": _num(value),
            "weight": _num(weight), "missing": value is None, "why_missing": why, "error": err,
            "_ordinal": ordinal, "_scored": scored,
        })

    if scored:
        for name, value in rewards.items():
            signal("reward", name, value, weights.get(name, 1.0), *_why(signal_errors, name, value))
        for name, value in metrics.items():
            signal("metric", name, value, None, *_why(signal_errors, name, value))
    else:  # one marker row; the frame gives it one row per signal the task type has elsewhere
        if error:
            why, err_text = "run failed", f"{error['type']}: {error['message']}"
        elif aborted:
            why, err_text = "run aborted", None
        else:
            why, err_text = "not scored", None
        signal(None, None, None, None, why, err_text)
    for index, message in enumerate(t.get("messages") or ()):
        role = message.get("role")
        rows.add("messages", {
            "id": t["id"], "task_key": key, "index": index, "role": role, "content": _text(message.get("content")),
            "tool_calls": _calls_text(message.get("tool_calls")) if role == "assistant" else "",
            "name": message.get("name") or message.get("tool_call_id") if role == "tool" else None,
            "_ordinal": ordinal,
        })


def _why(errors: dict[str, str], name: str, value: Any) -> tuple[str | None, str | None]:
    if value is not None:
        return None, None
    reason = errors.get(name)
    if reason is None:
        return "returned None", None
    if reason == _NOT_IN_SOURCE:
        return _NOT_IN_SOURCE, None
    if reason.startswith(_TIMED_OUT):
        return _TIMED_OUT, reason
    return "scoring raised", reason


# ---- the source's identity ------------------------------------------------------


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _head(path: Path) -> str:
    with open(path, "rb") as f:
        return _digest(f.read(_SIGNATURE))


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
    from ..core.store import load

    folder = _cache_folder(path)
    stat = path.stat()
    stamp = json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "head": _head(path), "v": _VERSION})
    copy, stamp_file = folder / "traces.jsonl", folder / "source.json"
    if copy.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return copy
    traces = load(path)
    tmp = copy.with_name(copy.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for trace in traces:
            f.write(trace.model_dump_json())
            f.write("\n")
    os.replace(tmp, copy)
    stamp_file.write_text(stamp)
    return copy


# ---- parts ----------------------------------------------------------------------


def _part_name(start: int, end: int) -> str:
    return f"part-{start:014d}-{end:014d}"


class TableSet:
    """The tables of one rollkit JSON lines file: the valid parts (one set of
    six Parquet files per byte range of the source), made current on creation.
    `files[table]` lists the Parquet files of a table, in source order."""

    def __init__(self, source: Path, *, cache: Path | None = None, source_index: int = 0) -> None:
        self.source = source
        self.folder = cache or _cache_folder(source)
        self.source_index = source_index
        self.built_lines = 0
        self.files: dict[str, list[Path]] = {}
        self._refresh()

    # Each part's metadata: the byte range it covers, the hash before its
    # end, the source's head hash, its line count and the first ordinal.
    def _read_parts(self) -> list[dict[str, Any]] | None:
        import pyarrow.parquet as pq

        parts = []
        for marker in sorted(self.folder.glob("part-*.json")):
            try:
                meta = json.loads(marker.read_text())
                for table in TABLES:
                    file = self.folder / table / f"{marker.stem}.parquet"
                    stored = pq.read_metadata(file).metadata or {}
                    if stored.get(b"rollkit.part") != marker.stem.encode() or stored.get(b"rollkit.v") != _VERSION.encode():
                        return None
            except (OSError, ValueError, Exception):  # a torn or partial part: rebuild, never trust
                return None
            meta["name"] = marker.stem
            parts.append(meta)
        return parts

    def _valid(self, parts: list[dict[str, Any]], size: int) -> bool:
        expected = 0
        head = _head(self.source) if parts else None
        for part in parts:
            if part["start"] != expected or part["end"] > size or part["head"] != head:
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
        if len(parts) > _MAX_PARTS:
            parts = self._merge(parts)
        self.parts = parts
        self.built_lines = sum(p["lines"] for p in parts)
        self.files = {table: [self.folder / table / f"{p['name']}.parquet" for p in parts] for table in TABLES}

    def _build(self, start: int, size: int, ordinal: int) -> list[dict[str, Any]]:
        """Parts for the complete lines of source[start:size], _BATCH lines each.
        A last line without its newline (torn, or still being written) waits."""
        made = []
        head = _head(self.source)
        loads = json.loads
        with open(self.source, "rb") as f:
            f.seek(start)
            offset = start
            rows, lines, part_start = _Rows(), 0, start
            for line in f:
                if not line.endswith(b"\n"):
                    break
                length = len(line)
                if line.strip():
                    try:
                        parsed = loads(line)
                        _trace_rows(rows, parsed, ordinal, offset, length, self.source_index)
                    except (ValueError, KeyError, TypeError, AttributeError):
                        _bad_line(self.source, offset)
                    ordinal += 1
                    lines += 1
                offset += length
                if lines >= _BATCH:
                    made.append(self._write_part(rows, part_start, offset, lines, head))
                    rows, lines, part_start = _Rows(), 0, offset
            if offset > part_start:
                made.append(self._write_part(rows, part_start, offset, lines, head))
        return made

    def _write_part(self, rows: _Rows, start: int, end: int, lines: int, head: str) -> dict[str, Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        name = _part_name(start, end)
        for table in TABLES:
            columns = rows.cols[table]
            arrays = {}
            for column, values in columns.items():
                try:
                    arrays[column] = pa.array(values, from_pandas=True)  # NaN: null, so SQL sees it missing
                except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types (an id that is an int here, a str there)
                    arrays[column] = pa.array([None if v is None else str(v) for v in values])
            arrow = pa.table(arrays) if arrays else pa.table({"_ordinal": pa.array([], pa.int64())})
            arrow = arrow.replace_schema_metadata({"rollkit.part": name, "rollkit.v": _VERSION})
            folder = self.folder / table
            folder.mkdir(parents=True, exist_ok=True)
            _atomic(lambda tmp: pq.write_table(arrow, tmp, compression="zstd"), folder / f"{name}.parquet")
        meta = {"start": start, "end": end, "lines": lines, "head": head, "before": _before(self.source, end)}
        # The marker last: a part without it is ignored (and cleared with the next rebuild).
        _atomic(lambda tmp: Path(tmp).write_text(json.dumps(meta)), self.folder / f"{name}.json")
        return {**meta, "name": name}

    def _merge(self, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        name = _part_name(parts[0]["start"], parts[-1]["end"])
        for table in TABLES:
            merged = _concat([pq.read_table(self.folder / table / f"{p['name']}.parquet") for p in parts])
            merged = merged.replace_schema_metadata({"rollkit.part": name, "rollkit.v": _VERSION})
            _atomic(lambda tmp: pq.write_table(merged, tmp, compression="zstd"), self.folder / table / f"{name}.parquet")
        meta = {"start": parts[0]["start"], "end": parts[-1]["end"], "lines": sum(p["lines"] for p in parts),
                "head": parts[0]["head"], "before": parts[-1]["before"]}
        _atomic(lambda tmp: Path(tmp).write_text(json.dumps(meta)), self.folder / f"{name}.json")
        for p in parts:
            if p["name"] != name:
                (self.folder / f"{p['name']}.json").unlink()
                for table in TABLES:
                    (self.folder / table / f"{p['name']}.parquet").unlink()
        return [{**meta, "name": name}]


def _bad_line(path: Path, offset: int) -> None:
    from ..core.store import TraceFileError

    with open(path, "rb") as f:
        number = f.read(offset).count(b"\n") + 1
    raise TraceFileError(f"{path}: line {number} is not a rollkit trace; rk.load(path, errors='skip') reads "
                         "the good lines", path=path, line=number)


def _atomic(write: Any, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=target.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _concat(tables: list[Any]) -> Any:
    import pyarrow as pa

    tables = [t.replace_schema_metadata(None) for t in tables]
    return pa.concat_tables(tables, promote_options="permissive")


def tables_for(path: str | os.PathLike[str]) -> TableSet:
    """The current tables of a trace file or run folder (built or brought up to date now)."""
    from ..core.store import _resolve

    source = _resolve(path)
    if not source.exists():
        raise FileNotFoundError(f"no trace file at {source}")
    return TableSet(json_source(source))
