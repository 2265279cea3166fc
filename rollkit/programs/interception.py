"""The interception server: the HTTP face of the session, for agent programs.

A program that speaks the OpenAI chat-completions protocol points its SDK at
this server (`OPENAI_BASE_URL`) with its rollout's secret as the API key
(`OPENAI_API_KEY`). Each request is translated into a `Request`, run through
the rollout's `Session.complete` (limits and stops, interceptors, the model,
recording: the same pipeline as in-process calls) and the `Response` is sent
back as JSON or as server-sent events.

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
import hashlib
import hmac
import json
import socket
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic
from aiohttp import web

from ..core.context import RolloutContext
from ..core.errors import ProviderError, Refused, RolloutError
from ..core.harness import Harness
from ..core.messages import AssistantMessage, Request, Response, SystemMessage, ToolCall, ToolMessage, UserMessage

if TYPE_CHECKING:
    from ..core.session import Session

__all__ = [
    "InterceptionServer", "InterceptedHarness", "Registration", "acquire", "release", "DEFAULT_MAX_BODY",
    "parse_request", "completion_payload", "wire_message",
]

DEFAULT_MAX_BODY = 32 * 1024 * 1024
# Refusals and pipeline failures carry this so the openai SDKs answer them
# once instead of retrying: a retry would only be refused again.
_NO_RETRY = {"x-should-retry": "false"}
_ROUTES = "POST /v1/chat/completions, GET /v1/models"
_WIRE_FIELDS = {"messages", "tools", "model", "stream", "stream_options"}
# The openai SDK's per-call transport options: never request fields. A program
# sending them in its body must not set headers (Authorization!), query
# parameters, extra body or timeouts on the host's own provider call.
SDK_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


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

    def __init__(self, *, max_body: int = DEFAULT_MAX_BODY) -> None:
        if not isinstance(max_body, int) or max_body <= 0:
            raise ValueError(f"max_body must be a positive number of bytes, got {max_body!r}")
        self.max_body = max_body
        self._by_digest: dict[bytes, Registration] = {}
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # ---- lifetime -----------------------------------------------------------
    async def start(self) -> None:
        if self._runner is not None:
            return
        app = web.Application(client_max_size=self.max_body, middlewares=[self._json_errors])
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))  # loopback only, any free port
            await web.SockSite(runner, sock).start()
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

    @property
    def rollouts(self) -> int:
        return len(self._by_digest)

    def _authorize(self, request: web.Request) -> Registration | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        token = token.strip()
        # The dict is keyed by a digest, so the lookup reveals nothing about
        # the secret; the final comparison is constant-time.
        registration = self._by_digest.get(_digest(token))
        if registration is None or not hmac.compare_digest(token.encode(), registration.secret.encode()):
            return None
        return registration

    # ---- routes -------------------------------------------------------------
    @web.middleware
    async def _json_errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return _error(404, f"no route {request.method} {request.path}; this server answers {_ROUTES}",
                          "not_found")
        except web.HTTPMethodNotAllowed:
            return _error(405, f"{request.method} is not allowed on {request.path}; this server answers {_ROUTES}",
                          "method_not_allowed")
        except web.HTTPException:
            raise
        except Exception as exc:
            # A bug of this server, not of the request: aiohttp would answer a
            # plain-text 500 that the SDK retries, to the same bug.
            return _error(500, f"the interception server failed: {type(exc).__name__}: {exc}", "server_error")

    async def _models(self, request: web.Request) -> web.Response:
        registration = self._authorize(request)
        if registration is None:
            return _unauthorized(request)
        model = {"id": registration.model, "object": "model", "created": 0, "owned_by": "rollkit"}
        return web.json_response({"object": "list", "data": [model]})

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        registration = self._authorize(request)
        if registration is None:
            return _unauthorized(request)
        if not registration.active:
            return _between_segments(registration)
        if request.content_length is not None and request.content_length > self.max_body:
            return _too_large(self.max_body)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _too_large(self.max_body)
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return _error(400, f"the request body is not JSON: {exc}", "invalid_request_error")
        try:
            parsed = parse_request(body)
        except (ValueError, TypeError) as exc:
            return _error(400, f"malformed chat-completions request: {exc}", "invalid_request_error")
        stream = bool(body.get("stream"))
        usage_chunk = bool((body.get("stream_options") or {}).get("include_usage"))

        key = hashlib.sha256(raw).digest()
        retry = request.headers.get("x-stainless-retry-count", "0").strip() not in ("", "0")
        if retry and key == registration._last_key and registration._last_payload is not None:
            # The SDK lost our answer and asks again: sampling again would
            # commit a second turn for one request.
            registration.replays += 1
            return await _send(request, registration._last_payload, stream, usage_chunk)
        try:
            payload = await self._run(registration, key, parsed, retry)
        except _SegmentEnded:
            return _between_segments(registration)
        except Refused as refused:
            registration.refusals += 1
            return _error(
                410,
                f"{refused}: this rollout takes no more model calls; the program should finish",
                "rollout_stopped",
                code=refused.condition,
            )
        except RolloutError as exc:
            status = exc.status if isinstance(exc, ProviderError) and exc.status else 502
            kind = "provider_error" if isinstance(exc, ProviderError) else f"{exc.boundary}_error"
            message = f"{type(exc).__name__}: {exc}"
            if status in (401, 403):
                # Passed on unchanged, it would read as "your secret is wrong"
                # to a program whose secret is right.
                message = (f"the model provider refused the host's credentials (HTTP {status}); the rollout's "
                           f"secret is fine, the host must fix its provider key or permissions: {message}")
                status = 502
            return _error(status if status >= 400 else 502, message, kind)
        finally:
            registration.activity.set()
        return await _send(request, payload, stream, usage_chunk)

    async def _run(self, registration: Registration, key: bytes, parsed: Request, retry: bool) -> dict[str, Any]:
        pending = registration._inflight.get(key) if retry else None
        if pending is not None:
            # An SDK retry while the first attempt is still running: share it.
            # Only a retry: identical requests sent in parallel on purpose
            # (e.g. sampling n answers) are separate calls.
            registration.joins += 1
            registration.activity.set()
        else:
            pending = asyncio.ensure_future(self._complete(registration, key, parsed))
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

    async def _complete(self, registration: Registration, key: bytes, parsed: Request) -> dict[str, Any]:
        try:
            response = await registration.session.complete(parsed)
        except Refused:
            raise
        except Exception as exc:
            if registration.failure is None:
                registration.failure = exc
            raise
        registration.calls += 1
        payload = completion_payload(
            response, model=response.model or parsed.model or registration.model,
            id=f"chatcmpl-{registration.rollout_id}-{registration.calls}",
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
                await _stop_fully(server)
            finally:
                shared.server = None


async def _stop_fully(server: InterceptionServer) -> None:
    """Stop `server` even if the caller is cancelled meanwhile: a stop cut in
    half would leave its port listening with nobody holding a reference."""
    stopping = asyncio.ensure_future(server.stop())
    try:
        await asyncio.shield(stopping)
    except asyncio.CancelledError:
        while not stopping.done():
            try:
                await asyncio.shield(stopping)
            except asyncio.CancelledError:
                pass
        raise


# ---- the wire ------------------------------------------------------------------
class InterceptedHarness(Harness):
    """Base for an in-process harness that reaches the model through an
    OpenAI-compatible client (the openai SDK, say) instead of `ctx.complete`.

    `serve` registers the rollout on the loop's shared server and hands its
    URL out as `ctx.services["openai"]`; the client's API key is `ctx.secret`.
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
        return {"openai": server.base_url}

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


