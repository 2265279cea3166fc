"""The columnar store: Parquet tables beside a trace file, built from its JSON lines.

Every trace file rollkit reads (a run folder's traces.jsonl, any .jsonl, or
an imported file in another tool's format) gets six tables in a `.rollkit/`
cache folder next to it (or under the user cache folder when that folder is
not writable): `rollouts`, `turns`, `calls`, `phases`, `signals` and
`messages` (the text of every message: role, content, tool calls as
`name(arguments)`, tool results). They are plain Parquet; DuckDB, Spark or
Ray Data read them as they are. Their rows are built by the one row builder
of rollkit.tables.rows (its vocabulary: the frames' columns, `calls` also
keeping each call's end and running totals, for SQL); a token count the
provider did not report is null, as it is NA in the frames.

The JSON lines stay the source of truth. The tables are written in parts,
each covering a byte range of the source and recording in its Parquet
metadata the source's identity (the range's end and a hash of the bytes
just before it, and of the file's head); a part that no longer matches its
source, or that cannot be read (torn, partial), is dropped and the tables
are rebuilt from the JSON, never trusted. A file that grew (a resumed or
live run) gets a new part for its new lines only; a run that writes its
traces (rollkit.tables.livetables) hands each batch of lines it wrote to
`TableSet.add`, so its tables are complete when it ends. A build from the
file (a first open) makes each part's rollouts table only, what the
rollouts frame reads; a part's other five are built when a table is first
asked for (`files[table]`), from the part's byte range once it is checked
to be the bytes the part was cut from, and its marker lists what it has:
each table alone, from the fields it reads (nativebuild._ALONE_FIELDS). A part of 8 MB or more (or the
parts a later ask builds, when they hold 8 MB together)
is built by DuckDB's JSON parser (rollkit.tables.nativebuild); a smaller one,
and one DuckDB must not read, by the Python build (rollkit.tables.rows' row
builder, the reference: both make the same tables). Both read a line as
rk.load does, or refuse it with rk.load's error (rollkit.core.store.
record_of_line; the rule is in rollkit.tables.nativebuild's docstring): the
Python build parses with orjson, and a line orjson refuses (a number past
a double's range) or whose record the row builder cannot use (a reward
written "1.0") through rk.load's own reader; a byte-
order mark at the file's start is skipped. Rows come straight from
the parsed JSON, never through `Trace` objects (pydantic costs many times more);
an imported file is first written once as rollkit JSON lines in the cache
folder (its traces do go through `Trace`), then handled the same way.

`rollouts` also holds each trace's byte offset and length in its JSON file
(`_offset`, `_length`), so one trace is parsed back in milliseconds.

This module owns the cache: which parts of which file are valid, building
and writing them, merging small ones. It builds no row (rollkit.tables.rows
does) and no DataFrame (rollkit.tables.lazyrun reads them), runs nothing and
draws nothing.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import mmap
import os
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core.cache_folder import user_cache_folder
from ..core.safe_read import BOM
from ..core.gcpause import paused
from ..core.dependencies import duckdb, load, np, pa, pq, tqdm_auto
from .rows import TABLES, TABLE_COLUMNS, TABLE_TYPES, TableRows, large_strings, python_tables, trace_rows

__all__ = ["TABLES", "CACHE_DIR", "TableSet", "tables_for", "json_source", "finishing", "settle"]

CACHE_DIR = ".rollkit"
# The store's layout version: a part written by another version is rebuilt.
_VERSION = "7"  # 2: trace schema 2 (replies, unreported usage, outcome, the calls of rk.frames.calls); 3: large strings
# 4: the calls' logprob sum and mean and whether they hold token ids; cost
# 5: a reward or metric column is missing where the run was not scored (tables.rows.signal_values)
# 6: rollouts.cost_estimated (a price found by the model name alone, for another endpoint)
# 7: rollouts' source columns (where a task came from: rk.tasks_from's provenance)
# Lines and source bytes per part while building, whichever comes first:
# bounds the memory of a build (a part's rows are held as Python lists
# before they become Arrow columns, far bigger than the part's bytes).
_BATCH = 50_000
_PART_BYTES = 128 << 20
# More parts than this and the small ones side by side are merged on open
# (a run that grew often); a part is never merged past the bounds above.
_MAX_PARTS = 24
_SIGNATURE = 4096
# Parts built by DuckDB (rollkit.tables.nativebuild); False: all in Python (the reference).
_NATIVE = True
# A part of fewer source bytes is built in Python: DuckDB's fixed cost (a
# database, binding the queries, its import besides) is more than what
# Python spends on a few MB (the two cross near this size for single-turn
# lines; twenty-turn lines are cheaper in Python; benchmarks/ measure it).
_NATIVE_MIN_BYTES = 8 << 20


def json_loads() -> Any:
    try:  # about twice as fast as json on trace lines
        import orjson

        return orjson.loads
    except ImportError:
        return json.loads


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
    if not source.parent.is_dir():  # removed (a temporary folder): made again by nobody
        raise FileNotFoundError(f"{source.parent} is gone: its tables are not written")
    beside = source.parent / CACHE_DIR / source.name
    try:
        beside.mkdir(parents=True, exist_ok=True)
        probe = beside / ".probe"
        probe.write_bytes(b"")
        probe.unlink()
        return beside
    except OSError:
        root = user_cache_folder() / "columns"
        key = _digest(str(source.resolve()).encode())
        folder = root / f"{source.name}-{key}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder


def _is_rollkit_jsonl(path: Path) -> bool:
    from ..core.store import sniff_format, ROLLKIT

    return sniff_format(path).name == ROLLKIT


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


# Threads still writing a source's last parts after its writer returned
# (rollkit.tables.livetables: a run's end does not wait for them), by the
# source's resolved path. Opening the source's tables in this process waits
# for them first: it then finds the parts written, and two builders never
# write one source's parts at once.
_finishing: dict[Path, list[threading.Thread]] = {}
_finishing_lock = threading.Lock()


def finishing(source: Path, thread: threading.Thread) -> None:
    """Say that `thread` is writing the last parts of `source`'s tables:
    `settle` (and every TableSet of `source` opened in this process) waits for it."""
    with _finishing_lock:
        _finishing.setdefault(source.resolve(), []).append(thread)


def settle(source: Path | None = None) -> None:
    """Wait until the threads writing `source`'s last parts (every
    source's, for None) are done. A thread never waits for itself."""
    with _finishing_lock:
        if source is None:
            threads = [t for ts in _finishing.values() for t in ts]
        else:
            threads = list(_finishing.get(source.resolve(), ()))
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join()
    with _finishing_lock:
        for key in list(_finishing):
            _finishing[key] = [t for t in _finishing[key] if t.is_alive()]
            if not _finishing[key]:
                del _finishing[key]


