"""Saving and loading traces: one JSON object per line (JSONL), and the
table of other trace formats rollkit reads and writes.

A trace file is append-friendly: each finished trace is one line, so a crash
loses at most what was in flight, and a reader can load the good lines of a
damaged file. Each line says which trace format wrote it
(`"schema_version"`, `rollkit.core.trace.SCHEMA_VERSION`). A line from a
newer rollkit holding fields this one does not know still loads: those
fields are left out, and the file gets one warning naming them all. `load` reports a bad line with its number and the field that is
wrong (`TraceFileError.line`, `.field`); with `errors="skip"` the good lines
still load and the bad ones come back as warnings.

Other tools' records (inspect-ai logs, verifiers results, agent trajectories,
...) come in through the format table: a layer above the core registers a
format with `register_format` (a sniffer that recognises a file by its first
bytes, a reader, a writer), and `load`/`save` pick it by content or by
`format=`. The core knows no peer's format itself. This module knows traces
and files, nothing about running.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic

from . import safe_read
from .gcpause import paused
from .safe_read import TraceFileError  # defined there, where every reader raises it
from .outcome import MissingSignal
from .trace import SCHEMA_VERSION, Trace

__all__ = ["save", "load", "TraceFileError", "append_trace", "trace_of_line", "line_error", "record_of_line", "load_refuses", "register_format", "formats", "TraceFormat", "ROLLKIT", "NOT_IN_SOURCE"]

ROLLKIT = "rollkit"
# Why a signal of an imported trace is missing when its tool did not record
# it (the trace's signal_errors, and the why_missing of rk.frames.signals).
NOT_IN_SOURCE = MissingSignal.NOT_IN_SOURCE.value
# How much of a file the sniffers see.
_HEAD = 64 * 1024


# What a Python caller of rk.load can do about a bad line (the CLI says its own).
SKIP_HINT = "load with errors='skip' to read the good lines"


@dataclass(frozen=True)
class TraceFormat:
    """A trace format rollkit reads or writes.

    `sniff(head)` says whether a file whose first bytes are `head` is in this
    format; `sniff_file(path)`, when given, says it from the file itself (a
    format recognised by parsing, whose telling field may come after any
    amount of data) and is used instead; `read(path, errors)` returns its traces (raising TraceFileError
    naming the file, the record and the field); `write(traces, path)` writes
    them and returns the file written. `needs` names the pip extra a reader
    or writer imports (shown when it is missing)."""

    name: str
    about: str
    sniff: Callable[[bytes], bool] | None = None
    sniff_file: Callable[[Path], bool] | None = None
    read: Callable[[Path, str], list[Trace]] | None = None
    write: Callable[[list[Trace], Path], Path] | None = None
    needs: str | None = None


_FORMATS: dict[str, TraceFormat] = {}


def register_format(fmt: TraceFormat) -> None:
    """Add (or replace) a format in the table `load` and `save` consult.
    Sniffers run in registration order, after rollkit's own."""
    if not isinstance(fmt, TraceFormat):
        raise TypeError(f"register_format takes a TraceFormat, got {type(fmt).__name__}")
    _FORMATS[fmt.name] = fmt


def formats() -> dict[str, TraceFormat]:
    """The formats known, by name: rollkit's own first."""
    return dict(_FORMATS)


