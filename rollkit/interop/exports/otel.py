"""OpenTelemetry GenAI spans: each rollout sent as one OTel trace over OTLP/HTTP.

What this module owns: turning a finished trace into spans named and
attributed by the OpenTelemetry GenAI semantic conventions (the version
pinned in `SEMCONV_VERSION`), and sending them to a collector over
OTLP/HTTP: the spans are written as OTLP protobuf here and posted by the
OpenTelemetry OTLP/HTTP exporter's client (its retries, headers, log), or
made as SDK spans for a `span_exporter=` the caller gives.
`rk.export(traces, format="otel", endpoint=...)` sends a batch (`write`);
`rk.evaluate(..., otel=URL)` sends each rollout as it finishes, by an
exporter in a process of its own (rollkit.interop.exports.otelprocess);
`otel=OtelExporter(...)` by that exporter, in this process (`LiveSink`).

One rollout is one trace:

    invoke_agent {agent}          the rollout, with its reward, outcome and stop
    ├── boot / setup / agent / finalize / scoring      rollkit's phases
    │   (under agent:)
    │   ├── chat {model}          one per model call, at the call's own times
    │   └── execute_tool {name}   one per tool call that was answered

The trace does not time tool calls, so an `execute_tool` span covers the
gap between the model call that asked for the tool and the next call (or
the end of its segment) and says so (`rollkit.timing = "inferred"`).
Message and tool content is left out unless `content=True`.

The SDK is imported when an exporter is made, never by `import rollkit`.
Each exporter has a TracerProvider of its own (its resource, and the
tracer of a `span_exporter=`'s spans; the process's global one, which the
user's own tracing may own, is never touched), gives every span
its recorded start and end, and sends from one background thread, the
way the SDK's batch span processor does: rollouts wait in a bounded queue
(a full one drops and counts them), leave in batches of up to 512 spans,
each export given a short timeout (5 s), so a live run's event loop never
waits on the network, and its end waits a bounded time (see `LiveSink`).
This module reads traces only; it writes no trace and no file.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import random
import re
import struct
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from ...core.errors import Unavailable, UsageError
from ...core.messages import AssistantMessage, Message, SystemMessage, ToolMessage, text_of
from ...core.trace import PHASES, ModelCall, Trace
from ...core.events import RunSink

__all__ = ["LIVE_END_WAIT", "LiveSink", "OtelExporter", "OtelSent", "SEMCONV_VERSION", "endpoint_url", "otlp_exporter_class", "sdk",
           "shown", "span_count", "warn_not_taken", "write"]

# The GenAI semantic conventions these spans follow: semantic-conventions
# v1.41.0, the last release that held the GenAI conventions before they
# moved to a repository of their own. From 1.37 on, the provider is
# `gen_ai.provider.name` (it replaced `gen_ai.system`) and content is the
# JSON attributes `gen_ai.input.messages` / `gen_ai.output.messages`
# (it replaced the per-message events). Sent as the tracer's schema URL too,
# so a back end can tell which names it is reading.
SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

# Spans sent per request: large enough that the request overhead vanishes,
# small enough to stay far below the exporter's request size limit with
# content on (the SDK's batch processor sends 512 too).
_BATCH_SPANS = 512
# Rollouts waiting to be sent, at most: past it a live run's finished
# rollout is dropped (counted and said at the end), never waited for; a
# batch export (`send(wait=True)`) waits for room instead.
_QUEUE_ROLLOUTS = 2048
# Seconds one export may take, retries included (the OTLP exporter retries
# a refused connection or a 5xx with backoff until then): a dead or silent
# collector costs the sending thread this much per batch, the run nothing.
_TIMEOUT = 5.0
# What a live run's end waits for the queue to drain, past the export
# timeout: a healthy collector gets the last batches, a dead one costs the
# end of the run at most `timeout + _END_GRACE` seconds.
_END_GRACE = 1.0
# What a live run's end waits, at most, while no export has come back yet
# (a collector that accepts connections and never answers): a healthy one
# on the same network answers one batch well within it.
_FIRST_ANSWER = 1.0
# What a live run's end waits for its spans, at most, with the default export timeout.
LIVE_END_WAIT = _TIMEOUT + _END_GRACE
# Seconds a batch waits for more rollouts before it leaves (unless it is
# full, or a flush or the run's end comes first): without it a fast run's
# sending thread posts a request per rollout or two, and each post's CPU is
# taken under the run's GIL (benchmarks/overhead.py measures it).
_LINGER = 0.5
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http"
_COMMON_LOGGER = "opentelemetry.exporter.otlp.common"


@dataclass(frozen=True)
class OtelSent:
    """What an exporter sent: rollouts (`traces`), spans, and the spans the
    endpoint did not take (`failed`, with the exporter's last word on why);
    `dropped` of those were never sent (the queue was full, or the end's
    wait ran out)."""

    traces: int
    spans: int
    failed: int = 0
    endpoint: str | None = None
    reason: str | None = None
    dropped: int = 0


@cache
def sdk() -> Any:
    """The OpenTelemetry SDK, imported on first use, and the span processor
    that hands ended spans to the exporter (defined here: its base class is
    the SDK's)."""
    try:
        from opentelemetry import trace as api
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    except ImportError as exc:
        raise Unavailable(f"OpenTelemetry export needs the OpenTelemetry SDK ({exc}); install it: "
                          "pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http") from None

    class Collector(SpanProcessor):
        """Keeps each ended span until the exporter takes the batch."""

        def __init__(self) -> None:
            self.spans: list[Any] = []

        def on_end(self, span: Any) -> None:
            self.spans.append(span)

    class SDK:
        pass

    kit = SDK()
    kit.api, kit.Resource, kit.TracerProvider, kit.Collector = api, Resource, TracerProvider, Collector
    return kit


def otlp_exporter_class() -> Any:
    """The OTLP/HTTP span exporter's class, imported on first use."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise Unavailable(f"OpenTelemetry export needs the OTLP/HTTP exporter ({exc}); install it: "
                          "pip install opentelemetry-exporter-otlp-proto-http") from None
    return OTLPSpanExporter


def _otlp_exporter(endpoint: str, headers: Mapping[str, str] | None, timeout: float) -> Any:
    return otlp_exporter_class()(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout)


def shown(url: str | None) -> str | None:
    """A URL as messages show it: a user name or password in it (basic
    auth some collectors take), each query value (an API key some take
    there) and a fragment replaced by ***."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        host = parts.hostname or ""
        parts = parts._replace(netloc=f"***@{host}" + (f":{parts.port}" if parts.port else ""))
    if parts.query:
        pairs = [p.partition("=") for p in parts.query.split("&")]
        parts = parts._replace(query="&".join(f"{k}={'***' if v else ''}" if eq else "***" for k, eq, v in pairs))
    if parts.fragment:
        parts = parts._replace(fragment="***")
    return urlunsplit(parts)


def _secrets(url: str | None, headers: Mapping[str, str] | None) -> tuple[str, ...]:
    """What must never reach a message: the URL's user name, password, query
    values and fragment, every header value, each as given and
    percent-decoded (and the user and password as basic auth sends them),
    longest first."""
    found: set[str] = set()
    if url is not None:
        parts = urlsplit(url)
        found.update(v for v in (parts.username, parts.password, parts.fragment) if v)
        if parts.username is not None or parts.password is not None:  # as basic auth sends them
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            found.add(base64.b64encode(pair.encode()).decode())
        found.update(v for _, v in parse_qsl(parts.query, keep_blank_values=True) if v)
        found.update(p.partition("=")[2] for p in parts.query.split("&") if p.partition("=")[2])
    found.update(str(v) for v in (headers or {}).values() if str(v))
    found.update({unquote(v) for v in found} | {quote(v, safe="") for v in found})
    return tuple(sorted(found, key=len, reverse=True))


def _scrubbed(text: str | None, secrets: tuple[str, ...]) -> str | None:
    if text is None:
        return None
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def endpoint_url(endpoint: Any, owner: str) -> str:
    """An OTLP/HTTP traces URL; a bare base URL gets the signal path
    `/v1/traces` as the OTLP specification adds it to a base endpoint."""
    if not isinstance(endpoint, str):
        raise UsageError(f"{owner}: endpoint must be the OTLP/HTTP URL of a trace collector, e.g. "
                         f"'http://127.0.0.1:6006/v1/traces' (Phoenix), got {type(endpoint).__name__}")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{owner}: endpoint {shown(endpoint)!r} is not an http(s) URL; give the collector's "
                         "OTLP/HTTP traces URL, e.g. 'http://127.0.0.1:6006/v1/traces' (Phoenix)")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


class _LastWord(logging.Handler):
    """The OTLP exporter says why an export failed only in its log; this
    keeps the last thing it said from one exporter's sending thread, for
    the error or warning rollkit raises (and keeps the exporter's retry
    chatter off stderr)."""

    def __init__(self, thread_name: str) -> None:
        super().__init__(logging.WARNING)
        self.thread_name = thread_name
        self.said: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.threadName == self.thread_name:
            self.said = record.getMessage()


class _Masked(logging.Filter):
    """The OTLP exporter's own log records from one exporter's sending
    thread, with the credentials masked before any handler sees them (the
    user's logging too): its messages hold the endpoint's URL, query and all."""

    def __init__(self, thread_name: str, secrets: tuple[str, ...]) -> None:
        super().__init__()
        self.thread_name, self.secrets = thread_name, secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if record.threadName == self.thread_name and self.secrets:
            record.msg, record.args = _scrubbed(record.getMessage(), self.secrets), None
            if record.exc_info:
                record.exc_text = _scrubbed(logging.Formatter().formatException(record.exc_info), self.secrets)
                record.exc_info = None
        return True


def _exporter_loggers() -> list[logging.Logger]:
    """The OTLP exporter's loggers, each module's own (a logger's filters
    see only the records made on it, not its children's)."""
    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith((_EXPORTER_LOGGER, _COMMON_LOGGER))]
    return [logging.getLogger(n) for n in sorted({*names, _EXPORTER_LOGGER, _COMMON_LOGGER})]