class TableSet:
    """The tables of one rollkit JSON lines file: the valid parts (Parquet
    files per byte range of the source: the rollouts' always, the other five
    once built), made current on creation. `files[table]` lists the Parquet
    files of a table, in source order, building it for the parts that lack
    it first."""

    def __init__(self, source: Path, *, cache: Path | None = None, progress: bool | None = None) -> None:
        if _finishing:
            settle(source)
        self.source = source
        self.progress = progress
        self.folder = cache or _cache_folder(source)
        self.built_lines = 0
        self.files: Mapping[str, list[Path]] = {}
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
        try:
            self._complete_parts(table)
        except _PartGone:  # another process merged the parts: complete them as they are now
            self._refresh()
            self._complete_parts(table)

    def _complete_parts(self, table: str) -> None:
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
        size = sum(p["end"] - p["start"] for p in lacking)
        # Natively at any size when the parts together are worth it: they share the build's
        # database, whose fixed cost is then paid once (a live run's parts are small).
        build = functools.partial(self._part, native=size >= _NATIVE_MIN_BYTES)
        # A table without text that every part lacks (after a first open): DuckDB parses the file whole (_whole_source).
        whole = table in _WHOLE_ASKS and len(lacking) == len(self.parts)
        with paused(), _progress(self.source, size, self.progress) as bar, open(self.source, "rb") as f:
            def jobs() -> Generator[tuple[Any, int], None, None]:
                ordinals = itertools.accumulate((p["lines"] for p in self.parts), initial=0)
                ordinal_of = {p["name"]: at for p, at in zip(self.parts, ordinals)}
                for part, data in zip(lacking, _ranges(f, [(p["start"], p["end"]) for p in lacking])):
                    starts, ends, lengths = _lines(data, _line_ends(data), part["start"])
                    yield (build, data, starts, ends, lengths, part["start"], ordinal_of[part["name"]], (table,),
                           part), len(data)

            # Two parts at once, as a first open builds them: one's query, Parquet and next lines run beside
            # the other's parse (one table of two parts holds less than all six of one did, when one at a time
            # was chosen for them).
            for part, made in zip(lacking, _in_order(jobs(), bar, source=f if whole else None, tables=(table,))):
                part.update(made)

    def _settle(self, parts: list[dict[str, Any]]) -> None:
        if len(parts) > _MAX_PARTS:
            parts = self._compact(parts)
        self.parts = parts
        self.built_lines = sum(p["lines"] for p in parts)
        self.files = _Files(self)

    def add(self, data: bytes, start: int, engine: Any = None) -> None:
        """Bring the tables up to `start + len(data)`, where `data` is
        complete lines just written to the source at `start` (a run writing
        its traces, rollkit.tables.livetables): the part is built from these
        bytes, as a build from the file would build it, without reading
        them back. Parts another process built meanwhile (a monitor opening
        the live run) are kept and only what they miss is added; anything
        else (a gap before `start`, parts that no longer match) is built
        from the file, as opening it would. `engine` (a
        nativebuild.Engine the caller keeps from one add to the next) builds
        the part natively at any size while pandas is not imported: the
        Python build's Arrow conversion imports it (left to the lines DuckDB
        cannot take); once it is, a small part is built in Python, which
        costs less than DuckDB's fixed cost."""
        end = start + len(data)
        parts = self._read_parts()
        covered = parts[-1]["end"] if parts else 0
        if parts is None or not start <= covered <= end or not self._valid(parts, end):  # not ours to patch
            self._refresh()
            return
        if covered < end:
            piece = data[covered - start:]
            starts, ends, lengths = _lines(piece, _line_ends(piece), covered)
            parts.append(self._part(piece, starts, ends, lengths, covered, sum(p["lines"] for p in parts),
                                    self._FIRST, engine=engine,
                                    native=engine is not None and "pandas" not in sys.modules))
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
        def jobs(f: Any) -> Generator[tuple[Any, int], None, None]:
            nonlocal ordinal
            for part_start, data, ends in _blocks(f, start):
                starts, ends, lengths = _lines(data, ends, part_start)
                yield (self._part, data, starts, ends, lengths, part_start, ordinal, self._FIRST), len(data)
                ordinal += len(starts)

        with open(self.source, "rb") as f:
            return _in_order(jobs(f), bar, source=f if start == ordinal == 0 else None, tables=self._FIRST)

    def _part(self, data: bytes, starts: Any, ends: Any, lengths: Any, part_start: int, ordinal: int,
              tables: tuple[str, ...] = TABLES, built: dict[str, Any] | None = None,
              engine: Any = None, native: bool = False) -> dict[str, Any]:
        """The part of `data` (the source's lines from `part_start`) built
        and written: `tables` of it, beside those of `built` (its marker);
        `engine`: the build's DuckDB (nativebuild.Engine; None: its own);
        `native`: natively at any size."""
        part = None
        if _NATIVE and len(starts) and (native or len(data) >= _NATIVE_MIN_BYTES):
            part = self._native(data, starts, ends, lengths, part_start, ordinal, tables, built, engine)
        if part is None:
            made = python_tables(self._python_rows(data, starts, ends, part_start, ordinal, tables), tables)
            part = self._write_part(made.items(), part_start, part_start + len(data), len(starts),
                                    "python", built)
        return part

    def _native(self, data: bytes, starts: Any, ends: Any, lengths: Any, part_start: int, ordinal: int,
                tables: tuple[str, ...], built: dict[str, Any] | None, engine: Any) -> dict[str, Any] | None:
        """The part built by DuckDB (rollkit.tables.nativebuild) and written,
        each table as soon as it is made; None when the Python build must
        make it (it names a bad line; its files replace any written here)."""
        from .nativebuild import NativeUnfit, native_tables

        try:
            offsets = np.empty(len(starts) + 1, dtype=np.int64)
            if len(starts) and (starts[1:] == ends[:-1]).all() and starts[0] == 0:  # no blank lines between
                offsets[0], offsets[1:] = 0, ends
                lines = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(data))
            else:
                lines = pa.array([bytes(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist())], pa.large_binary()) \
                    .cast(pa.large_string())
            # (UTF-8 unchecked: native_tables' reader refuses a line that is not; the Python build names it)
            made = native_tables(lines, ordinal, starts + part_start, lengths, TABLE_COLUMNS, TABLE_TYPES, tables, engine)
            return self._write_part(made, part_start, part_start + len(data), len(starts), "native", built)
        except (NativeUnfit, duckdb.Error, pa.ArrowException):
            return None

    def _python_rows(self, data: bytes, starts: Any, ends: Any, part_start: int, ordinal: int,
                     tables: tuple[str, ...]) -> TableRows:
        rows = TableRows(tables)
        loads = json_loads()
        view = memoryview(data)
        marks = _marks(rows)
        for s, e in zip(starts.tolist(), ends.tolist()):
            try:
                trace_rows(rows, loads(view[s:e]), ordinal, part_start + s, e - s)
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
                _undo(rows, marks)
                trace_rows(rows, _as_loaded(self.source, part_start + s, bytes(view[s:e])), ordinal,
                            part_start + s, e - s)
            marks = _marks(rows)
            ordinal += 1
        return rows

    def _write_part(self, tables: Iterable[tuple[str, Any]], start: int, end: int, lines: int,
                    build: str, built: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write a part's tables, then its marker, listing them beside those
        `built` already (the marker of the part they complete)."""
        name = _part_name(start, end)
        written = list(built["tables"]) if built else []
        if not self.source.exists():  # removed (a temporary run folder, after its run): its cache is not made again
            raise FileNotFoundError(f"{self.source} is gone: its tables are not written")
        for table, arrow in tables:
            arrow = large_strings(arrow).replace_schema_metadata({"rollkit.part": name, "rollkit.v": _VERSION})
            folder = self.folder / table
            folder.mkdir(parents=True, exist_ok=True)
            _atomic(lambda tmp: pq.write_table(arrow, tmp, compression="lz4"), folder / f"{name}.parquet")
            written.append(table)
        if built:
            build = _builds(built["build"], build)
            if not (self.folder / f"{name}.json").exists():
                raise _PartGone(name)  # merged away meanwhile (a live run's writer): its marker must not come back
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
            merged = concat_parts([pq.read_table(self.folder / table / f"{p['name']}.parquet") for p in parts])
            merged = merged.replace_schema_metadata({"rollkit.part": name, "rollkit.v": _VERSION})
            _atomic(lambda tmp: pq.write_table(merged, tmp, compression="lz4"), self.folder / table / f"{name}.parquet")
        meta = {"start": parts[0]["start"], "end": parts[-1]["end"], "lines": sum(p["lines"] for p in parts),
                "head": _head(self.source, parts[-1]["end"]), "before": parts[-1]["before"],
                "build": _builds(*(p.get("build", "python") for p in parts)),
                "tables": common}
        _atomic(lambda tmp: Path(tmp).write_text(json.dumps(meta)), self.folder / f"{name}.json")
        for p in parts:
            if p["name"] != name:
                (self.folder / f"{p['name']}.json").unlink()
                for table in TABLES:
                    (self.folder / table / f"{p['name']}.parquet").unlink(missing_ok=True)
        return [{**meta, "name": name}]


def _builds(*labels: str) -> str:
    """The builds that made a part's tables ("native", "python", or both: "native+python")."""
    return "+".join(sorted({build for label in labels for build in label.split("+")}))


class _PartGone(Exception):
    """A part being completed was merged into another meanwhile."""


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


_WHITESPACE = b" \t\n\r\x0b\x0c"


def _blocks(f: Any, start: int) -> Any:
    """(part start, bytes, line ends within them) for each part of the file
    from `start`: a part ends at the line that makes it _BATCH lines (not
    counting blank ones) or _PART_BYTES long; the complete lines only. The
    bytes are a view of the file mapped into memory (reading a big run
    into buffers cost several times the CPU of mapping it and finding its
    lines); a file that cannot be mapped is read. Only its complete
    lines are mapped: a torn last line may be cut off (a resumed run
    repairing it) while this reads, and touching a mapped page past the end
    of a file that shrank kills the process (SIGBUS). rollkit writes trace
    files by appending, or a new file moved over the old one (the mapping
    keeps the old one); a file cut short by something else while a first
    open reads it is the one case left."""
    size = _complete_end(f, start, os.fstat(f.fileno()).st_size)
    if size <= start:
        return
    try:
        source, base = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ), 0
    except (OSError, ValueError):
        f.seek(start)
        source, base = f.read(size - start), start
    mapped = not isinstance(source, bytes)
    try:
        at = start
        while at < size:
            bound = min(size, at + _PART_BYTES)
            ends = _line_ends(source, _BATCH, at - base, bound - base)
            cut = _cut(memoryview(source)[at - base:bound - base], ends)
            if cut is None and bound < size:  # the line crossing the bound goes on past it
                newline = source.find(b"\n", bound - base)
                if newline >= 0:
                    ends = np.append(ends, newline + 1 - (at - base))
                    cut = len(ends) - 1
            if cut is None:  # the end of the file: its complete lines, the rest waits
                if len(ends):
                    yield at, memoryview(source)[at - base:at - base + int(ends[-1])], ends
                return
            end = int(ends[cut])
            yield at, memoryview(source)[at - base:at - base + end], ends[:cut + 1]
            if mapped:
                _release(source, at)
            at += end
    finally:
        if mapped:
            try:
                source.close()
            except BufferError:  # a part still being built holds a view: unmapped when it lets go
                pass


