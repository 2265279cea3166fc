"""The interception server: the HTTP face of the session, for agent programs.

A program points its SDK at this server with its rollout's secret as the API
key: `OPENAI_BASE_URL` / `OPENAI_API_KEY` for the OpenAI dialects (chat
completions, Responses), `ANTHROPIC_BASE_URL` / `ANTHROPIC_API_KEY` for
Anthropic Messages, `GOOGLE_GEMINI_BASE_URL` / `GEMINI_API_KEY` for Google's
Gemini API (see rollkit.programs.dialects). Each request is
translated into a `Request`, run through the rollout's `Session.complete`
(limits and stops, interceptors, the model, recording: the same pipeline as
in-process calls, whatever the dialect) and the `Response` is sent back in
the same dialect, as JSON or as server-sent events. The trace records which
dialect each call came in (`ModelCall.dialect`).

What this module owns: the aiohttp server (127.0.0.1, a free port, in the
event loop that runs the rollouts, so it works inside a notebook kernel), the
registry of rollouts by secret (checked in constant time; a missing or wrong
token gets 401 and touches no trace), the wire translation, body-size limits
(413), answering an SDK retry (a request carrying a non-zero
`x-stainless-retry-count`, the openai SDKs' retry header) of the last request,
or of one still running, from that call instead of sampling again (a
deliberate repeat without the header is a new call, even when sent in
parallel), and the status codes of refusals (410 with `x-should-retry:
false`, which the openai SDK does not retry) and failures. A harness that
runs segments (ProgramHarness) opens and ends each one on its registration:
between segments every call gets 409 (a program calling the model while the
user has the turn would spend agent time nobody charges, L9), and calls still
running when a segment ends are cancelled. An upstream 401/403 becomes a 502
(the provider refused the host's credentials, not the program's secret), and
an unexpected server error a JSON 500 that the SDK does not retry. One server serves every rollout of a
loop: `acquire()` starts it with the first rollout and `release()` stops it
with the last, so no port outlives the rollouts that needed it.

`InterceptedHarness` is the plumbing for an in-process harness that talks to
the model through an OpenAI client: it registers and releases, nothing more.

It must not decide anything about the lifecycle: refusals, limits and hooks
are the session's; what a program's exit means is the harness's.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import socket
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic_core import from_json

from ..core.cancellation import finish
from ..core.checks import whole
from ..core.context import RolloutContext
from ..core.errors import ProviderError, Refused, RolloutError
from ..core.harness import Harness
from .dialects import ANTHROPIC, CHAT, DIALECTS, GEMINI, Dialect, Parsed, WireError
from .dialects.gemini import METHODS as GEMINI_METHODS
from .dialects.chat import SDK_OPTIONS, completion_payload, parse_request, wire_message
from .guard import DEFAULT_LIMITS, ConnectionGuard, ServerLimits

if TYPE_CHECKING:
    from ..core.session import Session

__all__ = [
    "InterceptionServer", "InterceptedHarness", "Registration", "acquire", "release", "DEFAULT_MAX_BODY",
    "ROUTES", "SDK_OPTIONS", "parse_request", "completion_payload", "wire_message",
]

DEFAULT_MAX_BODY = 32 * 1024 * 1024
ROUTES = ", ".join([*(f"POST {d.path}" for d in DIALECTS if d is not GEMINI), f"POST {ANTHROPIC.count_path}",
                    "GET /v1/models", *(f"POST /v1beta/models/{{model}}:{m}" for m in GEMINI_METHODS),
                    "GET /v1beta/models"])


class _SegmentEnded(Exception):
    """A call was cancelled because its segment ended."""


@dataclass(eq=False)
class Registration:
    """One rollout as the server knows it. The harness reads `failure` (the
    first error the pipeline raised in the current segment, to report it
    under its own type) and waits on `activity` (set after every answered
    call). `active` is False between segments: calls then get 409. A
    registration starts active unless registered with `active=False`; a
    harness that runs segments calls `begin_segment` and `end_segment`."""

    secret: str = field(repr=False)  # a registration printed in a log must not leak it
    session: Session
    rollout_id: str
    model: str
    failure: BaseException | None = None
    calls: int = 0
    refusals: int = 0
    replays: int = 0
    joins: int = 0
    active: bool = True
    activity: asyncio.Event = field(default_factory=asyncio.Event)
    # The latest call per request body (what an SDK retry joins), and every
    # call still running (what a segment end cancels).
    _inflight: dict[bytes, asyncio.Future] = field(default_factory=dict)
    _running: set[asyncio.Future] = field(default_factory=set)
    # What a dialect keeps for this rollout (the Responses history behind
    # previous_response_id, ...): it goes with the registration.
    memory: dict[str, Any] = field(default_factory=dict)
    _last_key: bytes | None = None
    _last_payload: dict[str, Any] | None = None

    def cancel_inflight(self) -> None:
        """Stop model calls still running for a program that is gone."""
        for task in list(self._running):
            task.cancel()

    def begin_segment(self) -> None:
        """A segment starts: take calls, and forget the last segment's failure."""
        self.failure = None
        self.active = True

    def end_segment(self) -> None:
        """The segment ended: refuse calls until the next one, and cancel the
        calls still running (their answers would reach nobody in time)."""
        self.active = False
        self.cancel_inflight()


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class InterceptionServer:
    """An OpenAI-compatible HTTP server in front of many rollouts' sessions.

    Usually shared through `acquire()`/`release()`; a test or a benchmark may
    also own one: `server = InterceptionServer(); await server.start()`.
    """

    def __init__(self, *, max_body: int = DEFAULT_MAX_BODY, limits: ServerLimits | None = None) -> None:
        whole("InterceptionServer", "max_body", max_body, minimum=1)
        if limits is not None and not isinstance(limits, ServerLimits):
            raise TypeError(f"limits must be a rollkit.programs.guard.ServerLimits, got {type(limits).__name__}")
        self.max_body = max_body
        self.limits = limits or DEFAULT_LIMITS
        self.guard = ConnectionGuard(self.limits)
        self._by_digest: dict[bytes, Registration] = {}
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.AbstractServer | None = None
        self.port: int | None = None

    # ---- lifetime -----------------------------------------------------------
    async def start(self) -> None:
        """Listen on 127.0.0.1 (a free port). A start cut short by a
        cancellation is finished and then stopped (rollkit.core.cancellation):
        left half made, its socket would be closed behind the event loop's
        back, and a later descriptor with the same number never watched."""
        if self._runner is not None:
            return
        await finish(self._start(), undo=lambda _: self.stop())

    async def _start(self) -> None:
        app = web.Application(client_max_size=self.max_body, middlewares=[self._json_errors])
        for dialect in DIALECTS:
            if dialect is not GEMINI:
                app.router.add_post(dialect.path, functools.partial(self._model_call, dialect))
        app.router.add_post(ANTHROPIC.count_path, functools.partial(self._count_tokens, ANTHROPIC))
        app.router.add_get("/v1/models", self._models)
        # Gemini names the model and the method in the path: models/{model}:{method}.
        app.router.add_post(GEMINI.route, self._gemini)
        app.router.add_get(GEMINI.route, self._models)
        app.router.add_get(GEMINI.list_route, self._models)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=self.limits.idle_timeout)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))  # loopback only, any free port
            # Every connection passes the guard (rollkit.programs.guard) before aiohttp's protocol.
            loop = asyncio.get_running_loop()
            self._listener = await loop.create_server(self.guard.protocol(runner.server), sock=sock)
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self.address: tuple[str, int] = sock.getsockname()
        self.port = self.address[1]
        self._runner = runner

    async def stop(self) -> None:
        for registration in list(self._by_digest.values()):
            registration.cancel_inflight()
        self._by_digest.clear()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()  # no new connections; the loop stops watching the socket
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the interception server is not running; await server.start() first")
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What a program's OPENAI_BASE_URL should be."""
        return f"{self.url}/v1"

    # ---- registry -----------------------------------------------------------
    def register(
        self, secret: str, session: Session, *, rollout_id: str = "", model: str = "rollkit", active: bool = True
    ) -> Registration:
        """Serve `session` to whoever presents `secret` as bearer token.
        `active=False`: calls get 409 until `registration.begin_segment()`."""
        if not secret or len(secret) < 16:
            raise ValueError("a rollout secret must be a random string of at least 16 characters")
        digest = _digest(secret)
        if digest in self._by_digest:
            raise ValueError(f"rollout {rollout_id or '?'}: this secret is already registered")
        registration = Registration(secret=secret, session=session, rollout_id=rollout_id, model=model,
                                    active=active)
        self._by_digest[digest] = registration
        return registration

    def unregister(self, secret: str) -> None:
        registration = self._by_digest.pop(_digest(secret), None)
        if registration is not None:
            registration.cancel_inflight()
            self.guard.release(registration)  # its connections would only get 401 from now on

    @property
    def rollouts(self) -> int:
        return len(self._by_digest)

    def _authorize(self, token: str | None) -> Registration | None:
        if not token:
            return None
        # The dict is keyed by a digest, so the lookup reveals nothing about
        # the secret; the final comparison is constant-time.
        registration = self._by_digest.get(_digest(token))
        if registration is None or not hmac.compare_digest(token.encode(), registration.secret.encode()):
            return None
        return registration

    def _caller(self, dialect: Dialect, request: web.Request) -> tuple[Registration | None, web.Response | None]:
        token = dialect.token(request)
        registration = self._authorize(token)
        if registration is None:
            return None, dialect.unauthorized(missing=not token)
        if not self.guard.claim(_peer(request), registration):
            cap = self.guard.share or self.limits.per_rollout
            refusal = dialect.error(
                429,
                f"rollout {registration.rollout_id or '?'} already holds {cap} connections to this server, its "
                "limit; reuse a connection (an SDK client keeps a pool) or close idle ones",
                "too_many_connections",
            )
            refusal.force_close()
            return None, refusal
        return registration, None

    # ---- routes -------------------------------------------------------------
    @web.middleware
    async def _json_errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        peer = _peer(request)
        self.guard.busy(peer)  # a request is in hand: the connection is not idle
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return _shape_of(request).error(404, f"no route {request.method} {request.path}; this server answers {ROUTES}", "not_found")
        except web.HTTPMethodNotAllowed:
            return _shape_of(request).error(405, f"{request.method} is not allowed on {request.path}; this server answers {ROUTES}",
                               "method_not_allowed")
        except web.HTTPException:
            raise
        except Exception as exc:
            # A bug of this server, not of the request: aiohttp would answer a
            # plain-text 500 that the SDK retries, to the same bug.
            return _shape_of(request).error(500, f"the interception server failed: {type(exc).__name__}: {exc}", "server_error")
        finally:
            self.guard.idle(peer)

    async def _models(self, request: web.Request) -> web.Response:
        shape = _shape_of(request)
        registration, refusal = self._caller(shape, request)
        if registration is None:
            return refusal  # type: ignore[return-value]
        if shape is GEMINI and "target" in request.match_info:  # GET /v1beta/models/{model}: that model's entry
            return web.json_response(GEMINI.model_entry(request.match_info["target"]))
        return web.json_response(shape.models_body(registration.model))

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        """`POST /v1beta/models/{model}:{method}`, dispatched on the method."""
        model, method = GEMINI.target(request)
        if method == "countTokens":
            return await self._count_tokens(GEMINI, request)
        if method in ("generateContent", "streamGenerateContent") and model:
            return await self._model_call(GEMINI, request)
        return GEMINI.error(404, f"no route {request.method} {request.path}; this server answers {ROUTES}", "not_found")

    async def _body(self, dialect: Dialect, request: web.Request) -> tuple[Any, bytes, web.Response | None]:
        """The JSON body (and its bytes), or the answer refusing it."""
        if request.content_length is not None and request.content_length > self.max_body:
            return None, b"", _too_large(dialect, self.max_body)
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return None, b"", _too_large(dialect, self.max_body)
        except TimeoutError:
            refusal = dialect.error(408, f"the request body did not arrive within {self.limits.body_timeout}s",
                                    "request_timeout")
            refusal.force_close()
            return None, b"", refusal
        try:
            # pydantic-core's parser: faster than json.loads, and it refuses
            # nesting deeper than 200 levels with a ValueError (a 400) where
            # json.loads would raise RecursionError (a 500).
            return from_json(raw), raw, None
        except ValueError as exc:
            problem = "nests deeper than 200 levels" if "recursion limit" in str(exc) else "is not JSON"
            return None, raw, dialect.error(400, f"the request body {problem}: {exc}", "invalid_request_error")

    async def _count_tokens(self, dialect: Any, request: web.Request) -> web.Response:
        registration, refusal = self._caller(dialect, request)
        if registration is None:
            return refusal  # type: ignore[return-value]
        body, _, refusal = await self._body(dialect, request)
        if refusal is not None:
            return refusal
        try:
            return web.json_response(dialect.count(body, registration.memory))
        except (WireError, ValueError, TypeError) as exc:
            return dialect.error(400, f"malformed count_tokens request: {exc}", "invalid_request_error")

    async def _model_call(self, dialect: Dialect, request: web.Request) -> web.StreamResponse:
        registration, refusal = self._caller(dialect, request)
        if registration is None:
            return refusal  # type: ignore[return-value]
        if not registration.active:
            return _between_segments(dialect, registration)
        body, raw, refusal = await self._body(dialect, request)
        if refusal is not None:
            return refusal
        try:
            parsed = dialect.parse_call(request, body, registration.memory)
        except (WireError, ValueError, TypeError) as exc:
            return dialect.error(400, f"malformed {dialect.title} request: {exc}", "invalid_request_error",
                                 param=getattr(exc, "field", None))
        digest = hashlib.sha256(dialect.name.encode() + b"\0")
        digest.update(raw)  # not concatenated: a body may be megabytes
        key = digest.digest()
        retry = request.headers.get("x-stainless-retry-count", "0").strip() not in ("", "0")
        if retry and key == registration._last_key and registration._last_payload is not None:
            # The SDK lost our answer and asks again: sampling again would
            # commit a second turn for one request.
            registration.replays += 1
            return await _send(dialect, request, registration._last_payload, parsed, self.limits.send_timeout)
        try:
            payload = await self._run(registration, key, dialect, parsed, retry)
        except _SegmentEnded:
            return _between_segments(dialect, registration)
        except Refused as refused:
            registration.refusals += 1
            return dialect.error(
                410,
                f"{refused}: this rollout takes no more model calls; the program should finish",
                "rollout_stopped",
                code=refused.condition,
            )
        except RolloutError as exc:
            return _failure(dialect, exc)
        finally:
            registration.activity.set()
        return await _send(dialect, request, payload, parsed, self.limits.send_timeout)

    async def _run(self, registration: Registration, key: bytes, dialect: Dialect, parsed: Parsed, retry: bool) -> dict[str, Any]:
        pending = registration._inflight.get(key) if retry else None
        if pending is not None:
            # An SDK retry while the first attempt is still running: share it.
            # Only a retry: identical requests sent in parallel on purpose
            # (e.g. sampling n answers) are separate calls.
            registration.joins += 1
            registration.activity.set()
        else:
            pending = asyncio.ensure_future(self._complete(registration, key, dialect, parsed))
            registration._inflight[key] = pending
            registration._running.add(pending)

            def forget(done: asyncio.Future) -> None:
                registration._running.discard(done)
                # A later identical call may have taken the key meanwhile.
                if registration._inflight.get(key) is done:
                    del registration._inflight[key]

            pending.add_done_callback(forget)
        # Shielded: a program that hangs up mid-call must not cancel a turn
        # that the session is committing; its retry picks up the answer.
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if pending.cancelled() and not (task is not None and task.cancelling()):
                raise _SegmentEnded() from None  # cancelled by end_segment, not by the client
            raise

    async def _complete(self, registration: Registration, key: bytes, dialect: Dialect, parsed: Parsed) -> dict[str, Any]:
        try:
            response = await registration.session.complete(parsed.request, dialect=dialect.name)
        except Refused:
            raise
        except Exception as exc:
            if registration.failure is None:
                registration.failure = exc
            raise
        registration.calls += 1
        payload = dialect.payload(
            response, parsed, model=response.model or parsed.request.model or registration.model,
            id=f"{registration.rollout_id}-{registration.calls}", memory=registration.memory,
        )
        registration._last_key, registration._last_payload = key, payload
        return payload


