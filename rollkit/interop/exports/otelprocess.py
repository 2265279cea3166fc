"""The span sender: a process of its own that makes and sends a live run's spans.

What this module owns: the one child process (per Python process: started
by the first run with `otel=URL`, reused by the runs after it, ended by its
handle when the process exits) that turns finished rollouts into OTLP spans
and posts them, by rollkit.interop.exports.otel's `OtelExporter` run there
(the same spans, batches, timeouts, masking and counts), and `ProcessSink`,
the run watcher that hands it each finished rollout's JSON line: the line
the run already wrote to its traces.jsonl, or, without a folder, the same
line serialized for it (cheaper than making the spans: benchmarks/overhead.py).
Making and encoding a rollout's spans is Python under the GIL; in the run's
process it was a large share of a fast run's time (benchmarks/overhead.py).

The run's side never waits: a line goes down a non-blocking pipe; what the
pipe cannot take at once waits in a backlog in the run's process (at most
`_BACKLOG` bytes: past it a rollout is dropped and counted) and goes with the
next rollout or at the end. The end sends what is left and waits for the
child's answer at most the exporter's own end wait (otel.LiveSink: the
export timeout plus its grace) plus `_START_GRACE` (the child's start-up);
a child that died or did not answer is one warning, never the run's error,
and a child that did not answer is killed (the next run starts a new one).

Frames on the child's stdin: kind (1 byte), channel (4), size (4), payload.
A channel is one run: O opens it (the exporter's options, JSON), T is one
trace's JSON line, E ends it ({"wait": seconds}) and the child answers one
JSON line on stdout: what the exporter sent (otel.OtelSent's fields) and
what it waited. At the end of its stdin (the parent exited, or was killed)
the child drops what it holds and exits: it never outlives its parent.
A forked copy of the parent closes its copy of the pipes at once and starts
its own sender if it needs one (two processes never share one).

The child's environment holds what reaching a collector needs (PATH, HOME,
locale, the OTLP exporter's OTEL_* settings, certificate and proxy
variables, the Python path) and nothing else of the host: no API keys. The
collector's URL and headers reach it down the pipe, never in its argv or
environment. It is not in the terminal's process group: Ctrl-C interrupts
the run, and the run's end still gets the child's answer.

This module runs no rollout and writes no file.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...core.errors import UsageError
from ...core.events import RunSink
from . import otel

__all__ = ["ProcessSink", "SenderProcess", "live_sink", "sender", "stop"]

_FRAME = struct.Struct(">cII")
# Bytes of lines waiting for the pipe in the run's process, at most (about
# 10,000 demo rollouts); past it a rollout is dropped, counted and said.
_BACKLOG = 32 << 20
# What the end waits for the child's answer beyond the exporter's own wait:
# a child started by this run may still be importing its modules.
_START_GRACE = 3.0
# What the process's exit waits for the child to end, before killing it.
_EXIT_WAIT = 2.0
_PASSED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT", "VIRTUAL_ENV", "PYTHONHOME",
           "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


def _environment() -> dict[str, str]:
    """The child's environment (see the module docstring): no API keys."""
    env = {k: v for k, v in os.environ.items()
           if k in _PASSED or k.upper() in _PROXIES or k.startswith("OTEL_")}
    here = str(Path(__file__).resolve().parents[3])  # the folder rollkit is imported from
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    return env


