"""Traces out: what other tools take from finished rollouts (training rows,
spans), made by `rk.export(source, path, format=...)`.

What this package owns: the front door (`export`), the table of export
formats, and reading a source (traces, a trace file or run folder, or an
opened run) into what a format needs: traces one at a time, or a run's
columnar tables for formats that never build a trace. One module per
format writes it:

    sft     one chat-template training row per branch (Parquet, JSON lines)
    rl      token ids, logprobs and loss masks per turn, with the reward
    otel    OpenTelemetry GenAI spans, one trace per rollout, over OTLP

These are not trace formats: nothing here loads back as a trace (that is
`rk.save` / `rk.load`). Modules here import the core and the runs layer,
never `rollkit.notebook`; each format's heavy dependency (pyarrow, the
OpenTelemetry SDK) is imported when that format is first used.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import UsageError
from ...core.trace import Trace
from ..lazyrun import LazyRun, open_run

__all__ = ["export", "ExportSource", "formats", "written_whole"]

# name -> (module under this package, what it writes); the module has
# `write(source: ExportSource, path: Path | None, **options) -> Any`.
_FORMATS: dict[str, tuple[str, str]] = {
    "sft": ("sft", "one chat-template training row per branch (.parquet or .jsonl)"),
    "rl": ("rl", "token ids, logprobs and loss mask per turn, with the reward (.parquet or .jsonl)"),
    "otel": ("otel", "OpenTelemetry GenAI spans over OTLP (endpoint=...)"),
}


@contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """A hidden temporary file beside `path` for an export to write: renamed
    to `path` when the block ends, removed when it raises (Ctrl-C
    included). A file under `path` is only ever a whole export; a crash
    (SIGKILL, power) leaves at most the hidden `.NAME.*.part` beside it."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    part = Path(name)
    try:
        yield part
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def formats() -> dict[str, str]:
    """The export formats and what each writes."""
    return {name: what for name, (_, what) in _FORMATS.items()}


@dataclass
class ExportSource:
    """What `rk.export` was given, read on demand: `traces()` yields one
    trace at a time (a run's are parsed one by one, never all held); `run`
    is the opened run (`rk.open_run`) when the source was a file or folder,
    so a format can read its columnar tables instead; `where` is the SQL
    filter over the run's rollouts table, already checked."""

    given: Any
    run: Any = None
    where: str | None = None

    def lines(self) -> Iterator[bytes]:
        """The JSON line of each rollout of the run `where` selects, in run
        order, read at its byte offset (the store's `_offset`, `_length`):
        only the offsets of the selected rows are held, no trace is built."""
        if len(self.run) == 0:  # no rollout yet (a run that just started): no table to read
            return
        if self.where is None:
            spans = self.run.sql("SELECT _set, _offset, _length FROM rollouts ORDER BY _set, _offset")
            spans = {c: spans[c].to_numpy().tolist() for c in ("_set", "_offset", "_length")}
        else:
            table = self.run.where(self.where, "_set, _offset, _length", who="rk.export", order="_set, _offset")
            spans = {c: table.column(c).to_pylist() for c in ("_set", "_offset", "_length")}
        places = zip(spans["_set"], spans["_offset"], spans["_length"])
        del spans
        paths = self.run.paths
        current, handle = -1, None
        try:
            for k, offset, length in places:
                if k != current:
                    if handle is not None:
                        handle.close()
                    handle, current = open(paths[k], "rb"), k
                handle.seek(offset)
                yield handle.read(length)
        finally:
            if handle is not None:
                handle.close()

    def traces(self) -> Iterator[Trace]:
        """The traces selected, one at a time."""
        if self.run is None:
            yield from self.given
            return
        for line in self.lines():
            yield Trace.model_validate_json(line)


def _source(source: Any, where: str | None) -> ExportSource:
    if isinstance(source, Trace):
        source = [source]
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise UsageError(f"rk.export: {path} does not exist; give a trace file, a run folder, "
                             "an opened run (rk.open_run) or a list of traces")
        run = open_run(path)
    elif isinstance(source, LazyRun):
        run = source
    elif isinstance(source, Iterable) and not isinstance(source, (bytes, dict)):
        items = list(source)
        for i, item in enumerate(items):
            if not isinstance(item, Trace):
                raise UsageError(f"rk.export: item {i} is {type(item).__name__}, not a rollkit Trace; "
                                 "give traces, a trace file, a run folder or an opened run")
        if where is not None:
            raise UsageError("rk.export: where= is SQL over a run's rollouts table; give a trace file, "
                             "a run folder or rk.open_run(...) with it, or filter a list of traces in Python")
        return ExportSource(items)
    else:
        raise UsageError(f"rk.export takes traces, a trace file, a run folder or an opened run, "
                         f"got {type(source).__name__}")
    if where is not None and len(run) > 0:  # an empty run has no table to check the filter on
        run.where(where, "id", who="rk.export", limit=0)  # a UsageError naming what is wrong
    return ExportSource(None, run=run, where=where)


def export(source: Any, path: str | os.PathLike[str] | None = None, *, format: str,
           where: str | None = None, **options: Any) -> Any:
    """Write what other tools take from rollouts: `format="sft"` training
    rows, `"rl"` token-level rows, `"otel"` spans (see `formats()`).

    `source` is a trace, a list of traces, a trace file or run folder, or an
    opened run. `where=` selects rollouts by an SQL expression over the
    run's rollouts table (e.g. `"reward = 1 and not is_truncated"`; the
    rows' `has_error` and `is_truncated` may be named), for a file, folder
    or opened run. It runs on a locked DuckDB connection
    (rollkit.runs.filters): it reads the run's tables and nothing else, and
    a filter that is not one expression over its columns is a UsageError
    naming the column or function at fault."""
    if format not in _FORMATS:
        raise UsageError(f"rk.export: unknown format {format!r}; the formats are "
                         + ", ".join(f"{n!r} ({w})" for n, w in formats().items()))
    module = importlib.import_module(f"{__name__}.{_FORMATS[format][0]}")
    return module.write(_source(source, where), None if path is None else Path(path), **options)