def _error(status: int, message: str, kind: str, *, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}
    return web.json_response(body, status=status, headers=_NO_RETRY)


def _unauthorized(request: web.Request) -> web.Response:
    missing = not request.headers.get("Authorization")
    what = "no bearer token" if missing else "a wrong bearer token"
    return _error(
        401,
        f"{what}: set OPENAI_API_KEY to the rollout's secret (ProgramHarness sets it for the program)",
        "invalid_api_key",
    )


def _between_segments(registration: Registration) -> web.Response:
    return _error(
        409,
        f"rollout {registration.rollout_id or '?'} is between segments (the program yielded, or its segment "
        "ended): it takes no model calls until the user's next turn arrives on stdin",
        "between_segments",
    )


def _too_large(limit: int) -> web.Response:
    return _error(413, f"the request body is larger than this server's limit of {limit} bytes", "request_too_large")


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("text", "input_text"):
                parts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"{where}: content part of type {kind!r} is not supported (text only)")
        return "".join(parts)
    raise ValueError(f"{where}: content must be a string or a list of text parts")


def _message(item: Any, index: int) -> Any:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be an object with a 'role'")
    role = item.get("role")
    if role in ("system", "developer"):
        return SystemMessage(content=_text(item.get("content"), where))
    if role == "user":
        return UserMessage(content=_text(item.get("content"), where))
    if role == "assistant":
        calls = []
        for j, call in enumerate(item.get("tool_calls") or []):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or "name" not in function:
                raise ValueError(f"{where}.tool_calls[{j}] needs a function with a name")
            calls.append(ToolCall(id=str(call.get("id", "")), name=function["name"],
                                  arguments=function.get("arguments") or "{}"))
        content = item.get("content")
        return AssistantMessage(content=None if content is None else _text(content, where), tool_calls=calls)
    if role == "tool":
        if "tool_call_id" not in item:
            raise ValueError(f"{where}: a tool message needs a tool_call_id")
        return ToolMessage(tool_call_id=str(item["tool_call_id"]), content=_text(item.get("content"), where),
                           name=item.get("name"))
    raise ValueError(f"{where}: unknown role {role!r} (use system, developer, user, assistant or tool)")


