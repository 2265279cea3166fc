"""A lazy run: one or many trace files opened through their columnar tables.

`open_run(path_or_paths)` returns a `LazyRun`. Its frames (`rollouts()`,
`turns()`, `calls()`, `phases()`, `signals()`, `messages()`) are read from
the Parquet tables (rollkit.tables.columns) and shaped by rollkit.tables.rows,
equal row for row to what rk.frames builds from the same traces (one row
builder makes both), without building a `Trace`. One trace is parsed only when asked for (`run[i]`, `run.trace(id)`),
from its byte offset in the JSON lines. `run.sql(query)` runs DuckDB over
the tables (views named rollouts, turns, calls, phases, signals, messages);
`run.search(phrase | re=...)` finds the rollouts whose messages match.

This module reads; it writes only the cache (through columns) and draws nothing.
"""

from __future__ import annotations

import bisect
import os
import re as _re
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from ..core.trace import Trace
from . import filters, rows
from .columns import TABLES, TableSet, footer, tables_for
from ..core.dependencies import duckdb, load, pa, pc, pd, pq

__all__ = ["LazyRun", "Hits", "open_run", "highlight"]


@contextmanager
def _system_memory_pool() -> Iterator[None]:
    """Arrow allocates from the C library's allocator for the block, and
    the pages it freed go back to the system at its end. The default pool
    (mimalloc or jemalloc) keeps what a frame's read freed, where numpy
    cannot reuse it, and glibc keeps freed pages mapped: the frames of a
    big run, one after the other, peak far lower with this
    (benchmarks/bigrun.py prints both). The pool the caller had is put back after;
    a concurrent read on another thread may allocate from either, which
    changes where its memory comes from, nothing else."""
    before = pa.default_memory_pool()
    system = pa.system_memory_pool()
    if before.backend_name != system.backend_name:
        pa.set_memory_pool(system)
    try:
        yield
    finally:
        if before.backend_name != system.backend_name:
            pa.set_memory_pool(before)
        _give_back()


_GROUP_BYTES = 64 << 20


def _column_groups(opened: list[Any], held: list[set[str]], order: Sequence[str]) -> list[list[str]]:
    """The columns of `order` some file holds, in groups read together:
    as many as fit in about 64 MB of Arrow memory (a read per file per
    group, and the group's buffers are all that is held beside the frame)."""
    rows = sum(f.metadata.num_rows for f in opened)
    groups: list[list[str]] = []
    size = 0
    for name in order:
        holder = next((f for f, names in zip(opened, held) if name in names), None)
        if holder is None:
            continue
        kind = holder.schema_arrow.field(name).type
        wide = pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
            or pa.types.is_large_binary(kind)
        cost = rows * (24 if wide else 8)
        if not groups or size + cost > _GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += cost
    return groups


def _give_back() -> None:
    """Return the C heap's free pages to the system (glibc's malloc_trim;
    elsewhere nothing: other C libraries have no such call)."""
    global _trim
    if _trim is None:
        import ctypes

        try:
            _trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's, when it is glibc
        except (OSError, AttributeError):
            _trim = False
    if _trim:
        _trim(0)


_trim: Any = None


