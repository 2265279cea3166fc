"""Traces out: what other tools take from finished rollouts (training rows,
spans), made by `rk.export(source, path, format=...)`. The training
formats (sft, tokens, preference, prompts) share `branches` (a branch's
columns, the file, the sidecar `export_meta.json`).

What this package owns: the front door (`export`), the table of export
formats, and reading a source (traces, a trace file or run folder, or an
opened run) into what a format needs: traces one at a time, or a run's
columnar tables for formats that never build a trace. One module per
format writes it:

    sft         one chat-template training row per branch (JSON lines, Parquet)
    tokens      one merged token sequence per branch, labels and masks
    preference  prompt / chosen / rejected pairs from forks and groups
    prompts     one prompt row per task, for trainers that sample (GRPO)
    rl          token ids, logprobs and loss masks per turn, with the reward
    otel    OpenTelemetry GenAI spans, one trace per rollout, over OTLP

These are not trace formats: nothing here loads back as a trace (that is
`rk.save` / `rk.load`). Modules here import the core and the runs layer,
never `rollkit.notebook`; each format's heavy dependency (pyarrow, the
OpenTelemetry SDK) is imported when that format is first used.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import UsageError
from ...core.trace import Trace
from ...tables.lazyrun import LazyRun, open_run

__all__ = ["export", "ExportSource", "formats", "GROUP_SQL"]

# name -> (module under this package, what it writes); the module has
# `write(source: ExportSource, path: Path | None, **options) -> Any`.
_FORMATS: dict[str, tuple[str, str]] = {
    "sft": ("sft", "one chat-template training row per branch (.jsonl or .parquet)"),
    "rl": ("rl", "token ids, logprobs and loss mask per turn, with the reward (.parquet or .jsonl)"),
    "tokens": ("tokens", "one merged token sequence per branch with labels and masks (.jsonl or .parquet)"),
    "preference": ("preference", "prompt/chosen/rejected pairs from forks and from groups (.jsonl)"),
    "prompts": ("prompts", "one prompt row per task for online trainers such as GRPO (.jsonl)"),
    "otel": ("otel", "OpenTelemetry GenAI spans over OTLP (endpoint=...)"),
}


# A rollout's group (`group_id` in the training formats): the task key a
# batch run wrote as `example_id`, else the task's key.
GROUP_SQL = "coalesce(CAST(example_id AS VARCHAR), task_key)"


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

    def lines(self, by_group: bool = False) -> Iterator[bytes]:
        """The JSON line of each rollout of the run `where` selects, in run
        order (`by_group`: the rollouts of one task together, `GROUP_SQL`,
        each group in run order), read at its byte offset (the store's
        `_offset`, `_length`): only the offsets of the selected rows are
        held, no trace is built."""
        if len(self.run) == 0:  # no rollout yet (a run that just started): no table to read
            return
        order = f"{GROUP_SQL + ', ' if by_group else ''}_set, _offset"
        if self.where is None:
            spans = self.run.sql(f"SELECT _set, _offset, _length FROM rollouts ORDER BY {order}")
            spans = {c: spans[c].to_numpy().tolist() for c in ("_set", "_offset", "_length")}
        else:
            table = self.run.where(self.where, "_set, _offset, _length", who="rk.export", order=order)
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
    rows, `"tokens"` merged token sequences, `"preference"` pairs,
    `"prompts"` for online trainers, `"rl"` token-level rows per turn,
    `"otel"` spans (see `formats()`).

    `source` is a trace, a list of traces, a trace file or run folder, or an
    opened run. `where=` selects rollouts by an SQL expression over the
    run's rollouts table (e.g. `"reward = 1 and not is_truncated"`; the
    rows' `has_error` and `is_truncated` may be named), for a file, folder
    or opened run. It runs on a locked DuckDB connection
    (rollkit.tables.filters): it reads the run's tables and nothing else, and
    a filter that is not one expression over its columns is a UsageError
    naming the column or function at fault."""
    if format not in _FORMATS:
        raise UsageError(f"rk.export: unknown format {format!r}; the formats are "
                         + ", ".join(f"{n!r} ({w})" for n, w in formats().items()))
    module = importlib.import_module(f"{__name__}.{_FORMATS[format][0]}")
    known = [name for name, p in inspect.signature(module.write).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(f"rk.export(format={format!r}) has no option {', '.join(unknown)}; its options are "
                         + (", ".join(known) or "none"))
    return module.write(_source(source, where), None if path is None else Path(path), **options)