def _why(error: BaseException) -> str:
    """What a failed connection says, short: the system's own words where
    the HTTP client's message holds them ("[Errno 111] Connection refused")."""
    text = str(error)
    errno = re.findall(r"\[Errno -?\d+\] [^'\")\]]+", text)
    return errno[-1] if errno else f"{type(error).__name__}: {text[:300]}"


_STOP = object()  # the sending thread's last job


class _NotSent(Exception):
    """A batch a failing batch export does not try."""


class OtelExporter:
    """Sends rollouts as OpenTelemetry traces (`send(trace)`) from one
    background thread, the way the SDK's batch span processor does: a
    rollout is queued (at most `_QUEUE_ROLLOUTS`; past that it is dropped
    and counted, never waited for), the thread makes its spans and sends
    what is queued in batches of up to `_BATCH_SPANS` spans, each export
    given `timeout` seconds, retries included. `flush(wait)` and
    `close(wait)` wait for the queue to drain, at most `wait` seconds
    (None: until it has); what is left then is dropped and counted; they
    return what was sent (`OtelSent`).

    - `endpoint`: the collector's OTLP/HTTP traces URL (Phoenix:
      `http://HOST:6006/v1/traces`); or `span_exporter=`, any SDK span
      exporter (e.g. `InMemorySpanExporter`), instead.
    - `headers`: sent with each request (an API key, a project header).
      Their values, and the URL's user name, password and query values,
      never appear in a message.
    - `service_name`: the resource's `service.name`; `resource_attributes`
      adds more (e.g. `{"openinference.project.name": "evals"}` for a
      Phoenix project).
    - `content=True` adds the messages, system instructions and tool
      arguments and results as the conventions' content attributes.
    - `provider`: `gen_ai.provider.name`; by default the trace's
      `agent["provider"]`, else "openai" for an OpenAI-protocol model (one
      with a `base_url`, as the conventions name whatever speaks OpenAI's
      API), else "rollkit" (a model in this process).
    - `timeout`: seconds per export, retries included (5)."""

    def __init__(self, endpoint: str | None = None, *, headers: Mapping[str, str] | None = None,
                 service_name: str = "rollkit", resource_attributes: Mapping[str, Any] | None = None,
                 content: bool = False, provider: str | None = None, timeout: float = _TIMEOUT,
                 span_exporter: Any = None) -> None:
        if (endpoint is None) == (span_exporter is None):
            raise UsageError("OtelExporter: give the collector's endpoint= (an OTLP/HTTP URL) or a span_exporter=, "
                             "exactly one")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise UsageError(f"OtelExporter: timeout must be a number of seconds > 0, got {timeout!r}")
        self.endpoint = None if endpoint is None else endpoint_url(endpoint, "OtelExporter")
        self.timeout = float(timeout)
        self._secrets = _secrets(self.endpoint, headers)
        kit = sdk()
        # A span exporter the caller gave stays theirs: flushed into, never shut down.
        self._owns_exporter = span_exporter is None
        self._exporter = span_exporter if span_exporter is not None else _otlp_exporter(self.endpoint, headers, timeout)
        resource = kit.Resource.create({"service.name": service_name, **dict(resource_attributes or {})})
        self._provider = kit.TracerProvider(resource=resource, shutdown_on_exit=False)
        self._collector = kit.Collector()
        self._provider.add_span_processor(self._collector)
        self._tracer = self._provider.get_tracer("rollkit", schema_url=SCHEMA_URL)
        self._api = kit.api
        self._resource_pb: bytes | None = None
        self.content = bool(content)
        self.provider = provider
        self._thread_name = f"rollkit-otel-{id(self):x}"
        self._said = _LastWord(self._thread_name)
        for name in (_EXPORTER_LOGGER, _COMMON_LOGGER):
            logging.getLogger(name).addHandler(self._said)
        self._masked, self._masking = _Masked(self._thread_name, self._secrets), _exporter_loggers()
        for logger in self._masking:
            logger.addFilter(self._masked)
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._room = threading.Condition()
        self._queued = self._in_flight = 0  # spans of the rollouts queued, of the batch being sent
        self._queued_rollouts = 0
        self._thread: threading.Thread | None = None
        self.traces = self.spans = self.failed = self.dropped = 0
        # Each wait that runs out starts an epoch: what was queued or being
        # sent before it is counted as dropped then, and not again.
        self._epoch = 0
        self._stuck = False  # the last wait ran out (the thread may be in an export still)
        self._last_failed = False  # the last export that ended was not taken
        self._answered = False  # an export has ended (taken or not): the collector answers
        self._waited: float | None = None  # what the last flush waited at most
        # A batch export (`write`) sends nothing more once a batch failed: the rest count as failed.
        self.fail_fast = False
        self._closed = False

    # ---- the caller's side ----------------------------------------------------
    def send(self, trace: Trace, *, wait: bool = False) -> int:
        """Queue one rollout for sending; returns how many spans it makes.
        Never waits unless `wait=True` (a batch export: it waits for room
        in the queue, so memory stays bounded); a full queue drops it."""
        if self._closed:
            raise UsageError("OtelExporter: this exporter is closed; make a new one")
        count = span_count(trace)
        with self._room:
            self.traces += 1
            self.spans += count
            if self._queued_rollouts >= _QUEUE_ROLLOUTS:
                if not wait:
                    self.dropped += count
                    return count
                self._room.wait_for(lambda: self._queued_rollouts < _QUEUE_ROLLOUTS)
            self._queued_rollouts += 1
            self._queued += count
            epoch = self._epoch
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
            self._thread.start()
        self._jobs.put((trace, count, epoch))
        return count

    def flush(self, wait: float | None = None) -> OtelSent:
        """Wait until what is queued is sent, at most `wait` seconds (None:
        as long as that takes). When a wait is given: not at all if the
        last export was not taken (a dead collector costs nothing more), and
        at most `_FIRST_ANSWER` seconds if no export has ended yet (a silent
        one costs a short run about that). What is still queued or being
        sent then is dropped and counted. What was sent so far."""
        if self._thread is not None:
            drained = threading.Event()
            self._jobs.put(drained)
            if wait is not None:
                wait = 0 if self._last_failed else wait if self._answered else min(wait, _FIRST_ANSWER)
            self._waited = wait
            self._stuck = not drained.wait(wait)
            if self._stuck:
                with self._room:
                    self._epoch += 1
                    self.dropped += self._queued + self._in_flight
                    self._queued = self._in_flight = 0
        return self.sent

    @property
    def waited(self) -> float:
        """What the last flush waited at most, in seconds (0: none yet, or it did not wait)."""
        return self._waited or 0

    @property
    def sent(self) -> OtelSent:
        with self._room:
            failed = self.failed + self.dropped
            return OtelSent(self.traces, self.spans, failed, shown(self.endpoint),
                            _scrubbed(self._said.said, self._secrets) if failed else None, self.dropped)

    def close(self, wait: float | None = None) -> OtelSent:
        """Send what is queued (waiting at most `wait` seconds, see
        `flush`), then stop the sending thread and shut the OTLP exporter
        down (a `span_exporter=` given is left open: it is the caller's)."""
        if self._closed:
            return self.sent
        try:
            sent = self.flush(wait)
        finally:
            self._closed = True
            if self._thread is not None:
                self._jobs.put(_STOP)  # the thread lets go of the exporter's log when it ends
                if not self._stuck:
                    self._thread.join()
            else:
                self._let_go_of_the_log()
            self._provider.shutdown()
            if self._owns_exporter:
                self._exporter.shutdown()  # also cuts short the retries of an export still running
        return sent

    def _let_go_of_the_log(self) -> None:
        for name in (_EXPORTER_LOGGER, _COMMON_LOGGER):
            logging.getLogger(name).removeHandler(self._said)
        for logger in self._masking:
            logger.removeFilter(self._masked)

    def __repr__(self) -> str:
        where = shown(self.endpoint) or type(self._exporter).__name__
        return f"OtelExporter({where!r}, sent {self.traces} rollouts, {self.spans} spans)"

    # ---- the sending thread --------------------------------------------------------
    def _run(self) -> None:
        later: Any = None
        while True:
            job, later = (later, None) if later is not None else (self._jobs.get(), None)
            if job is _STOP:
                # Here, not in close: an export still running when close gave
                # up waiting logs its failure to this handler, not to stderr.
                self._let_go_of_the_log()
                return
            if isinstance(job, threading.Event):
                job.set()
                continue
            batch, spans = [job], job[1]
            until = time.monotonic() + _LINGER
            while spans < _BATCH_SPANS:  # what is queued by then joins the batch
                try:
                    job = self._jobs.get(timeout=max(0.0, until - time.monotonic()))
                except queue.Empty:
                    break
                if not isinstance(job, tuple):
                    later = job
                    break
                batch.append(job)
                spans += job[1]
            self._send(batch)

    def _send(self, batch: list[tuple[Trace, int, int]]) -> None:
        with self._room:
            self._queued_rollouts -= len(batch)
            self._room.notify_all()
            epoch = self._epoch
            batch = [job for job in batch if job[2] == epoch]  # the others were counted as dropped
            spans = sum(job[1] for job in batch)
            if not batch:
                return
            self._queued -= spans
            self._in_flight = spans
        ok = False
        try:
            if self.fail_fast and self.failed:
                raise _NotSent
            ok = self._export([trace for trace, _, _ in batch])
        except _NotSent:
            pass
        except Exception as exc:  # noqa: BLE001  whatever the exporter raises: its batch is lost, and why is said
            self._said.said = f"{type(exc).__name__}: {exc}"
        with self._room:
            self._last_failed = not ok
            self._answered = True
            if epoch == self._epoch:
                self._in_flight = 0
                if not ok:
                    self.failed += spans


    def _export(self, traces: list[Trace]) -> bool:
        """Send the batch's spans; whether the endpoint took them. To an
        endpoint each rollout's spans are encoded straight into OTLP
        protobuf as soon as they are made (the batch then holds bytes, not
        span objects the garbage collector would walk) and posted by the
        OTLP exporter's own HTTP client (its retries, backoff, headers,
        compression and log); a `span_exporter=` gets SDK spans."""
        client = getattr(self._exporter, "_client", None) if self._owns_exporter else None
        if client is None or not callable(getattr(client, "export", None)):
            result = self._exporter.export(self._sdk_spans([_Spans(self, trace).emit() for trace in traces]))
            return getattr(result, "name", str(result)) == "SUCCESS"
        spans = b"".join(_rollout_spans(_Spans(self, trace).emit()) for trace in traces)
        answer = client.export(_otlp_request(self._resource(), spans))
        said, error = self._said.said, getattr(answer, "error", None)
        if not answer.success and error is not None and said is not None and "max retries" in said:
            # Its last word ("due to timeout, max retries or shutdown") hides why: the last try's error says it.
            self._said.said = f"{said.rstrip('.')}; the last try: {_why(error)}"
        return bool(answer.success)

    def _sdk_spans(self, rollouts: list[list[_Span]]) -> list[Any]:
        """The SDK's spans of the batch, made through this exporter's tracer."""
        api, tracer = self._api, self._tracer
        for spans in rollouts:
            made: dict[int, Any] = {}
            for span in spans:
                context = None if span.parent is None else api.set_span_in_context(made[id(span.parent)])
                opened = tracer.start_span(span.name, context=context, kind=getattr(api.SpanKind, span.kind),
                                           attributes=span.attributes, start_time=span.start)
                if span.status is not None:
                    opened.set_status(api.Status(api.StatusCode.ERROR, span.status))
                opened.end(end_time=span.end)
                made[id(span)] = opened
        spans, self._collector.spans = self._collector.spans, []
        return spans

    def _resource(self) -> bytes:
        if self._resource_pb is None:
            self._resource_pb = _resource(self._provider.resource)
        return self._resource_pb