def _ranges(f: Any, ranges: list[tuple[int, int]]) -> Iterator[Any]:
    """The bytes of each (start, end) range of the file, in order: views of
    it mapped into memory, as _blocks maps it (reading them into buffers,
    then into a part's memory file, cost twice the CPU), each range's pages
    let go when the next is asked for; read where it cannot be mapped."""
    end = max((stop for _, stop in ranges), default=0)
    try:
        source = mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ) if end else None
    except (OSError, ValueError):  # (past the file's end: it shrank; the build reads what is there)
        source = None
    try:
        for start, stop in ranges:
            if source is None:
                f.seek(start)
                yield f.read(stop - start)
            else:
                yield memoryview(source)[start:stop]
                _release(source, stop)
    finally:
        if source is not None:
            try:
                source.close()
            except BufferError:  # a part still being built holds a view: unmapped when it lets go
                pass


def _complete_end(f: Any, start: int, size: int) -> int:
    """Where the file's complete lines from `start` end: past its last newline (`start`: none)."""
    end = size
    while end > start:
        step = min(1 << 20, end - start)
        f.seek(end - step)
        newline = f.read(step).rfind(b"\n")
        if newline >= 0:
            return end - step + newline + 1
        end -= step
    return start


def _release(source: Any, upto: int) -> None:
    """Let the mapped pages before `upto` out of the process's resident
    memory: they stay in the page cache, and one still being read comes
    back from it unchanged. When the next part is asked for, the parts
    before the last one given out are built (_in_order waits for one to end
    before it reads on). Without this a big run's mapped pages counted as
    resident memory, several times the build's own."""
    if hasattr(source, "madvise"):
        upto = upto // mmap.PAGESIZE * mmap.PAGESIZE
        if upto > 0:
            source.madvise(mmap.MADV_DONTNEED, 0, upto)