def open_run(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
             progress: bool | None = None) -> LazyRun:
    """Open a run folder, a trace file (any format rk.load reads), or a list
    of them (their rows one after the other, in the order given).

    A file without its tables (or with new lines) gets them built now, a
    tqdm.auto bar showing the bytes read when that is more than a few MB
    (progress=True: always; False: never)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if isinstance(paths, (bytes, dict)) or not isinstance(paths, Sequence) or not paths:
        raise TypeError(f"open_run takes a trace file or run folder path, or a list of them; got {paths!r}")
    return LazyRun([tables_for(p, progress=progress) for p in paths])


class LazyRun:
    """Traces of one or more files, read through their columnar tables."""

    def __init__(self, sets: list[TableSet]) -> None:
        self._sets = sets
        self._cache: dict[str, Any] = {}
        self._duck: Any = None
        self._views: set[str] = set()  # the tables the connection has a view of
        self._locked: tuple[Any, Any] | None = None  # (what it covers, the filters' locked connection)
        self._index: Any = None
        self._parts: tuple[list[int], list[tuple[Path, Path]], dict[Any, Any]] | None = None
        self._coverage = self._covered()

    def _covered(self) -> tuple[int, ...]:
        return tuple(s.built_lines for s in self._sets)

    def _current(self) -> None:
        """Forget what was read of the tables when a file's tables grew since
        (building a table first asked for brings a file still being written
        up to date), so the index, the frames and SQL agree with `len`."""
        if self._covered() == self._coverage:
            return
        self._coverage = self._covered()
        self._cache.clear()
        self._index = self._parts = None
        self._duck, self._views = None, set()  # a new connection (one held elsewhere keeps its old views)

    # ---- size and traces --------------------------------------------------------
    def __len__(self) -> int:
        return sum(s.built_lines for s in self._sets)

    def __repr__(self) -> str:
        names = ", ".join(str(s.source) for s in self._sets)
        return f"LazyRun({len(self)} traces from {names})"

    @property
    def paths(self) -> list[Path]:
        return [s.source for s in self._sets]

    def _offsets(self) -> Any:
        """id, file, byte offset and length of every trace, in row order."""
        self._current()
        if self._index is None:
            parts = []
            for k, s in enumerate(self._sets):
                part = self._arrow_of(s, "rollouts", ["id", "_offset", "_length"])
                parts.append(part.append_column("_set", pa.array([k] * part.num_rows, pa.int32())))
            self._index = pa.concat_tables(parts) if parts else None
        return self._index

    def _part_files(self) -> tuple[list[int], list[tuple[Path, Path]], dict[Any, Any]]:
        """The first row of each rollouts part file that has rows, its JSON
        source and file, and what has been read of them (offsets and lengths
        by path, ids by (path, "id"))."""
        self._current()
        if self._parts is None:
            starts, files, at = [], [], 0
            for s in self._sets:
                for file in s.files["rollouts"]:
                    rows = footer(file).num_rows
                    if rows:
                        starts.append(at)
                        files.append((s.source, file))
                        at += rows
            self._parts = (starts, files, {})
        return self._parts

    def _place(self, row: int) -> tuple[Path, int, int]:
        """The JSON file, byte offset and length of row `row`: from the
        whole index when something loaded it, else from the one part file
        holding the row (found by the footers' row counts), so the first
        pick reads 50,000 offsets, not a million."""
        self._current()
        if self._index is not None:
            index = self._index
            k = index.column("_set")[row].as_py()
            return (self._sets[k].source, index.column("_offset")[row].as_py(),
                    index.column("_length")[row].as_py())
        starts, files, spans = self._part_files()
        j = bisect.bisect_right(starts, row) - 1
        source, file = files[j]
        if file not in spans:
            table = pq.read_table(file, columns=["_offset", "_length"])
            spans[file] = (table.column("_offset").to_numpy(), table.column("_length").to_numpy())
        offsets, lengths = spans[file]
        return source, int(offsets[row - starts[j]]), int(lengths[row - starts[j]])

    def _read_at(self, row: int) -> Trace:
        source, offset, length = self._place(row)
        with open(source, "rb") as f:
            f.seek(offset)
            return Trace.model_validate_json(f.read(length))

    def __getitem__(self, i: int) -> Trace:
        n = len(self)
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"a run is indexed by a whole number (its row in run.rollouts()), got {type(i).__name__}")
        if not -n <= i < n:
            raise IndexError(f"trace {i} is out of range: the run holds {n} traces")
        return self._read_at(i % n)

    def __iter__(self) -> Iterator[Trace]:
        for i in range(len(self)):
            yield self._read_at(i)

    def trace(self, trace_id: str) -> Trace:
        """The trace with this id (the first, when ids repeat across files)."""
        if self._index is not None:
            found = pc.index(self._index.column("id"), trace_id).as_py()
        else:  # part by part, stopping at the first holding it
            found = -1
            starts, files, read = self._part_files()
            for start, (_, file) in zip(starts, files):
                key = (file, "id")
                if key not in read:
                    read[key] = pq.read_table(file, columns=["id"]).column("id")
                at = pc.index(read[key], trace_id).as_py()
                if at >= 0:
                    found = start + at
                    break
        if found < 0:
            raise KeyError(f"no trace with id {trace_id!r} in this run ({len(self)} traces)")
        return self._read_at(found)

    def traces(self, ids: Sequence[str] | None = None) -> list[Trace]:
        """Traces as objects: all of them, or those with the ids given (in that order)."""
        if ids is None:
            return list(self)
        return [self.trace(i) for i in ids]

    # ---- tables -----------------------------------------------------------------
    def _arrow_of(self, s: TableSet, table: str, columns: list[str] | None = None) -> Any:
        from .columns import concat_parts

        parts = []
        for file in s.files[table]:
            schema = footer(file).schema.to_arrow_schema()
            wanted = None if columns is None else [c for c in columns if c in schema.names]
            parts.append(pq.read_table(file, columns=wanted))
        if not parts:
            return pa.table({})
        return concat_parts(parts)

    def arrow(self, table: str) -> Any:
        """One table of every file as a pyarrow Table (rows in source order)."""
        if table not in TABLES:
            raise ValueError(f"no table {table!r}; the tables are {', '.join(TABLES)}")
        self._current()
        if table not in self._cache:
            from .columns import concat_parts

            self._cache[table] = concat_parts([self._arrow_of(s, table) for s in self._sets])
        return self._cache[table]

    def _rows(self, table: str) -> int:
        """A table's row count (from the Parquet footers: nothing read)."""
        return sum(footer(file).num_rows for s in self._sets for file in s.files[table])

    def _frame(self, table: str, order: Sequence[str]) -> Any:
        """The columns `order` of a table as a DataFrame (a column no file has:
        all None). Read for this frame only, never kept, and a column at a
        time: each column's Arrow buffers are released (or become the
        pandas column's own) before the next is read, so a frame's peak is
        about the frame, not the frame plus its table."""
        self._current()
        load(pd)  # (imported here, not by pyarrow's to_pandas: the collector paused while it loads)
        cached = self._cache.get(table)
        if cached is not None:  # run.arrow(table) was asked for: it is in memory already
            present = [c for c in order if c in cached.column_names]
            frame = cached.select(present).to_pandas(split_blocks=True)
        else:
            from .columns import concat_parts

            columns: dict[str, Any] = {}
            with _system_memory_pool(), ExitStack() as files:
                # Each file's footer is read once, then a few columns at a time
                # from all of them, one file after the other: reading files side
                # by side on threads of our own made the warm rollouts frame of
                # a big run a little faster but raised the peak memory
                # (each thread's C heap keeps what it freed), and memory is what
                # a million rollouts in a notebook run out of first.
                opened = [files.enter_context(pq.ParquetFile(file, metadata=footer(file)))
                          for s in self._sets for file in s.files[table]]
                held = [set(f.schema_arrow.names) for f in opened]
                for group in _column_groups(opened, held, order):
                    parts = []
                    for f, names in zip(opened, held):
                        part = f.read(columns=[c for c in group if c in names])
                        for name in group:
                            if name not in names:
                                part = part.append_column(name, pa.nulls(f.metadata.num_rows))
                        parts.append(part)
                    arrow = concat_parts(parts)
                    del parts
                    converted = arrow.to_pandas(split_blocks=True, self_destruct=True)
                    del arrow
                    for name in group:
                        columns[name] = converted[name]
                    del converted
            frame = pd.DataFrame(columns, copy=False)
            del columns
        return rows.padded(frame, order)

    def _shaped(self, kind: str) -> Any:
        """Frame `kind` as rk.frames gives it for the same traces: the
        table's columns in the frames' order, shaped by rollkit.tables.rows."""
        if not self._rows(kind):  # no part has a row: the frame of no traces
            return rows.arrow_frame(kind, rows.empty_table(kind))
        return rows.shaped(kind, self._frame(kind, rows.frame_order(kind, self.arrow_schema(kind))))

    def rollouts(self) -> Any:
        """One row per rollout, as rk.frames.rollouts gives for the same traces."""
        return self._shaped("rollouts")

    def turns(self) -> Any:
        """One row per committed turn, as rk.frames.turns gives."""
        return self._shaped("turns")

    def calls(self) -> Any:
        """One row per model call, answered or not, as rk.frames.calls gives."""
        return self._shaped("calls")

    def phases(self) -> Any:
        """One row per phase span that started, as rk.frames.phases gives."""
        return self._shaped("phases")

    def messages(self) -> Any:
        """One row per message: trace id, task, index, role, content, tool
        calls as `name(arguments)`, and the tool's name for a tool result."""
        return self._frame("messages", rows.MESSAGE_COLUMNS)

    def signals(self) -> Any:
        """One row per reward or metric, as rk.frames.signals gives: a run
        that was not scored gets one row per signal its task type has in the
        other traces (all missing, with why), or one row without a name."""
        return self._shaped("signals")

    def frame(self, kind: str) -> Any:
        """A frame by name ("rollouts", "turns", "calls", "phases", "signals", "messages")."""
        if kind not in TABLES:
            raise ValueError(f"no frame {kind!r}; the frames are {', '.join(TABLES)}")
        return getattr(self, kind)()

    # ---- SQL and search ---------------------------------------------------------
    def _connection(self, query: str = " ".join(TABLES)) -> Any:
        """DuckDB over this run, with a view of each table `query` names (by
        word: a column of the same name only costs a view more). A table
        some part has not built yet (a first open builds the rollouts only)
        is built when a query first names it, not before."""
        self._current()
        while True:
            if self._duck is None:
                self._duck = duckdb.connect()
                self._duck.execute("set enable_progress_bar = false")  # it would print into the notebook or the CLI's output
            for table in TABLES:
                if table not in self._views and _re.search(rf"\b{table}\b", query, _re.IGNORECASE):
                    self._create_view(table)
                    self._views.add(table)
            if self._covered() == self._coverage:
                break
            self._current()  # a view's build brought a growing file up to date: all views anew
        return self._duck

    def _view_select(self, table: str) -> tuple[str | None, list[str]]:
        """The SELECT of `table`'s view (None: no file has one) and the files it reads."""
        # One select per file of the run (`_set`: which, in the order given).
        selects, every = [], []
        for k, s in enumerate(self._sets):
            files = [str(f) for f in s.files[table]]
            if files:
                every += files
                listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
                selects.append(f"select *, {k} as _set from read_parquet([{listed}], union_by_name=true)")
        return (" union all by name ".join(selects) or None), every

    def _create_view(self, table: str) -> None:
        select, _ = self._view_select(table)
        if select is not None:
            self._duck.execute(f"create view {table} as {select}")

    def filter_connection(self, query: str, *, memory_limit: str = filters.MEMORY_LIMIT) -> Any:
        """A locked DuckDB connection (rollkit.tables.filters) over this run's
        tables that `query` names (the rollouts table with `has_error` and
        `is_truncated`): what a filter a user typed runs on. It reads the
        run's table files and nothing else; kept while those files and
        tables stay the same (a new one when they change: it sees the tables
        as they are now). The run owns it: callers do not close it."""
        if _re.search(r"\bis_truncated\b", query, _re.IGNORECASE):
            query += " turns"
        self._connection(query)  # builds the tables `query` names, brings grown files up to date
        views, files = {}, []
        for table in TABLES:
            if table in self._views:
                select, read = self._view_select(table)
                if select is not None and _re.search(rf"\b{table}\b", query, _re.IGNORECASE):
                    views[table] = select
                    files += read
        key = (tuple(views.items()), memory_limit)
        if self._locked is None or self._locked[0] != key:
            if self._locked is not None:
                self._locked[1].close()
            self._locked = (key, filters.locked_connection(views, files, memory_limit=memory_limit))
        return self._locked[1]

    def where(self, expression: str, select: str = "*", *, who: str = "filter", order: str | None = None,
              limit: int | None = None, offset: int = 0, seconds: float = filters.TIME_LIMIT,
              memory_limit: str = filters.MEMORY_LIMIT) -> Any:
        """The rollouts rows (`select`: which columns) where the filter
        `expression` a user typed holds, as an Arrow table; the expression
        runs on `filter_connection` (see rollkit.tables.filters): it may read
        the run's tables and nothing else, within `memory_limit` and `seconds`.
        A filter that is not one expression over the run's columns, or that
        fails, is a UsageError naming it and the column or function at fault."""
        text = filters.check_expression(expression, who)
        query = f"select {select} from rollouts where ({text})"
        if order is not None:
            query += f" order by {order}"
        if limit is not None:
            query += f" limit {int(limit)} offset {int(offset)}"
        con = self.filter_connection(query, memory_limit=memory_limit)
        return filters.run_filtered(con, query, text, who=who, columns=self.filter_columns(), seconds=seconds)

    def filter_columns(self) -> list[str]:
        """The columns a filter over the rollouts table may name (the table's and the flags)."""
        return [c for c in self.arrow_schema("rollouts") if not c.startswith("_")] + list(filters.FLAGS)

    def sql(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """Run a DuckDB query over the tables (rollouts, turns, calls, phases,
        signals, messages) and return a DataFrame.

        This is the owner's full DuckDB: a query may read and write files,
        install extensions and reach the network, as DuckDB allows. Never pass
        it text someone else typed; a filter from a user goes through
        `where` (a locked connection that reads the run's tables only)."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("sql takes a query as text, e.g. run.sql('select task_key, avg(reward) from rollouts group by 1')")
        return self._connection(query).execute(query, params or []).df()

    def search(self, phrase: str | None = None, *, re: str | None = None, case: bool = False,
               roles: Sequence[str] | None = None, locked: bool = False) -> Hits:
        """The rollouts whose messages (any role; tool calls and tool results
        included) hold `phrase` (case-insensitive unless case=True) or match
        the regular expression `re` (locked=True: on a locked connection
        within a time and memory limit, as for a search box a user types in).
        Returns `Hits`: the matching message rows
        (`frame`), the trace ids in run order (`ids`); `rk.notebook.TraceBrowser(hits)` shows them."""
        if (phrase is None) == (re is None):
            raise ValueError("search takes a phrase or re=..., one of the two (e.g. run.search('timeout'))")
        pattern = phrase if phrase is not None else re
        if not isinstance(pattern, str) or not pattern:
            raise ValueError(f"the search pattern must be non-empty text, got {pattern!r}")
        regex = _re.escape(pattern) if phrase is not None else pattern
        if re is not None:
            try:
                _re.compile(re)
            except _re.error as exc:
                raise ValueError(f"re={re!r} is not a regular expression ({exc})") from None
        flags = "c" if case else "i"
        where = "(regexp_matches(content, $1, $2) or regexp_matches(tool_calls, $1, $2))"
        args: list[Any] = [regex, flags]
        if phrase is not None:  # a plain phrase: a substring test is several times faster than a regex
            if case:
                where = "(contains(content, $1) or contains(tool_calls, $1))"
            else:
                where = "(contains(lower(content), lower($1)) or contains(lower(tool_calls), lower($1)))"
            args = [phrase]
        if roles:
            listed = ", ".join("'" + str(r).replace("'", "''") + "'" for r in roles)
            where += f" and role in ({listed})"
        query = f"select id, task_key, _ordinal, index, role, content, tool_calls, name from messages where {where}"
        if locked:
            con = self.filter_connection(query)
            frame = filters.run_filtered(con, query, pattern, who="search", params=args).to_pandas()
        else:
            frame = self.sql(query, args)
        order = self._ordinals(frame)
        frame = frame.assign(_row=order).sort_values(["_row", "index"], kind="stable").reset_index(drop=True)
        return Hits(self, frame.drop(columns=["_ordinal"]), regex, not case, typed=pattern)

    def _ordinals(self, frame: Any) -> Any:
        """Each hit's row in the run: files one after the other."""
        if len(self._sets) == 1:
            return frame["_ordinal"]
        # Several files: ids locate the row (ordinals restart in each file).
        index = self._offsets().column("id").to_pandas()
        position = {trace_id: row for row, trace_id in reversed(list(enumerate(index)))}
        return frame["id"].map(position)

    def arrow_schema(self, table: str) -> list[str]:
        """The column names of a table (from the Parquet footers: nothing read)."""
        names: dict[str, None] = {}
        for s in self._sets:
            for file in s.files[table]:
                names.update(dict.fromkeys(footer(file).schema.to_arrow_schema().names))
        return list(names)


class Hits:
    """What a search found: `frame` (one row per matching message: id,
    task_key, index, role, content, tool_calls, name, _row), `ids` (the
    matching traces, in run order), `len(hits)` traces;
    `rk.notebook.TraceBrowser(hits)` pages through them with the matches
    highlighted; `typed` is what was searched for as given (the phrase or
    the regular expression), to show a user."""

    def __init__(self, run: LazyRun, frame: Any, regex: str, ignore_case: bool, typed: str | None = None) -> None:
        self.run = run
        self.frame = frame
        self.typed = regex if typed is None else typed
        self.pattern = _re.compile(regex, _re.IGNORECASE if ignore_case else 0)
        self.ids = list(dict.fromkeys(frame["id"]))

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"Hits({len(self.ids)} traces, {len(self.frame)} messages, pattern={self.pattern.pattern!r})"

    def trace(self, i: int = 0) -> Trace:
        return self.run.trace(self.ids[i])

    def highlight(self, text: str) -> str:
        """`text` as HTML, escaped, each match wrapped in <mark>."""
        return highlight(text, self.pattern)


def highlight(text: str, pattern: Any) -> str:
    """Escape `text` for HTML and wrap each match of `pattern` in <mark>:
    the text is split at the matches first, then each piece escaped."""
    import html

    out, last = [], 0
    for match in pattern.finditer(text):
        if match.end() == match.start():
            continue
        out.append(html.escape(text[last:match.start()]))
        out.append("<mark>" + html.escape(match.group(0)) + "</mark>")
        last = match.end()
    out.append(html.escape(text[last:]))
    return "".join(out)