class LiveSink(RunSink):
    """A run's watcher (a rollkit.runs.live.RunSink) that queues each
    finished rollout on an `OtelExporter`; the other events carry nothing
    to send (`line`, the trace's JSON line, is not needed here). Given a URL
    it makes its exporter when the run begins and closes it at the end (the
    span sender process runs it so); given an `OtelExporter` it flushes it
    at the end and leaves it open. The end waits for what is queued at most the
    exporter's timeout plus `_END_GRACE` seconds (6 s by default), at most
    `_FIRST_ANSWER` (1 s) while no export has come back, and not at all
    when the collector's last export failed; spans not taken
    (refused, timed out, dropped) are one warning then, never the run's
    error."""

    def __init__(self, otel: OtelExporter | str) -> None:
        self.given = otel
        self.exporter: OtelExporter | None = otel if isinstance(otel, OtelExporter) else None

    def begin(self, info: dict[str, Any]) -> None:
        if self.exporter is None:
            self.exporter = OtelExporter(self.given)  # type: ignore[arg-type]

    def finished(self, trace: Trace, line: bytes | None = None) -> None:
        if self.exporter is not None:
            self.exporter.send(trace)

    def end(self, status: str) -> None:
        exporter = self.exporter
        if exporter is None:
            return
        wait = exporter.timeout + _END_GRACE
        sent = exporter.close(wait) if exporter is not self.given else exporter.flush(wait)
        if sent.failed:
            warn_not_taken(sent, exporter.waited)