# The bytes _line_ends compares at once: enough for NumPy to work
# without the GIL for a while, few enough that a part of short lines does
# not compare far past its end.
_SCAN_BYTES = 16 << 20


def _line_ends(data: Any, lines: int | None = None, start: int = 0, end: int | None = None) -> Any:
    """Where each line of data[start:end] ends (past its newline, counted
    from `start`), up to the one that makes `lines` non-blank lines. Found
    by NumPy, _SCAN_BYTES at a time, which lets go of the GIL: the first
    part's line ends are found while DuckDB is imported beside them, the
    next part's while the first is parsed (Python's find(), line by line,
    held it, and a big run's first open took longer)."""
    end = len(data) if end is None else end
    buffer = np.frombuffer(data, dtype=np.uint8)
    found = []
    counted = 0
    line = start  # where the next line starts
    for at in range(start, end, _SCAN_BYTES):
        ends = np.flatnonzero(buffer[at:min(end, at + _SCAN_BYTES)] == 10) + (at + 1)
        if not len(ends):
            continue
        if lines is not None:
            made = counted + np.cumsum(~_blank(buffer, np.concatenate(([line], ends[:-1])), ends))
            over = np.flatnonzero(made >= lines)
            if len(over):
                found.append(ends[:over[0] + 1])
                break
            counted = int(made[-1])
        found.append(ends)
        line = int(ends[-1])
    return np.concatenate(found).astype(np.int64) - start if found else np.zeros(0, dtype=np.int64)


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