# ---- sharing one server per event loop ----------------------------------------
@dataclass
class _Shared:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    server: InterceptionServer | None = None
    users: int = 0


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared] = weakref.WeakKeyDictionary()


async def acquire() -> InterceptionServer:
    """The running loop's shared server, started if this is its first user.
    Pair every call with `release(server)`."""
    shared = _shared.setdefault(asyncio.get_running_loop(), _Shared())
    async with shared.lock:
        if shared.server is None:
            server = InterceptionServer()
            await server.start()
            shared.server = server
        shared.users += 1
        return shared.server


async def release(server: InterceptionServer) -> None:
    """Drop one use of the shared server; the last one stops it."""
    shared = _shared.get(asyncio.get_running_loop())
    if shared is None or shared.server is not server:
        await server.stop()
        return
    async with shared.lock:
        shared.users -= 1
        if shared.users <= 0:
            shared.users = 0
            try:
                # Finished even if the caller is cancelled: a stop cut in half
                # would leave its port listening with nobody holding it.
                await finish(server.stop())
            finally:
                shared.server = None


# ---- the wire ------------------------------------------------------------------
class InterceptedHarness(Harness):
    """Base for an in-process harness that reaches the model through an
    OpenAI-compatible client (the openai SDK, say) instead of `ctx.complete`.

    `serve` registers the rollout on the loop's shared server and hands its
    URLs out as `ctx.services["openai"]` (the OpenAI dialects' base URL, ending
    in /v1), `ctx.services["anthropic"]` (Anthropic's, without /v1) and
    `ctx.services["gemini"]` (Google's, the same root; the SDKs add /v1beta);
    the client's API key is `ctx.secret`.
    `cleanup` unregisters and releases the server. Subclasses write `segment`.
    `served_model` is the model name the server reports (default: the
    session's model)."""

    served_model: str | None = None

    async def serve(self, ctx: RolloutContext) -> dict[str, str]:
        server = await acquire()
        try:
            registration = server.register(
                ctx.secret, ctx.session, rollout_id=ctx.id, model=self.served_model or ctx.session.model.name
            )
        except BaseException:
            await release(server)
            raise
        ctx.state[_INTERCEPTED] = (server, registration)
        return {"openai": server.base_url, "anthropic": server.url, "gemini": server.url}

    @staticmethod
    def registration(ctx: RolloutContext) -> Registration:
        """This rollout's registration (its call, refusal and replay counts)."""
        return ctx.state[_INTERCEPTED][1]

    async def cleanup(self, ctx: RolloutContext) -> None:
        entry = ctx.state.pop(_INTERCEPTED, None)
        if entry is not None:
            server, _ = entry
            server.unregister(ctx.secret)
            await release(server)