def parse_request(body: Any) -> Request:
    """A chat-completions request body as a rollkit `Request`. Fields other
    than messages, tools, model and streaming go through untouched in
    `params`, except the SDK's transport options (SDK_OPTIONS), dropped."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError("'tools' must be a list of objects")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise ValueError("'stream' must be true or false")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise ValueError("'stream_options' must be an object, e.g. {\"include_usage\": true}")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise ValueError("'model' must be a string")
    try:
        return Request(
            messages=[_message(m, i) for i, m in enumerate(messages)],
            tools=tools,
            model=body.get("model"),
            # SDK transport options are dropped: see SDK_OPTIONS.
            params={k: v for k, v in body.items() if k not in _WIRE_FIELDS and k not in SDK_OPTIONS},
        )
    except pydantic.ValidationError as exc:
        raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from exc


def wire_message(message: Any) -> dict[str, Any]:
    """A rollkit message as a chat-completions message dict."""
    if isinstance(message, AssistantMessage):
        out: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            out["tool_calls"] = _wire_calls(message)
        return out
    if isinstance(message, ToolMessage):
        out = {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
        if message.name:
            out["name"] = message.name
        return out
    return {"role": message.role, "content": message.content}


def _wire_calls(message: AssistantMessage) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in message.tool_calls
    ]


def completion_payload(response: Response, *, model: str, id: str) -> dict[str, Any]:
    """A `Response` as a chat.completion object."""
    message: dict[str, Any] = {"role": "assistant", "content": response.message.content}
    if response.message.tool_calls:
        message["tool_calls"] = _wire_calls(response.message)
    usage = response.usage
    return {
        "id": id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": response.finish_reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
    }


async def _send(request: web.Request, payload: dict[str, Any], stream: bool, usage_chunk: bool) -> web.StreamResponse:
    if not stream:
        return web.json_response(payload)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for chunk in _chunks(payload, usage_chunk):
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _chunks(payload: dict[str, Any], usage_chunk: bool) -> list[dict[str, Any]]:
    """The answer as chat.completion.chunk events: the whole answer is known,
    so the text goes in one delta and each tool call in one more."""
    head = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
            "model": payload["model"]}
    choice = payload["choices"][0]
    message = choice["message"]
    chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": message["content"] or ""},
                                    "finish_reason": None, "logprobs": None}]}]
    for i, call in enumerate(message.get("tool_calls") or []):
        delta = {"tool_calls": [{"index": i, **call}]}
        chunks.append({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}]})
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"],
                                        "logprobs": None}]})
    if usage_chunk:
        chunks.append({**head, "choices": [], "usage": payload["usage"]})
    return chunks