def _lines(data: bytes, ends: Any, at: int) -> tuple[Any, Any, Any]:
    """The start, end and length of each non-blank line of a part (its
    bytes `data`, from offset `at` of the file): the file's first line
    starts after a UTF-8 byte-order mark, as rk.load reads it."""
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
    if at == 0 and len(starts) and bytes(data[:len(BOM)]) == BOM:
        starts[0] = len(BOM)
    ends = ends.astype(np.int64)
    keep = ~_blank(data, starts, ends)
    starts, ends = starts[keep], ends[keep]
    return starts, ends, ends - starts


# A first open's parts built at once, by DuckDB on the cores between them: a part's
# single-threaded stretches (DuckDB's queries over a part's rows, writing
# its Parquet, reading the next part) overlap with another's parsing, where
# one part at a time on every core left a core idle in them. Two bound the
# memory to two parts.
_IN_FLIGHT = 2


def _whole_source(f: Any, tables: tuple[str, ...] = ()) -> int | None:
    """A copy of the open file `f`'s descriptor, which DuckDB reads the file
    by (Linux: through /proc, the same file however the path is moved
    over; the build's Engine closes it), for a build of `tables` to parse
    it whole (nativebuild.Engine.whole_rows): a first open's (the
    rollouts), or the first ask of a table without text (_WHOLE_ASKS);
    None where that does not pay or may fail: fewer bytes than a native
    part; for a first open, more than the parts it holds at once (its
    later parts would read their own bytes all the same) or more lines by
    far (_WHOLE_LINES) than those parts' (the parse, held to the end of the
    open, would hold more than the build does) or lines so short its parts
    are built in Python (guessed from the first lines' length, as those: no
    newline in them, no guess); for a first ask (its parts built natively
    whatever their size), more bytes than _WHOLE_ASK_BYTES; a last line
    torn (a run still writing: DuckDB refuses it)."""
    size = os.fstat(f.fileno()).st_size
    ask = len(tables) == 1 and tables[0] in _WHOLE_ASKS
    if not _NATIVE or not _NATIVE_MIN_BYTES <= size <= (_WHOLE_ASK_BYTES if ask else _IN_FLIGHT * _PART_BYTES) \
            or not os.path.isdir("/proc/self/fd") or _complete_end(f, 0, size) != size:
        return None
    head = os.pread(f.fileno(), min(size, 1 << 20), 0)
    lines = head.count(b"\n")
    if not lines or not ask and (size * lines > _WHOLE_LINES * _IN_FLIGHT * _BATCH * len(head)
                                 or len(head) * _BATCH < _NATIVE_MIN_BYTES * lines):  # (parts too small: Python's)
        return None
    return os.dup(f.fileno())


