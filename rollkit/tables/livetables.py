"""A run's trace file, written with its columnar tables as the run goes.

`TraceLog(path)` appends each finished trace to a JSON lines file (one
line, flushed: a crash loses only the rollouts in flight) and hands the
lines it wrote, in batches, to the file's tables
(rollkit.tables.columns.TableSet.add), which builds their part from these
bytes as a build from the file would: its rollouts table (the rows a
rollout's time pays for; the other five are built from the file when first
asked for, as after any first open). A run that ends has its tables, so
its first `rk.open_run` builds nothing. A batch becomes a part every
`_LINES` lines, `_BYTES` of lines or `_SECONDS` after its first line,
whichever comes first, and at close (an exception or an interrupt
included; its caller closes the log in a `finally`). A process killed
outright loses only the batch in memory: the tables cover a prefix of the
file and the next open (or a resume's log) builds the rest from the JSON
lines, the source of truth, as for any file that grew.

Opening a log brings the tables up to the file's end first (a resumed
run's earlier lines, or what a crash left unbuilt). The tables are a
cache: failing to write them (a full disk, a cache folder that cannot be
written) logs a warning once and the run goes on writing its traces;
opening the run builds the tables then.

This module writes a trace file and its tables; it runs no rollout and
knows no run folder layout (rollkit.runs.evaluation and rollkit.runs.ab
say which files a run writes).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from ..core._gcpause import paused
from ..core.trace import Trace
from ..core._dependencies import pa

__all__ = ["TraceLog"]

log = logging.getLogger("rollkit")

# A part per this many lines, bytes of lines or seconds, whichever first:
# bounds the memory held (the lines, then their rows while the part is
# built) and how far a monitor reading the live run builds on its own. A
# part of 1,000 single-turn rollouts costs ~0.1 s of CPU to build and write; the
# small parts of a slow run are merged as any file's are (columns._MAX_PARTS).
_LINES = 1000
_BYTES = 8 << 20
_SECONDS = 10.0


class TraceLog:
    """One JSON lines file a run appends traces to, and its tables.
    `mode` opens the file ("ab": append, "xb": a new file only);
    `tables=False` writes the lines alone; `progress` is the bar of a build
    of what the tables miss at open (rk.open_run's: None shows it past a few MB)."""

    def __init__(self, path: str | os.PathLike[str], *, mode: str = "ab", tables: bool = True,
                 progress: bool | None = None) -> None:
        self.path = Path(path)
        self.file = open(self.path, mode)
        self.end = os.fstat(self.file.fileno()).st_size
        self.tables: Any = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._since = 0.0
        if tables:
            try:
                self._open_tables(progress)
            except BaseException:  # a bad line or an interrupt during the catch-up build: nothing left open
                self.file.close()
                raise

    def _open_tables(self, progress: bool | None) -> None:
        from .columns import TableSet

        try:
            self.tables = TableSet(self.path, progress=progress)
        except _cache_errors() as exc:
            self._give_up(exc)

    def append(self, trace: Trace) -> None:
        """Write one trace as one line, flushed; its rows go to the tables with the next part."""
        self.write(trace.model_dump_json().encode() + b"\n")

    def write(self, line: bytes) -> None:
        """Write one complete JSON line (ending in a newline), flushed."""
        self.file.write(line)
        self.file.flush()
        self.end += len(line)
        if self.tables is None:
            return
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(line)
        self._pending_bytes += len(line)
        if (len(self._pending) >= _LINES or self._pending_bytes >= _BYTES
                or time.monotonic() - self._since >= _SECONDS):
            self.flush()

    def flush(self) -> None:
        """Write the part of the lines not in the tables yet."""
        if not self._pending or self.tables is None:
            return
        data = b"".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        try:
            # The collector off: a part's rows are many young tuples, and each
            # collection they set off would walk the run's heap (its traces).
            with paused():
                self.tables.add(data, self.end - len(data))
        except _cache_errors() as exc:
            self._give_up(exc)

    def close(self) -> None:
        """The last part, then the file closed (the file is closed even when the part fails)."""
        try:
            self.flush()
        finally:
            self.file.close()

    def __enter__(self) -> TraceLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _give_up(self, exc: BaseException) -> None:
        self.tables = None
        self._pending, self._pending_bytes = [], 0
        log.warning("the tables of %s are not written as the run goes (%s: %s); opening the run builds them",
                    self.path, type(exc).__name__, exc)


def _cache_errors() -> tuple[type[BaseException], ...]:
    """What writing the tables may raise that leaves the traces intact:
    the system's (a full disk, no permission) and Arrow's."""
    return (OSError, pa.ArrowException)