class SenderProcess:
    """The child process, by its handle: `put` a frame (never waits),
    `drain` and `answer` (wait, each until a deadline), `close`."""

    def __init__(self) -> None:
        self.popen = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=_environment(), close_fds=True,
                                      start_new_session=True)
        self.pid = self.popen.pid
        self._in = self.popen.stdin.fileno()  # type: ignore[union-attr]
        self._out = self.popen.stdout.fileno()  # type: ignore[union-attr]
        os.set_blocking(self._in, False)
        self._backlog: deque[Any] = deque()
        self._backlog_bytes = 0
        self._unread = b""
        self._answers: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.gone = False  # it takes nothing more: its pipe broke, or it was closed
        self.channels = itertools.count(1)

    def put(self, kind: bytes, channel: int, payload: bytes, *, bounded: bool = True) -> bool:
        """Queue one frame and send what the pipe takes now; False (nothing
        queued) when the child is gone or, `bounded`, the backlog is full
        (a channel's opening and end are not: they are small, and the end
        must follow what was queued)."""
        size = _FRAME.size + len(payload)
        with self._lock:
            if self.gone or bounded and self._backlog_bytes + size > _BACKLOG:
                return False
            self._backlog.append(_FRAME.pack(kind, channel, len(payload)))
            self._backlog.append(payload)
            self._backlog_bytes += size
            self._pump()
        return True

    def _pump(self) -> None:
        backlog = self._backlog
        while backlog:
            try:
                written = os.writev(self._in, list(itertools.islice(backlog, 64)))
            except BlockingIOError:
                return
            except OSError:  # a broken pipe: the child ended
                self.gone = True
                backlog.clear()
                return
            self._backlog_bytes -= written
            while written:
                first = backlog[0]
                if len(first) > written:
                    backlog[0] = memoryview(first)[written:]
                    break
                written -= len(first)
                backlog.popleft()

    def drain(self, deadline: float) -> bool:
        """Send the backlog, waiting for the pipe until `deadline` (monotonic); whether it all went."""
        while True:
            with self._lock:
                self._pump()
                if self.gone or not self._backlog:
                    return not self.gone
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([], [self._in], [], left)

    def answer(self, channel: int, deadline: float) -> dict[str, Any] | None:
        """The child's answer to channel's end; None if it ended or did not answer by `deadline`."""
        while channel not in self._answers:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out], [], [], left)[0]:
                return None
            chunk = os.read(self._out, 1 << 16)
            if not chunk:
                self.gone = True
                return None
            *lines, self._unread = (self._unread + chunk).split(b"\n")
            for line in lines:
                said = json.loads(line)
                self._answers[said["channel"]] = said
        return self._answers.pop(channel)

    def ended(self) -> str:
        """How the child ended, as a message says it ("ended with exit code 1", "was killed by SIGKILL"), or "running"."""
        code = self.popen.poll()
        if code is None:
            return "running"
        return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"ended with exit code {code}"

    def close_pipes(self) -> None:
        """Close this process's ends of the child's pipes (the child then reads the end of its stdin)."""
        for pipe in (self.popen.stdin, self.popen.stdout):
            try:
                pipe.close()  # type: ignore[union-attr]
            except OSError:  # a broken pipe's last flush
                pass

    def close(self, wait: float = _EXIT_WAIT) -> None:
        """End the child: the end of its stdin, then at most `wait` seconds, then SIGKILL; always reaped."""
        with self._lock:
            self.gone = True
            self._backlog.clear()
        self.close_pipes()
        try:
            self.popen.wait(wait)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


_process: SenderProcess | None = None
_process_lock = threading.Lock()


def sender() -> SenderProcess:
    """The process's span sender, started now if there is none or the last one is gone."""
    global _process
    with _process_lock:
        if _process is not None and _process.gone:
            _process.close(0)
            _process = None
        if _process is None:
            if not _started_once:
                atexit.register(stop)
                _started_once.append(True)
            _process = SenderProcess()
        return _process


_started_once: list[bool] = []


def _forked() -> None:
    """In a forked copy of this process (os.register_at_fork): the parent's
    sender stays the parent's. Its pipe's ends are closed here (the
    parent's exit still ends it; two processes never write frames into one
    pipe), and this process starts its own if it runs with otel=."""
    global _process, _process_lock
    _process_lock = threading.Lock()  # another thread may have held it at the fork
    process, _process = _process, None
    if process is not None:
        process.gone = True
        process.close_pipes()


os.register_at_fork(after_in_child=_forked)


def stop(wait: float = _EXIT_WAIT) -> None:
    """End the span sender, if one runs (at exit: rollouts still queued there are dropped)."""
    global _process
    with _process_lock:
        process, _process = _process, None
    if process is not None:
        process.close(wait)