# How many more lines than the parts a first open builds at once its whole
# parse may hold, guessed from the file's first lines' length: a margin for
# lines that vary (a run of 100,000 lines fills two parts exactly).
_WHOLE_LINES = 2
# The tables whose first ask after a first open has DuckDB parse the file
# whole, as a first open does, not each part's bytes copied into a file in
# memory: their fields hold no text (nativebuild._ALONE_FIELDS), so the
# parse, held until the last part is built, holds a fraction of the file's
# bytes (the turns of twenty-turn lines the most: about a fifth), which
# _WHOLE_ASK_BYTES bounds (benchmarks/bigrun.py --first-asks).
_WHOLE_ASKS = ("turns", "phases", "signals")
_WHOLE_ASK_BYTES = 3 << 30


def _in_order(jobs: Generator[tuple[tuple[Any, ...], int], None, None], bar: Any,
              in_flight: int | None = None, source: Any = None, tables: tuple[str, ...] = ()) -> list[Any]:
    """What each job (TableSet._part and its arguments, and the source bytes
    it covers) returns, in the jobs' order; up to `in_flight` (_IN_FLIGHT)
    at once, the next one read only when one is done; one at a time in the
    calling thread. The jobs share one DuckDB database (`engine=`), a
    thread a core: side by side, each job's thread works on its own query
    and DuckDB's workers make up the rest of the cores (its `threads`
    counts one asking thread). When a job fails, the source file and its
    map are let go at once, not when the traceback is (a notebook keeps
    the last one). `source`: the open file the jobs' lines are, from its
    start, for DuckDB to parse at once where that pays (_whole_source),
    beside the search for the first part's lines, with the fields of the
    `tables` the jobs build."""
    in_flight = in_flight or _IN_FLIGHT
    engine = importing = whole = None
    try:
        from .nativebuild import Engine, WholeSource

        whole = None if source is None else _whole_source(source, tables)
        engine = Engine(threads=max(1, _cores() - in_flight + 1) if in_flight > 1 else None,
                        source=None if whole is None else WholeSource(whole, _cores(), tables))
        importing = _import_duckdb_beside(then=None if whole is None else engine.read_ahead)
        return _side_by_side(jobs, bar, in_flight, engine) if in_flight > 1 else _one_by_one(jobs, bar, engine)
    except BaseException as error:
        # The failed part's frames, which the traceback keeps, hold views of the mapped file.
        traceback.clear_frames(error.__traceback__)
        raise
    finally:
        jobs.close()  # _blocks unmaps the file (and closes the descriptor mmap keeps)
        if engine is not None:
            engine.close()  # (and the whole source's descriptor, its own)
        elif whole is not None:
            os.close(whole)
        if importing is not None:
            importing.join()


