"""A run's trace file, written with its columnar tables as the run goes.

`TraceLog(path)` appends each finished trace to a JSON lines file (one
line, flushed: a crash loses only the rollouts in flight) and hands the
lines it wrote, in batches, to a thread of its own (`_Builder`), which
gives them to the file's tables (rollkit.tables.columns.TableSet.add): their
part is built from these bytes as a build from the file would, its
rollouts table only (the rows a rollout's time pays for; the other five are
built from the file when first asked for, as after any first open). The
run's event loop only appends bytes to a queue: no part is built in it,
and nothing the build imports (NumPy, pyarrow, DuckDB) is imported by it.
The parts are built by DuckDB (rollkit.tables.nativebuild) in one database
kept for the process, on one DuckDB thread, whatever their size: the Python
build's Arrow conversion imports pandas (pyarrow looks for it on every
`pa.array`), and pandas' objects would make every collection of the run's
heap slower for the rest of the process. A batch is handed over every
`_LINES` lines, `_BYTES` of lines or `_SECONDS` after its first line,
whichever comes first, and at close (an exception or an interrupt
included; its caller closes the log in a `finally`). A run's end
(`close(wait=False)`) does not wait for that last part: the run returns
while the thread builds it, and whatever opens the file's tables in this
process (rollkit.tables.columns.settle), a resume's log included, waits for
it first, as the interpreter's exit does: a run that ends has its tables,
so its first `rk.open_run` builds nothing. A process killed outright loses only
what the thread had not written yet: the tables cover a prefix of the
file and the next open (or a resume's log) builds the rest from the JSON
lines, the source of truth, as for any file that grew.

Opening a log on a file that has lines brings the tables up to the file's
end first, in the caller (a resumed run's earlier lines, or what a crash
left unbuilt: its progress bar, and a bad line's error, are the caller's).
The tables are a cache: failing to write them (a full disk, a cache folder
that cannot be written) logs a warning once and the run goes on writing
its traces; opening the run builds the tables then.

This module writes a trace file and its tables; it runs no rollout and
knows no run folder layout (rollkit.runs.evaluation and rollkit.runs.ab
say which files a run writes).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

from ..core.gcpause import paused
from ..core.trace import Trace

__all__ = ["TraceLog"]

log = logging.getLogger("rollkit")

# A batch handed over per this many lines, bytes of lines or seconds,
# whichever first: bounds the memory held (the lines, then their rows while
# the part is built) and how far a monitor reading the live run builds on
# its own; the small parts of a slow run are merged as any file's are
# (columns._MAX_PARTS). A native part costs DuckDB a fixed amount of CPU
# whatever its size (binding its queries), so parts are large: the cost per
# line falls as a part grows (benchmarks/ measure it).
_LINES = 5000
_BYTES = 16 << 20
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
        self._fd = self.file.fileno()
        self.end = os.fstat(self._fd).st_size
        self._builder: _Builder | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._since = 0.0
        if tables:
            try:
                self._builder = _Builder(self.path, self._caught_up(progress))
            except BaseException:  # a bad line or an interrupt during the catch-up build: nothing left open
                self.file.close()
                raise

    def _caught_up(self, progress: bool | None) -> Any:
        """The tables, built up to the file's end here (a resumed run's
        lines; nothing to build, nor to import, for a new file); _GAVE_UP
        when they cannot be written (said once)."""
        from .columns import TableSet

        try:
            return TableSet(self.path, progress=progress)
        except _cache_errors() as exc:
            _give_up(self.path, exc)
            return _GAVE_UP

    @property
    def tables(self) -> Any:
        """The file's TableSet as the builder last left it (None once given up)."""
        builder = self._builder
        return None if builder is None or builder.tables is _GAVE_UP else builder.tables

    def append(self, trace: Trace) -> None:
        """Write one trace as one line, flushed; its rows go to the tables with the next part."""
        self.write(trace.json_line())

    def write(self, line: bytes) -> None:
        """Write one complete JSON line (ending in a newline), flushed: one
        system call (nothing is ever held in the file object's buffer)."""
        written = os.write(self._fd, line)
        while written < len(line):  # a short write (a signal, a disk filling up): the rest, or the error
            written += os.write(self._fd, line[written:])
        self.end += len(line)
        if self._builder is None:
            return
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(line)
        self._pending_bytes += len(line)
        if (len(self._pending) >= _LINES or self._pending_bytes >= _BYTES
                or time.monotonic() - self._since >= _SECONDS):
            self.flush()

    def flush(self) -> None:
        """Hand the lines not in the tables yet to the builder (it builds their part; this does not wait)."""
        if not self._pending or self._builder is None:
            return
        data = b"".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        self._builder.hand(data, self.end - len(data))

    def wait(self) -> None:
        """Wait until the builder has written the parts of every batch handed over (not the lines pending)."""
        if self._builder is not None:
            self._builder.wait()

    def close(self, *, wait: bool = True) -> None:
        """The last part handed over and the file closed (even when the part
        fails); `wait=False` returns while the thread still builds it, for
        a run's end (rollkit.tables.columns.settle, and any TableSet of
        this file opened in this process, waits for it; so does the
        interpreter's exit)."""
        try:
            self.flush()
            if self._builder is not None:
                self._builder.stop(wait)
        finally:
            self.file.close()

    def __enter__(self) -> TraceLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_GAVE_UP = object()  # the builder's tables once writing them failed: the lines it is given are dropped