_INTERCEPTED = "rollkit.interception"


def _shape_of(request: web.Request) -> Dialect:
    """Whose error shape an answer outside a dialect's own route takes."""
    path = request.path
    if path.startswith(("/v1beta/", "/v1alpha/")) or path in ("/v1beta", "/v1alpha") \
            or (path.startswith("/v1/models/") and ":" in path) \
            or "x-goog-api-key" in request.headers or "key" in request.query:
        return GEMINI
    anthropic = path.startswith("/v1/messages") or "anthropic-version" in request.headers \
        or "x-api-key" in request.headers
    return ANTHROPIC if anthropic else CHAT


def _between_segments(dialect: Dialect, registration: Registration) -> web.Response:
    return dialect.error(
        409,
        f"rollout {registration.rollout_id or '?'} is between segments (the program yielded, or its segment "
        "ended): it takes no model calls until the user's next turn arrives on stdin",
        "between_segments",
    )


def _too_large(dialect: Dialect, limit: int) -> web.Response:
    return dialect.error(413, f"the request body is larger than this server's limit of {limit} bytes", "request_too_large")


def _failure(dialect: Dialect, exc: RolloutError) -> web.Response:
    """A failure behind the session (the model, a hook) in the dialect's shape."""
    status = exc.status if isinstance(exc, ProviderError) and exc.status else 502
    kind = "provider_error" if isinstance(exc, ProviderError) else f"{exc.boundary}_error"
    message = f"{type(exc).__name__}: {exc}"
    if status in (401, 403):
        # Passed on unchanged, it would read as "your secret is wrong" to a
        # program whose secret is right.
        message = (f"the model provider refused the host's credentials (HTTP {status}); the rollout's "
                   f"secret is fine, the host must fix its provider key or permissions: {message}")
        status = 502
    return dialect.error(status if status >= 400 else 502, message, kind)


def _peer(request: web.Request) -> Any:
    """The connection a request came on, as the guard knows it."""
    transport = request.transport
    return None if transport is None else transport.get_extra_info("peername")


async def _send(dialect: Dialect, request: web.Request, payload: dict[str, Any], parsed: Parsed,
                timeout: float) -> web.StreamResponse:
    if not parsed.stream:
        return web.json_response(payload)
    content_type = parsed.options.get("content_type", "text/event-stream")  # Gemini's JSON-array stream differs
    response = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-cache"})
    try:
        async with asyncio.timeout(timeout):
            await response.prepare(request)
            # One write: the whole answer is known, and each write is a syscall.
            await response.write(b"".join(dialect.events(payload, parsed)))
            await response.write_eof()
    except TimeoutError:
        # A client that does not read its answer holds a connection forever.
        if request.transport is not None:
            request.transport.close()
    return response