def _import_duckdb_beside(then: Callable[[], None] | None = None) -> threading.Thread | None:
    """DuckDB imported on a thread of its own (most of its import holds
    the GIL) while this one finds the first part's lines (NumPy, without
    it), and `then` called on that thread (Engine.read_ahead); None when
    there is nothing to do. NumPy and pyarrow are imported
    here first: DuckDB's import reads them, and one module imported by two
    threads at once can leave one of them a half-made module."""
    if "duckdb" in sys.modules and then is None:
        return None
    load(np, pa)

    def load_duckdb() -> None:
        try:
            load(duckdb)
        except Exception:  # not installed: the build says so when it first needs it
            return
        if then is not None:
            then()

    thread = threading.Thread(target=load_duckdb, name="rollkit-import-duckdb", daemon=True)
    thread.start()
    return thread


def _one_by_one(jobs: Iterator[tuple[tuple[Any, ...], int]], bar: Any, engine: Any) -> list[Any]:
    done = []
    for (call, *arguments), size in jobs:
        done.append(call(*arguments, engine=engine))
        bar.update(size)
    return done


def _side_by_side(jobs: Iterator[tuple[tuple[Any, ...], int]], bar: Any, in_flight: int, engine: Any) -> list[Any]:
    """_in_order's jobs on `in_flight` threads. A job's error is raised once
    the ones beside it end (nothing is left running); Ctrl-C returns at
    once, and a part still being built ends on its own (its files are whole
    or ignored: a part's marker is written last, and a part after a gap is
    never used)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(in_flight, thread_name_prefix="rollkit-build")
    done: list[Any] = []
    running: list[tuple[Any, int]] = []
    try:
        for (call, *arguments), size in jobs:
            running.append((pool.submit(call, *arguments, engine=engine), size))
            if len(running) >= in_flight:
                done.append(_finished(running.pop(0), bar))
        done.extend(_finished(job, bar) for job in running)
    except BaseException as error:
        pool.shutdown(wait=isinstance(error, Exception), cancel_futures=True)
        raise
    pool.shutdown()
    return done


def _cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the machine's)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _finished(job: tuple[Any, int], bar: Any) -> Any:
    future, size = job
    made = future.result()
    bar.update(size)
    return made


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



def _marks(rows: TableRows) -> tuple[int, ...]:
    return tuple(len(rows.rows[table]) for table in TABLES)


def _undo(rows: TableRows, marks: tuple[int, ...]) -> None:
    """Drop the rows a line that failed part way added (its signals are keyed by its rollouts row)."""
    for table, mark in zip(TABLES, marks):
        del rows.rows[table][mark:]
    for values in rows.signals.values():
        values.pop(marks[TABLES.index("rollouts")], None)


def _as_loaded(path: Path, offset: int, raw: bytes) -> dict[str, Any]:
    """The line at `offset`, which the fast parse refused or the row builder
    could not use, read as rk.load reads it (rollkit.core.store.record_of_line):
    its record, or rk.load's error naming the line (its number counted then)."""
    from ..core.store import line_error, record_of_line

    record = record_of_line(raw)
    if record is None:
        raise line_error(path, *_first_refused(path, _line_number(path, offset), raw))
    return record