class _Builder:
    """The thread that builds a log's parts from the batches of lines handed
    to it, in order, one at a time, in the process's DuckDB database of one
    thread (`_engine`). Started with the first
    batch; `stop` builds what is queued and ends it."""

    def __init__(self, path: Path, tables: Any) -> None:
        self.path = path
        self.tables = tables  # a TableSet, or _GAVE_UP
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def hand(self, data: bytes, start: int) -> None:
        if self._thread is None:
            # A daemon: an interpreter that exits without closing the log
            # (a crash) is not held by it; a part is written whole or not at all.
            self._thread = threading.Thread(target=self._run, name=f"rollkit-tables {self.path.name}", daemon=True)
            self._thread.start()
        self._jobs.put((data, start))

    def wait(self) -> None:
        if self._thread is not None:
            done = threading.Event()
            self._jobs.put(done)
            done.wait()

    def stop(self, wait: bool = True) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._jobs.put(None)
        if wait:
            thread.join()
            return
        from .columns import finishing, settle

        finishing(self.path, thread)
        if not _at_exit:
            _at_exit.append(atexit.register(settle))

    def _run(self) -> None:
        engine = _engine()
        while (job := self._jobs.get()) is not None:
            if isinstance(job, threading.Event):
                job.set()
            elif self.tables is not _GAVE_UP:
                self._build(*job, engine)

    def _build(self, data: bytes, start: int, engine: Any) -> None:
        try:
            # The collector off: a part's rows are many young objects, and each
            # collection they set off would walk the run's heap (its traces).
            with paused():
                self.tables.add(data, start, engine)
        except Exception as exc:  # noqa: BLE001  the tables are a cache: whatever fails, the traces are whole
            self.tables = _GAVE_UP
            if self.path.exists():  # else its folder was removed (a temporary one, after the run): nobody will open it
                _give_up(self.path, exc)


_at_exit: list[Any] = []  # settle registered to run at the interpreter's exit (once)
_engine_lock = threading.Lock()
_engines: list[Any] = []


def _engine() -> Any:
    """The DuckDB database every log's thread builds in (nativebuild.Engine),
    opened once for the process and kept: opening one, and its first
    queries, cost each run CPU for nothing. One DuckDB thread: the run's
    loop keeps the other core."""
    with _engine_lock:
        if not _engines:
            from .nativebuild import Engine

            _engines.append(Engine(threads=1))
        return _engines[0]


def _give_up(path: Path, exc: BaseException) -> None:
    log.warning("the tables of %s are not written as the run goes (%s: %s); opening the run builds them",
                path, type(exc).__name__, exc)


def _cache_errors() -> tuple[type[BaseException], ...]:
    """What writing the tables may raise that leaves the traces intact:
    the system's (a full disk, no permission) and Arrow's."""
    from ..core.dependencies import pa

    return (OSError, pa.ArrowException)