def warn_not_taken(sent: OtelSent, waited: float, more: str = "") -> None:
    """A live run's one warning at its end: the spans not taken, by whom (credentials masked) and why."""
    dropped = f"; {sent.dropped} of them never sent (the queue was full or the end's wait of " \
              f"{waited:g} s ran out)" if sent.dropped else ""
    warnings.warn(f"rollkit: {sent.failed} of {sent.spans} spans were not taken by "
                  f"{sent.endpoint or 'the span exporter'} ({sent.reason or 'no reason given'}){dropped}{more}",
                  stacklevel=3)


def span_count(trace: Trace) -> int:
    """How many spans `_Spans(...).emit()` makes of `trace`: the rollout's,
    one a phase, one a model call, one a tool call that was answered."""
    answered = {m.tool_call_id for m in trace.messages if isinstance(m, ToolMessage)}
    tools = sum(1 for call in trace.model_calls if call.committed and call.reply is not None
                for tool_call in call.reply.tool_calls if tool_call.id in answered)
    return 1 + len(trace.phases) + len(trace.model_calls) + tools


# ---- one rollout's spans ----------------------------------------------------------


_PHASE_ORDER = {phase: i for i, phase in enumerate(PHASES)}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class _Span:
    """One span as rollkit makes it: plain data, turned into OTLP protobuf
    (or SDK spans, for a `span_exporter=`) by the sending thread. Times in
    ns; `status` the error's description, None when the span did not fail."""

    __slots__ = ("name", "kind", "parent", "start", "end", "attributes", "status", "id")

    def __init__(self, name: str, kind: str, parent: _Span | None, start: int, attributes: dict[str, Any]) -> None:
        self.name, self.kind, self.parent, self.start, self.end = name, kind, parent, start, start
        self.attributes, self.status, self.id = attributes, None, b""