def _line_number(path: Path, offset: int) -> int:
    """The number of the line at byte `offset` of `path` (the newlines before it counted a block at a time)."""
    newlines = 0
    with open(path, "rb") as f:
        while offset > 0:
            block = f.read(min(offset, 16 << 20))
            if not block:
                break
            newlines += block.count(b"\n")
            offset -= len(block)
    return newlines + 1


def _first_refused(path: Path, number: int, raw: bytes) -> tuple[int, bytes | None]:
    """The number and bytes of the first line rk.load refuses among those
    up to line `number` (refused, its bytes `raw`), read as it reads them
    (safe_read.line_batches). A build reads only the fields its tables
    need (a first open, the rollouts'), so a line before, bad in another
    field only, passed it; rk.load names that one, and so does the build.
    Only on the way to an error: the lines before are validated again
    (store.load_refuses: no record made)."""
    from ..core.safe_read import line_batches
    from ..core.store import load_refuses

    for block, batch in line_batches(path):
        finite = b"NaN" not in block and b"Infinity" not in block
        for at, line in batch:
            if at >= number:
                return number, raw
            if line is None or (line.strip() and load_refuses(line, finite)):
                return at, line
    return number, raw


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


def concat_parts(tables: list[Any]) -> Any:
    tables = [t.replace_schema_metadata(None) for t in tables]
    return pa.concat_tables(tables, promote_options="permissive")


def tables_for(path: str | os.PathLike[str], *, progress: bool | None = None) -> TableSet:
    """The current tables of a trace file or run folder (built or brought up to date now)."""
    from ..core.store import resolve_path

    source = resolve_path(path)
    if not source.exists():
        raise FileNotFoundError(f"no trace file at {source}")
    return TableSet(json_source(source), progress=progress)