class ProcessSink(RunSink):
    """`rk.evaluate(otel=URL)`'s watcher: opens a channel of the span sender
    when the run begins, hands it each finished rollout's JSON line, and at
    the end says what was not sent, once (see the module docstring)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.process: SenderProcess | None = None
        self.channel = 0
        self.rollouts = self.unsent = 0
        self.lost: str | None = None  # the child ended mid-run: how

    def begin(self, info: dict[str, Any]) -> None:
        self.process = sender()
        self.channel = next(self.process.channels)
        self.process.put(b"O", self.channel, json.dumps({"endpoint": self.endpoint}).encode(), bounded=False)

    def finished(self, trace: Any, line: bytes | None = None) -> None:
        """One rollout; `line` its JSON line as the run wrote it (serialized here when the run has no file)."""
        process = self.process
        if process is None:
            return
        self.rollouts += 1
        if not process.put(b"T", self.channel, trace.json_line() if line is None else line):
            self.unsent += 1

    def end(self, status: str) -> None:
        process = self.process
        if process is None:
            return
        self.process = None
        wait = otel.LIVE_END_WAIT
        deadline = time.monotonic() + wait + _START_GRACE
        answer = None
        if process.put(b"E", self.channel, json.dumps({"wait": wait}).encode(), bounded=False) \
                and process.drain(deadline):
            answer = process.answer(self.channel, deadline)
        if answer is None:
            return self._lost(process, wait + _START_GRACE)
        waited = answer.pop("waited")
        answer.pop("channel")
        sent = otel.OtelSent(**answer)
        full = f"the span sender's backlog of {_BACKLOG / (1 << 20):g} MB was full"
        if sent.failed:
            more = f"; the spans of {self.unsent} more rollouts were never sent ({full})" if self.unsent else ""
            otel.warn_not_taken(sent, waited, more)
        elif self.unsent:
            warnings.warn(f"rollkit: the spans of {self.unsent} of {self.rollouts} rollouts were not sent to "
                          f"{otel.shown(self.endpoint)}: {full}", stacklevel=3)

    def _lost(self, process: SenderProcess, waited: float) -> None:
        """The child died or did not answer: one warning (the collector's credentials masked); a
        child that did not answer is ended, so the next run starts a new one."""
        how = process.ended()
        if how == "running":
            process.close(0)
            how = f"did not answer within {waited:g} s and was ended"
        else:
            process.gone = True
        warnings.warn(f"rollkit: the spans of up to {self.rollouts} rollouts may not have reached "
                      f"{otel.shown(self.endpoint)}: the span sender process (pid {process.pid}) {how}",
                      stacklevel=3)


def live_sink(given: Any) -> RunSink:
    """`rk.evaluate`'s `otel=` checked, as a run watcher: a URL's spans are
    made and sent by the span sender (`ProcessSink`), an `OtelExporter`'s in
    this process (otel's live sink)."""
    if isinstance(given, otel.OtelExporter):
        return otel.LiveSink(given)
    if isinstance(given, str):
        otel.sdk()  # not installed: say so before the run starts
        return ProcessSink(otel.endpoint_url(given, "rk.evaluate(otel=...)"))
    raise UsageError(f"rk.evaluate: otel= takes the OTLP/HTTP URL of a trace collector (e.g. "
                     f"'http://127.0.0.1:6006/v1/traces') or an OtelExporter, got {type(given).__name__}")


# ---- the child ------------------------------------------------------------------------------


def _read(stream: Any, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def _serve(stdin: Any, stdout: Any) -> None:
    """Read frames until the end of stdin (see the module docstring)."""
    from ...core.trace import Trace

    exporters: dict[int, otel.OtelExporter] = {}
    unread: dict[int, str] = {}
    try:
        while (head := _read(stdin, _FRAME.size)) is not None:
            kind, channel, size = _FRAME.unpack(head)
            payload = _read(stdin, size)
            if payload is None:
                return
            if kind == b"T":
                exporter = exporters.get(channel)
                if exporter is not None:
                    try:
                        exporter.send(Trace.model_validate_json(payload))
                    except ValueError as exc:  # not a trace: said in the answer, the rest go on
                        unread.setdefault(channel, f"a line the span sender could not read as a trace: {exc}")
            elif kind == b"O":
                exporters[channel] = otel.OtelExporter(**json.loads(payload))
            elif kind == b"E" and channel in exporters:
                exporter = exporters.pop(channel)
                sent = exporter.close(json.loads(payload)["wait"])
                answer = {"channel": channel, "waited": exporter.waited, **asdict(sent)}
                if channel in unread:
                    answer["reason"] = unread.pop(channel)
                stdout.write(json.dumps(answer).encode() + b"\n")
                stdout.flush()
    finally:
        for exporter in exporters.values():
            exporter.close(0)


def _main() -> None:
    """The child: what every exporter needs imported first, then those
    modules' objects left out of the collector's walks for good (gc.freeze:
    with them in, the collections the traces' parsing sets off cost the
    child more than making their spans), then the frames."""
    import gc

    from ...core.trace import Trace  # noqa: F401  (imported for the freeze)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    otel.sdk()
    otel.otlp_exporter_class()
    gc.freeze()
    _serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    _main()