def _set(attributes: dict[str, Any], key: str, value: Any) -> None:
    """OTel attributes hold no None: a missing value is left out, never 0."""
    if value is not None:
        attributes[key] = value


class _Spans:
    """The spans of one trace, made through the exporter's tracer at the
    trace's own times."""

    def __init__(self, exporter: OtelExporter, trace: Trace) -> None:
        self.exporter = exporter
        self.trace = trace
        self.model = str(trace.agent.get("model") or "unknown")
        self.provider = self._provider()
        self.made: list[_Span] = []

    def emit(self) -> list[_Span]:
        trace = self.trace
        start, end = _bounds(trace)
        name = str(trace.agent.get("name") or self.model)
        error, outcome = trace.error, trace.outcome
        root = self._open(f"invoke_agent {name}", None, start, self._root_attributes(name, outcome.kind), "INTERNAL")
        if error is not None:
            self._fail(root, error.type, error.message)
        elif outcome.kind == "aborted":  # cut short with no error of its own (Ctrl-C, a cancelled run)
            self._fail(root, "aborted", f"the rollout was aborted in {outcome.phase or 'between segments'}")
        under = self._phases(root, end)
        tool_results = {m.tool_call_id: m for m in trace.messages if isinstance(m, ToolMessage)}
        calls = trace.model_calls
        for i, call in enumerate(calls):
            self._chat(under, call)
            if call.committed and call.reply is not None and call.reply.tool_calls:
                self._tools(under, call, _tool_window_end(trace, calls, i, end), tool_results)
        root.end = _ns(end)
        return self.made

    def _open(self, name: str, parent: _Span | None, start: float, attributes: dict[str, Any], kind: str) -> _Span:
        span = _Span(name, kind, parent, _ns(start), attributes)
        self.made.append(span)
        return span

    def _fail(self, span: _Span, error_type: str, message: str) -> None:
        span.attributes["error.type"] = error_type
        span.status = f"{error_type}: {message}"

    def _provider(self) -> str:
        agent = self.trace.agent
        if self.exporter.provider:
            return self.exporter.provider
        if agent.get("provider"):
            return str(agent["provider"])
        return "openai" if agent.get("base_url") else "rollkit"

    def _root_attributes(self, name: str, outcome: str) -> dict[str, Any]:
        trace = self.trace
        a: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": self.provider,
            "gen_ai.agent.name": name, "gen_ai.request.model": self.model, "gen_ai.conversation.id": trace.id,
            "rollkit.trace.id": trace.id, "rollkit.task.key": trace.task.key,
            "rollkit.task.type": trace.task.type, "rollkit.outcome": outcome,
            "rollkit.turns": trace.num_turns, "openinference.span.kind": "AGENT",
        }
        inputs = [c.usage.input_tokens for c in trace.model_calls if c.usage.input_tokens is not None]
        outputs = [c.usage.output_tokens for c in trace.model_calls if c.usage.output_tokens is not None]
        _set(a, "gen_ai.usage.input_tokens", sum(inputs) if inputs else None)
        _set(a, "gen_ai.usage.output_tokens", sum(outputs) if outputs else None)
        # Every token the rollout's calls were billed for, as its spans add up
        # (the last turn's prompt plus reply is rollkit.final_sequence_tokens);
        # both left out, never a partial sum, when a turn did not report its usage.
        if trace.num_total_tokens is not None:
            a["rollkit.total_tokens"] = sum(inputs) + sum(outputs)
            a["rollkit.final_sequence_tokens"] = trace.num_total_tokens
        _set(a, "rollkit.ok", trace.ok)
        _set(a, "rollkit.stop_condition", trace.stop_condition)
        _set(a, "rollkit.reward", trace.scored_reward)
        _set(a, "rollkit.cost_usd", trace.cost_usd)
        _set(a, "rollkit.aborted_in", trace.aborted_in)
        for key in ("rollout_id", "run_id", "example_id", "repeat"):
            _set(a, f"rollkit.{key}", trace.info.get(key))
        for kind, values in (("reward", trace.rewards), ("metric", trace.metrics)):
            for signal, value in values.items():
                _set(a, f"rollkit.{kind}.{signal}", value)
        return a

    def _phases(self, inside: _Span, end: float) -> _Span:
        """One span per phase, under the root; the context model calls and
        tools go under (the agent phase's, or the root's when a trace has
        no agent phase: an import, a rollout cut before it)."""
        trace = self.trace
        failed_in: dict[str | None, Any] = {}
        for error in trace.errors:
            failed_in.setdefault(error.phase, error)
        under = inside
        for phase in sorted(trace.phases, key=lambda p: (_PHASE_ORDER.get(p, len(PHASES)), p)):
            span = trace.phases[phase]
            attributes: dict[str, Any] = {"rollkit.phase": phase}
            if span.end is None:
                attributes["rollkit.phase.unfinished"] = True
            opened = self._open(phase, inside, span.start, attributes, "INTERNAL")
            if phase in failed_in:
                self._fail(opened, failed_in[phase].type, failed_in[phase].message)
            opened.end = _ns(span.end if span.end is not None else max(end, span.start))
            if phase == "agent":
                under = opened
        return under

    def _chat(self, under: _Span, call: ModelCall) -> None:
        a: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model, "gen_ai.conversation.id": self.trace.id,
            "rollkit.call.index": call.index, "rollkit.call.committed": call.committed, "rollkit.segment": call.segment,
        }
        usage = call.usage
        _set(a, "gen_ai.usage.input_tokens", usage.input_tokens)
        _set(a, "gen_ai.usage.output_tokens", usage.output_tokens)
        _set(a, "gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
        _set(a, "gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)
        _set(a, "gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens)
        if call.finish_reason is not None:
            a["gen_ai.response.finish_reasons"] = (call.finish_reason,)
        if call.committed:
            a["gen_ai.response.model"] = call.response_model or self.model
        _set(a, "gen_ai.response.id", call.response_id)
        _set(a, "rollkit.dialect", call.dialect)
        _set(a, "rollkit.cost_usd", call.cost_usd)
        a.update(_openinference_llm(self.model, call))
        _set(a, "rollkit.timing_issue", call.timing_issue)
        if self.exporter.content:
            a.update(_call_content(self.trace, call))
        span = self._open(f"chat {self.model}", under, call.start, a, "CLIENT")
        if call.error is not None:
            self._fail(span, call.error.type, call.error.message)
        span.end = _ns(call.end)

    def _tools(self, under: _Span, call: ModelCall, until: float, results: dict[str, ToolMessage]) -> None:
        for tool_call in call.reply.tool_calls:  # type: ignore[union-attr]
            result = results.get(tool_call.id)
            if result is None:
                continue  # asked for, never run (the rollout stopped first): no execution to show
            a: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool_call.name,
                "gen_ai.tool.call.id": tool_call.id, "gen_ai.tool.type": "function",
                "rollkit.timing": "inferred", "rollkit.call.index": call.index,
            }
            if self.exporter.content:
                a["gen_ai.tool.call.arguments"] = tool_call.arguments
                a["gen_ai.tool.call.result"] = result.content
            self._open(f"execute_tool {tool_call.name}", under, call.end, a, "INTERNAL").end = _ns(until)


def _openinference_llm(model: str, call: ModelCall) -> dict[str, Any]:
    """A chat span's usage and cost as OpenInference names them, which
    Phoenix reads (it derives its token counts from the GenAI names too, but
    not a cost: it prices an LLM span's tokens by its own table, found by
    `llm.model_name`): `llm.token_count.*` and rollkit's own price as
    `llm.cost.total`, on the call's span only (a tool summing a trace's
    spans counts each call once)."""
    usage = call.usage
    a: dict[str, Any] = {"openinference.span.kind": "LLM", "llm.model_name": model}
    _set(a, "llm.token_count.prompt", usage.input_tokens)
    _set(a, "llm.token_count.completion", usage.output_tokens)
    if usage.input_tokens is not None or usage.output_tokens is not None:
        a["llm.token_count.total"] = (usage.input_tokens or 0) + (usage.output_tokens or 0)
    _set(a, "llm.token_count.prompt_details.cache_read", usage.cache_read_tokens)
    _set(a, "llm.token_count.prompt_details.cache_write", usage.cache_write_tokens)
    _set(a, "llm.token_count.completion_details.reasoning", usage.reasoning_tokens)
    _set(a, "llm.cost.total", call.cost_usd)
    return a


# ---- OTLP protobuf, written straight from rollkit's spans ----------------------------
# The OTLP trace request in protobuf's wire format, written by hand: the
# SDK's span objects and its encoder cost the sending thread (and so the
# run, through the GIL) about 1 ms a rollout; this writes the same message
# (field numbers of opentelemetry-proto's trace.proto and common.proto).


_BYTES = tuple(bytes((i,)) for i in range(256))


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _BYTES[n]
    if n < 0:
        n += 1 << 64  # an int64 as protobuf writes it
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (`tag` is field number << 3 | 2, one byte)."""
    size = len(payload)
    return _BYTES[tag] + (_BYTES[size] if size < 0x80 else _varint(size)) + payload


def _text(tag: int, text: str) -> bytes:
    return _field(tag, text.encode("utf-8", "surrogatepass"))


@cache
def _key(key: str) -> bytes:
    return _text(0x0A, key)  # KeyValue.key


def _any(value: Any) -> bytes | None:
    """An attribute value as an encoded AnyValue; None for a type OTel
    attributes do not hold (the SDK drops those too)."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _text(0x0A, value)
    if isinstance(value, int):
        return b"\x18" + _varint(value) if -(1 << 63) <= value < 1 << 63 else None
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    if isinstance(value, (list, tuple)):
        items = [_any(v) for v in value]
        return _field(0x2A, b"".join(_field(0x0A, v) for v in items if v is not None))  # ArrayValue.values
    return None


# Encoded attributes (KeyValue fields) by (tag, key, type, value): most of
# a run's attributes repeat from span to span (the operation, provider and
# model, a rollout's id on each of its spans, the flags), and looking one
# up costs a tenth of encoding it. Emptied when full, so the values seen
# once (ids, times, rewards) cannot grow it without bound.
_PAIRS: dict[tuple[int, str, type, Any], bytes] = {}
_PAIRS_MOST = 8192


def _attributes(tag: int, attributes: Mapping[str, Any]) -> bytes:
    out = []
    pairs = _PAIRS
    for key, value in attributes.items():
        kind = type(value)
        if kind is list or kind is tuple:
            value = tuple(value)
            kind = str if all(type(v) is str for v in value) else float
        if kind is float:  # rarely repeated, and -0.0 would find 0.0's bytes: encoded each time
            encoded = _any(value)
            if encoded is not None:
                out.append(_field(tag, _key(key) + _field(0x12, encoded)))
            continue
        known = (tag, key, kind, value)
        pair = pairs.get(known)
        if pair is None:
            encoded = _any(value)
            if encoded is None:
                continue
            pair = _field(tag, _key(key) + _field(0x12, encoded))
            if len(pairs) >= _PAIRS_MOST:
                pairs.clear()
            pairs[known] = pair
        out.append(pair)
    return b"".join(out)


def _resource(resource: Any) -> bytes:
    """A ResourceSpans' resource and schema URL fields, from the SDK's Resource."""
    return _field(0x0A, _attributes(0x0A, resource.attributes)) + \
        (_text(0x1A, resource.schema_url) if resource.schema_url else b"")


def _span(span: _Span, trace_id: bytes) -> bytes:
    status = b"" if span.status is None else _text(0x12, span.status) + b"\x18\x02"  # STATUS_CODE_ERROR
    return b"".join((
        _field(0x0A, trace_id), _field(0x12, span.id),
        _field(0x22, span.parent.id) if span.parent is not None else b"",
        _text(0x2A, span.name), b"\x30", _varint(_KINDS[span.kind]),
        b"\x39", struct.pack("<Q", span.start), b"\x41", struct.pack("<Q", span.end),
        _attributes(0x4A, span.attributes), _field(0x7A, status),
        b"\x85\x01", struct.pack("<I", 0x100),  # flags: the parent context is known to be local
    ))


_KINDS = {"INTERNAL": 1, "CLIENT": 3}


def _rollout_spans(made: list[_Span]) -> bytes:
    """One rollout's spans as ScopeSpans.spans fields: a fresh random trace
    id for the rollout and span id per span, as the SDK's id generator
    makes them."""
    trace_id = random.getrandbits(128).to_bytes(16, "big")
    spans = []
    for span in made:
        span.id = random.getrandbits(64).to_bytes(8, "big")
        spans.append(_field(0x12, _span(span, trace_id)))
    return b"".join(spans)


def _otlp_request(resource: bytes, spans: bytes) -> bytes:
    """One OTLP/HTTP export request of encoded spans (`_rollout_spans`), serialized."""
    scope = _field(0x0A, _text(0x0A, "rollkit")) + spans + _text(0x1A, SCHEMA_URL)
    return _field(0x0A, resource + _field(0x12, scope))  # ExportTraceServiceRequest.resource_spans


def _bounds(trace: Trace) -> tuple[float, float]:
    """When the rollout started and ended, from its phases and calls."""
    starts = [s.start for s in trace.phases.values()] + [c.start for c in trace.model_calls]
    ends = [s.end for s in trace.phases.values() if s.end is not None] + [c.end for c in trace.model_calls]
    if not starts:
        when = trace.error.time if trace.error is not None else time.time()
        return when, when
    start = min(starts)
    return start, max([start, *ends])


def _tool_window_end(trace: Trace, calls: list[ModelCall], i: int, end: float) -> float:
    """Where the tools a call asked for ended at the latest: the next model
    call's start, else the end of the call's segment, else the rollout's."""
    call = calls[i]
    for later in calls[i + 1:]:
        if later.start >= call.end:
            return later.start
    segment = next((s for s in trace.segments if s.index == call.segment), None)
    if segment is not None and segment.end is not None and segment.end >= call.end:
        return segment.end
    return max(end, call.end)


def _parts(message: Message) -> list[dict[str, Any]]:
    """A message's parts in the conventions' message schema."""
    parts: list[dict[str, Any]] = []
    if isinstance(message, AssistantMessage):
        if message.reasoning:
            parts.append({"type": "reasoning", "content": message.reasoning})
        if message.content:
            parts.append({"type": "text", "content": message.content})
        for call in message.tool_calls:
            try:
                arguments: Any = call.args()
            except ValueError:
                arguments = call.arguments
            parts.append({"type": "tool_call", "id": call.id, "name": call.name, "arguments": arguments})
        return parts
    if isinstance(message, ToolMessage):
        return [{"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}]
    return [{"type": "text", "content": text_of(message)}]


def _call_content(trace: Trace, call: ModelCall) -> dict[str, str]:
    """`gen_ai.system_instructions`, `gen_ai.input.messages` and
    `gen_ai.output.messages` of one call, as the conventions' JSON."""
    out: dict[str, str] = {}
    request = trace.request_of(call) or []
    system = [p for m in request if isinstance(m, SystemMessage) for p in _parts(m)]
    if system:
        out["gen_ai.system_instructions"] = json.dumps(system)
    inputs = [{"role": m.role, "parts": _parts(m)} for m in request if not isinstance(m, SystemMessage)]
    out["gen_ai.input.messages"] = json.dumps(inputs)
    if call.reply is not None:
        reply = {"role": "assistant", "parts": _parts(call.reply)}
        if call.finish_reason is not None:
            reply["finish_reason"] = call.finish_reason
        out["gen_ai.output.messages"] = json.dumps([reply])
    return out


# ---- rk.export(..., format="otel") ---------------------------------------------------


def write(source: Any, path: Path | None, *, endpoint: Any = None, headers: Mapping[str, str] | None = None,
          service_name: str = "rollkit", resource_attributes: Mapping[str, Any] | None = None,
          content: bool = False, provider: str | None = None, timeout: float = _TIMEOUT,
          span_exporter: Any = None) -> OtelSent:
    """Send every rollout of `source` as one OTel trace (options: see
    `OtelExporter`); returns what was sent. Raises `Unavailable` naming the
    endpoint when it did not take them: the first batch it does not take
    ends the export (within `timeout` seconds of it, for a dead or silent
    collector), the rest unsent."""
    if path is not None:
        raise UsageError(f"rk.export(format='otel') sends spans to a collector and writes no file; drop the path "
                         f"{str(path)!r} and give endpoint='http://HOST:PORT/v1/traces'")
    if endpoint is None and span_exporter is None:
        raise UsageError("rk.export(format='otel') needs endpoint=, the collector's OTLP/HTTP traces URL "
                         "(e.g. 'http://127.0.0.1:6006/v1/traces' for Phoenix)")
    if endpoint is not None:
        endpoint = endpoint_url(endpoint, "rk.export(format='otel')")
    exporter = OtelExporter(endpoint, headers=headers, service_name=service_name,
                            resource_attributes=resource_attributes, content=content, provider=provider,
                            timeout=timeout, span_exporter=span_exporter)
    exporter.fail_fast = True
    try:
        for trace in source.traces():
            exporter.send(trace, wait=True)
            if exporter.failed:
                break  # the endpoint is not taking spans: say so now, not after retrying every batch
    finally:
        sent = exporter.close()
    if sent.failed:
        raise Unavailable(f"rk.export(format='otel'): {sent.endpoint or 'the span exporter'} did not take "
                          f"{sent.failed} of {sent.spans} spans ({sent.reason or 'no reason given'}); "
                          "is the collector running and is this its OTLP/HTTP traces URL?")
    return sent