def resolve_path(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if path.is_dir():
        # A run folder as its tool writes it: rollkit's (and verifiers v1's)
        # traces.jsonl, else tau2-bench's results.json (beside simulations/)
        # or verifiers' results.jsonl (beside metadata.json).
        return next((path / name for name in _RUN_FILES if (path / name).is_file()), path / "traces.jsonl")
    return path


_RUN_FILES = ("traces.jsonl", "results.json", "results.jsonl")


def _format_named(name: Any, *, reading: bool) -> TraceFormat:
    fmt = _FORMATS.get(name) if isinstance(name, str) else None
    able = [n for n, f in _FORMATS.items() if (f.read if reading else f.write) is not None]
    if fmt is None or (fmt.read if reading else fmt.write) is None:
        verb = "reads" if reading else "writes"
        raise ValueError(f"format={name!r} is not a format rollkit {verb}; the formats are {', '.join(able)}")
    return fmt


def check_traces(traces: Any, *, who: str = "rk.save",
             hint: str = "(the traces of rk.evaluate, a rollout's .trace, or rk.load(path))") -> list[Trace]:
    """`traces` as a list, every item checked to be a Trace (the names
    `who` takes, for the message)."""
    if isinstance(traces, Trace):
        return [traces]
    if isinstance(traces, (str, bytes, os.PathLike)) or not isinstance(traces, Iterable):
        raise TypeError(f"{who} takes a rk.Trace or a list of them, got {type(traces).__name__}")
    items = list(traces)
    for i, item in enumerate(items):
        if not isinstance(item, Trace):
            raise TypeError(f"item {i} is {type(item).__name__}, not a rollkit Trace; pass rk.Trace objects {hint}")
    return items


def save(traces: Trace | Iterable[Trace], path: str | os.PathLike[str], *, format: str = ROLLKIT) -> Path:
    """Write traces to `path` (a .jsonl file, or a folder that gets traces.jsonl),
    replacing what was there. Returns the file written.

    `format=` writes another format (e.g. "inspect", "messages"; see
    `rollkit.core.store.formats()`). Every item is checked before anything is
    written, so a wrong item leaves an existing file as it was."""
    items = check_traces(traces)
    fmt = _format_named(format, reading=False)
    if fmt.name != ROLLKIT:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return fmt.write(items, path)  # type: ignore[misc]
    path = resolve_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for trace in items:
            f.write(trace.model_dump_json())
            f.write("\n")
    os.replace(tmp, path)
    return path


def append_trace(trace: Trace, file) -> None:  # type: ignore[no-untyped-def]
    """Append one trace as one line and flush, so it survives a crash."""
    file.write(trace.model_dump_json() + "\n")
    file.flush()


# What rollkit's own lines open with (Trace.model_dump_json writes the id
# first, then the task): the quick answer for the files rollkit wrote.
_ROLLKIT_HEAD = re.compile(rb'\s*\{\s*"id"\s*:\s*"[^"]*"\s*,\s*"task"\s*:\s*\{')
# Fields every trace line holds, whatever order a tool wrote them in (jq -S
# sorts them): the answer for a line rewritten by something else.
_ROLLKIT_KEYS = frozenset({"id", "task", "model_calls", "phases", "schema_version"})


def _sniff_rollkit(path: Path) -> bool:
    """A rollkit trace file: its first line opens as rollkit writes one, or
    is a JSON object holding every field a trace line always holds (read
    within safe_read's bounds: a longer line is refused, naming the file)."""
    if _ROLLKIT_HEAD.match(safe_read.read_head(path, _HEAD)) is not None:
        return True
    first = safe_read.first_line(path)
    # Every other format's file passes through here first: parse only a line
    # that names the fields (a compact JSON document of another tool's would
    # otherwise be parsed twice, here and by its own sniffer).
    if first is None or not all(b'"%s"' % key.encode() in first[1] for key in _ROLLKIT_KEYS):
        return False
    if safe_read.too_costly(first[1]) is not None:
        return False
    try:
        record = json.loads(first[1])
    except (ValueError, RecursionError):
        return False
    return isinstance(record, dict) and _ROLLKIT_KEYS <= record.keys()


def sniff_format(path: Path) -> TraceFormat:
    head = safe_read.read_head(path, _HEAD)
    for fmt in _FORMATS.values():
        if (fmt.sniff is not None or fmt.sniff_file is not None) and fmt.read is not None:
            try:
                if fmt.sniff_file(path) if fmt.sniff_file is not None else fmt.sniff(head):  # type: ignore[misc]
                    return fmt
            except (TraceFileError, MemoryError, RecursionError):
                raise  # the file passed a bound (safe_read) while being recognised: refused, naming it
            except ImportError:
                raise  # a reader that cannot load (its module is imported on first use) is a broken install, not a non-match
            except Exception:  # a sniffer that trips over odd bytes just does not claim the file
                continue
    return _FORMATS[ROLLKIT]


def load(path: str | os.PathLike[str], *, errors: str = "raise", format: str | None = None) -> list[Trace]:
    """Read traces from a file or a folder holding traces.jsonl.

    The format is recognised by the file's content (rollkit's JSON lines,
    or any format registered, e.g. an inspect-ai log); `format=` forces one.
    A record that is not a trace raises `TraceFileError` naming the file, the
    line (or sample) and the field; with errors="skip" it is skipped with a
    warning and the good ones load. A last line without its newline (torn by
    a crash) is always skipped with a warning: the run that wrote it never
    finished that write."""
    if errors not in ("raise", "skip"):
        raise ValueError("errors must be 'raise' or 'skip'")
    fmt = None if format is None else _format_named(format, reading=True)
    path = resolve_path(path)
    if not path.exists():
        raise FileNotFoundError(f"no trace file at {path}")
    safe_read.check_regular(path)  # a FIFO or a device would block or never end
    if fmt is None:
        fmt = sniff_format(path)
    # Loading makes many objects and frees none; the cyclic collector would
    # walk the growing heap again and again (a third to half of reading a
    # big file, in every format): it is paused, scoped, and what was loaded
    # is made old at the end rather than walked as young (gcpause).
    try:
        with paused(keep=True):
            return fmt.read(path, errors)  # type: ignore[misc]
    except TraceFileError:
        raise
    except pydantic.ValidationError as exc:  # a reader that let a refused field through: still name it
        message, field = _first_error(exc)
        raise TraceFileError(f"{path}: is not a {fmt.name} trace file (field {field}: {message})",
                             path=path, field=field) from None
    except (RecursionError, OverflowError, ValueError) as exc:  # never a bare crash out of a hostile file
        what = safe_read.DEEP if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {exc}"
        raise TraceFileError(f"{path}: cannot be read as {fmt.name} ({what})", path=path) from None


def _first_error(exc: pydantic.ValidationError, raw: bytes | None = None) -> tuple[str, str | None]:
    """The message and dotted field of the error to name when a record has
    several: a wrong value before a field this rollkit does not know (unknown
    fields alone are read, with a warning: `_without_unknown`), then the one
    whose field comes first in the record as written (in `raw`, when given),
    then by field name. Rollkit's own order, so the field an error names
    never depends on the order a pydantic release reports them in."""
    errors = exc.errors(include_url=False, include_input=False)
    document = None
    if raw is not None:
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON at all: the names alone decide
            document = None
    first = min(errors, key=lambda error: (error["type"] == "extra_forbidden",
                                           _place(document, error.get("loc") or ()), _dotted(error)))
    return first["msg"], _dotted(first) or None


def _dotted(error: Any) -> str:
    return ".".join(str(part) for part in error.get("loc") or ())


def _place(document: Any, loc: tuple[Any, ...]) -> tuple[int, ...]:
    """Where `loc` stands in `document`: the index of each key or item along
    the path. A field missing from its record sorts after the fields present;
    pydantic's union and discriminator tags add nothing."""
    place: list[int] = []
    node = document
    for number, part in enumerate(loc):
        if isinstance(node, dict):
            if part not in node:
                following = loc[number + 1] if number + 1 < len(loc) else None
                if following is not None and following in node:
                    continue  # a discriminator's tag (messages.3.assistant.content), not a key
                place.append(len(node))
                break
            place.append(list(node).index(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            place.append(part)
            node = node[part]
        else:
            break
    return tuple(place)


def line_error(path: Path, number: int, raw: bytes) -> TraceFileError:
    """The TraceFileError for line `number` of rollkit trace file `path`,
    whose bytes are `raw` and which does not load (what is wrong, the field,
    and the advice for Python callers): for readers of the file other than
    `load` (rollkit.tables.columns), so a bad line reads the same everywhere."""
    fault = _unsafe(path, number, raw)
    if fault is not None:
        return TraceFileError(fault[0], path=path, line=number, field=fault[1], hint=SKIP_HINT)
    try:
        trace_of_line(raw)
    except pydantic.ValidationError as exc:
        detail, field = _bad_line(exc, raw)
        return TraceFileError(f"{path}: line {number} is not a rollkit trace ({detail})", path=path, line=number,
                              field=field, hint=SKIP_HINT)
    return TraceFileError(f"{path}: line {number} is not a rollkit trace", path=path, line=number, hint=SKIP_HINT)


def record_of_line(raw: bytes) -> dict[str, Any] | None:
    """A rollkit trace line read as `load` reads it, as the JSON record of
    its Trace (non-finite floats kept); None when `load` refuses it
    (`line_error` says why). For a reader whose own fast parse refused the
    line or could not use it (rollkit.tables.columns), so every reader of a
    line agrees with `load`: what it reads they read, what it refuses they
    refuse with its error (of a key written twice the last counts, a
    number too large for a float is infinity, NaN or Infinity is refused
    by field, a line nested deeper than its parser goes is refused)."""
    if _unsafe(Path(), 0, raw) is not None:
        return None
    try:
        with warnings.catch_warnings():  # a newer rollkit's fields: the reader that opened the file warned
            warnings.simplefilter("ignore")
            trace = trace_of_line(raw)
    except pydantic.ValidationError:
        return None
    return trace.model_dump(mode="python", by_alias=True)


def load_refuses(raw: bytes, finite: bool = False) -> bool:
    """Whether `load` refuses a whole line (record_of_line's None), without
    making its record (the most of record_of_line's time): for a reader asking
    it of many lines (rollkit.tables.columns names the first one refused).
    `finite`: no NaN or Infinity in the block the line is in (as `load`
    looks for them)."""
    if _unsafe(Path(), 0, raw, finite) is not None:
        return True
    try:
        Trace.model_validate_json(raw)
    except pydantic.ValidationError:
        return record_of_line(raw) is None  # (a newer rollkit's fields are left out, as `load` does)
    return False


def _bad_line(exc: pydantic.ValidationError, raw: bytes) -> tuple[str, str | None]:
    """What is wrong with a line, in words, and the dotted field."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"invalid UTF-8: byte 0x{raw[bad.start]:02x} at column {bad.start + 1}", None
    message, field = _first_error(exc, raw)
    if field is None:
        return message, None
    return f"field {field}: {message}", field


class _Shared:
    """Repeated records of one file, kept once: thousands of rollouts of a
    few tasks by one agent hold the same task and agent records, the same
    system prompts, and pydantic's set of which fields were given, which is
    all of them in every record rollkit wrote. Shared records are equal by
    value; what a trace ran (its calls, its replies) is never merged."""

    def __init__(self) -> None:
        self.tasks: dict[tuple[Any, ...], Any] = {}
        self.dicts: dict[tuple[str, tuple[Any, ...]], dict[str, Any]] = {}
        self.texts: dict[str, str] = {}
        self.given: dict[type, set[str]] = {}

    def __call__(self, trace: Trace) -> None:
        # Written through __dict__: these replace a value by an equal one,
        # and pydantic's __setattr__ would cost as much as the rest together.
        values = trace.__dict__
        ref = values["task"]
        key = (ref.type, ref.key, ref.module)
        seen = self.tasks.get(key)
        if seen is None:
            self.tasks[key] = ref
        elif seen is not ref and seen.__dict__ == ref.__dict__:
            values["task"] = seen
        dicts = self.dicts
        for name in ("agent", "limits", "timeouts"):
            record = values[name]
            try:
                seen_dict = dicts.setdefault((name, tuple(record.items())), record)
            except TypeError:  # a value that does not hash (a nested dict): kept as it is
                continue
            values[name] = seen_dict
        texts = self.texts
        for message in values["messages"]:
            content = message.__dict__["content"]
            if content.__class__ is str and message.role in ("system", "user"):
                message.__dict__["content"] = texts.setdefault(content, content)
        self.share_given(trace)

    def share_given(self, trace: Trace) -> None:
        """Every record's set of given fields becomes one shared set of all
        its type's fields (a set per record is a large part of a big load's memory).
        A field a line leaves out (a
        later field that held nothing, see `rollkit.core.messages.is_absent`)
        then counts as given its default, which changes nothing rollkit
        reads; pydantic only ever adds names to the set. pydantic has no
        public way to set it: this writes `__pydantic_fields_set__`, which
        pydantic 2 keeps on every model (pyproject pins pydantic < 3 for it,
        and a test checks the set is still where this writes it)."""
        known = self.given
        write = object.__setattr__
        calls = trace.model_calls
        for record in (trace, *trace.messages, *calls, *[call.usage for call in calls],
                       *trace.phases.values(), *trace.segments):
            kind = record.__class__
            full = known.get(kind)
            if full is None:
                full = known[kind] = set(kind.model_fields)
            write(record, "__pydantic_fields_set__", full)


def _without_unknown(line: bytes, exc: pydantic.ValidationError) -> tuple[Trace, set[str], Any] | None:
    """A line whose only faults are fields this rollkit does not know (a
    newer rollkit wrote it): the trace without them, their names (list
    indices left out, e.g. "model_calls.cost"), and the schema version the
    line claims; the values left out are kept in the trace's info["unmapped"]
    by their path ("model_calls.2.cost"). None when anything else is wrong too."""
    faults = exc.errors(include_url=False, include_input=False)
    if not faults or any(f["type"] != "extra_forbidden" for f in faults):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    names = set()
    kept: dict[str, Any] = {}
    for fault in faults:
        loc = fault["loc"]
        holder = record
        walked = []
        for part in loc[:-1]:
            if isinstance(holder, list) and isinstance(part, int) and part < len(holder):
                holder = holder[part]
            elif isinstance(holder, dict) and part in holder:
                holder = holder[part]
            else:
                continue  # a discriminator's tag in the path (messages.3.assistant.x), not a key
            walked.append(str(part))
        if not isinstance(holder, dict):
            return None
        kept[".".join([*walked, str(loc[-1])])] = holder.pop(loc[-1], None)
        names.add(".".join(str(part) for part in loc if not isinstance(part, int)))
    claimed = record.get("schema_version")
    record["schema_version"] = SCHEMA_VERSION
    if isinstance(record.get("info"), dict):  # kept by their source path, as the importers keep keys they do not know
        record["info"]["unmapped"] = {**(record["info"].get("unmapped") or {}), **kept}
    try:
        return Trace.model_validate(record), names, claimed
    except pydantic.ValidationError:
        return None


def trace_of_line(line: bytes | str, *, where: str = "a trace line") -> Trace:
    """One line of a rollkit trace file as a Trace, with the same tolerance
    as `load`: fields of a newer rollkit are left out with a warning naming
    them (`where` says whose line, for it). Raises pydantic's
    ValidationError (a ValueError) for a line that is not a trace."""
    raw = line.encode() if isinstance(line, str) else line
    try:
        return Trace.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        lenient = _without_unknown(raw, exc)
        if lenient is None:
            raise
        trace, names, claimed = lenient
        warnings.warn(_unknown_message(where, names, {claimed}), stacklevel=2)
        return trace


_NON_FINITE = object()


def _non_finite(line: bytes) -> str | None:
    """The dotted path of the first NaN / Infinity value of a JSON line
    (None: none, the words were inside strings, or the line is no JSON)."""
    try:
        record = json.loads(line, parse_constant=lambda _: _NON_FINITE)
    except (ValueError, RecursionError):
        return None  # the validator names what is wrong with it
    stack: list[tuple[str, Any]] = [("", record)]
    while stack:
        where, value = stack.pop()
        if value is _NON_FINITE:
            return where or "(the record)"
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend((f"{where}.{key}" if where else str(key), item) for key, item in reversed(list(items)))
    return None


def _unsafe(path: Path, number: int, line: bytes | None, finite: bool = False) -> tuple[str, str | None] | None:
    """What makes a line unsafe to parse (too long, too many containers) or
    to use (NaN / Infinity: no time, count or reward means that, and a
    summary, an interval or a page would trip over it later), with the
    field; None when it is neither. `finite`: the caller saw no NaN or
    Infinity anywhere near the line."""
    if line is None:
        return safe_read.too_long(path, number).reason, None
    many = safe_read.too_costly(line)
    if many is not None:
        return f"{path}: line {number} {many}", None
    if not finite and (b"NaN" in line or b"Infinity" in line) and (field := _non_finite(line)) is not None:
        return f"{path}: line {number} is not a rollkit trace (field {field}: NaN or Infinity)", field
    return None


def _read_rollkit(path: Path, errors: str) -> list[Trace]:
    traces: list[Trace] = []
    share = _Shared()
    validate = Trace.model_validate_json
    unknown: set[str] = set()
    newer: set[Any] = set()

    def refuse(message: str, number: int, field: str | None = None) -> None:
        if errors == "skip":
            warnings.warn(message + "; skipped", stacklevel=4)
            return
        raise TraceFileError(message, path=path, line=number, field=field, hint=SKIP_HINT)

    # (store.load pauses the cyclic collector around every format's read)
    # A block at a time, so the file's bytes are never all in memory at once
    # (and a line is bounded: rollkit.core.safe_read).
    for block, batch in safe_read.line_batches(path):
        finite = b"NaN" not in block and b"Infinity" not in block
        for number, line in batch:
            if line is not None and not line.strip():
                continue
            fault = _unsafe(path, number, line, finite)
            if fault is not None:
                refuse(fault[0], number, fault[1])
                continue
            try:
                trace = validate(line)
            except pydantic.ValidationError as exc:
                lenient = _without_unknown(line, exc)
                if lenient is not None:
                    trace, names, claimed = lenient
                    unknown |= names
                    newer.add(claimed)
                    share(trace)
                    traces.append(trace)
                    continue
                if not line.endswith(b"\n"):
                    warnings.warn(f"{path}: line {number} is torn (no newline at the end, a write cut short); "
                                  "skipped", stacklevel=3)
                    continue
                detail, field = _bad_line(exc, line)
                refuse(f"{path}: line {number} is not a rollkit trace ({detail})", number, field)
                continue
            share(trace)
            traces.append(trace)
    if unknown:
        warnings.warn(_unknown_message(path, unknown, newer), stacklevel=3)
    return traces


def _unknown_message(path: Path | str, unknown: set[str], claimed: set[Any]) -> str:
    versions = sorted(str(v) for v in claimed if v is not None)
    by = f"trace schema {', '.join(versions)}" if versions else "no schema version"
    return (f"{path}: written by a newer rollkit ({by}; this one reads schema {SCHEMA_VERSION}): "
            f"fields it does not know were left out: {', '.join(sorted(unknown))}; "
            "upgrade rollkit to read them")


register_format(TraceFormat(
    ROLLKIT, "rollkit's own JSON lines (rk.save)", sniff_file=_sniff_rollkit, read=_read_rollkit,
    write=lambda traces, path: save(traces, path),
))
