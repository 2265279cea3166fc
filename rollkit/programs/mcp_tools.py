"""Tool servers: a rollout's tool sets served to agent programs over MCP.

`ToolServer` is one rollout's MCP endpoint: the `mcp` package's streamable
HTTP transport (stateless, JSON answers) behind uvicorn, bound to 127.0.0.1
on a free port, in the event loop that runs the rollout. Each of the task's
tool sets is served at its own path, `/mcp/<toolset>`, and every request must
carry the rollout's secret as bearer token (401 otherwise, checked in
constant time before the MCP layer sees the request). A tool call runs the
rollout's own `Tool` objects, so validation and error handling are the same as
in-process: a bad call or a raising tool comes back to the model as a tool
result with `isError`, never as a crash of the server or the rollout.

It owns the server's lifetime (`start` in harness.serve, `stop` in cleanup)
and nothing else: it does not decide when tools run, and it records nothing
on the trace beyond the harness's tool-call counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import re
import socket
import uuid
from typing import TYPE_CHECKING, Any

import mcp.types as mcp_types
import uvicorn
from mcp.server.lowlevel import Server
from starlette.applications import Starlette
from starlette.routing import Mount

from ..core.cancellation import finish
from ..core.errors import ToolsetError
from ..core.messages import ToolCall
from ..core.tools import ToolResult
from .guard import DEFAULT_LIMITS, ConnectionGuard, ServerLimits

if TYPE_CHECKING:
    from ..core.context import RolloutContext

__all__ = ["ToolServer", "toolset_groups"]

log = logging.getLogger("rollkit")


def toolset_groups(ctx: RolloutContext) -> dict[str, list[str]]:
    """The task's tool names grouped by tool set, keyed by a URL-safe name."""
    groups: dict[str, list[str]] = {}
    for toolset in ctx.task.all_toolsets():
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", toolset.name).strip("-") or "tools"
        while slug in groups:
            slug += "_"
        groups[slug] = [name for name in toolset.tools if name in ctx.tools]
    return groups


class _RequireSecret:
    """ASGI middleware: only HTTP requests bearing the rollout's secret pass
    (the scheme in any case, like the interception server; the token compared
    in constant time). Lifespan events pass; every other scope (websocket, or
    any a future server invents) is refused: nothing reaches the tools
    without the secret. It also tells the connection guard when a request is
    in hand, and holds the request's body and answer to their deadlines."""

    def __init__(self, app: Any, secret: str, guard: ConnectionGuard) -> None:
        self.app = app
        self.secret = secret.encode()
        self.guard = guard

    def _authorized(self, scope: dict) -> bool:
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        # compare_digest runs even for a wrong scheme: timing tells nothing.
        match = hmac.compare_digest(token.strip(), self.secret)
        return scheme.lower() == b"bearer" and match

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self.app(scope, receive, send)
            return
        if kind == "http" and self._authorized(scope):
            peer = scope.get("client")
            self.guard.busy(peer)
            self.guard.claim(peer, self)  # it showed the secret: no longer a keyless connection
            try:
                await self.app(scope, self._timed_receive(receive), self._timed_send(send))
            finally:
                self.guard.idle(peer)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation; uvicorn answers 403
            return
        if kind == "http":
            body = json.dumps({"error": "missing or wrong bearer token: send the rollout's secret "
                                        "(OPENAI_API_KEY) as 'Authorization: Bearer <secret>'"}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
        # Unknown scope types get nothing.

    def _timed_receive(self, receive: Any) -> Any:
        limits, body_done = self.guard.limits, False

        async def timed() -> dict:
            nonlocal body_done
            if body_done:  # after the body: waiting for a disconnect is no request to time
                return await receive()
            async with asyncio.timeout(limits.body_timeout):  # a body trickled in forever holds a connection
                message = await receive()
            body_done = message.get("type") != "http.request" or not message.get("more_body", False)
            return message

        return timed

    def _timed_send(self, send: Any) -> Any:
        limit = self.guard.limits.send_timeout

        async def timed(message: dict) -> None:
            async with asyncio.timeout(limit):  # a client that never reads its answer
                await send(message)

        return timed


class ToolServer:
    """One rollout's MCP tool server. `urls` maps each tool set to its URL.
    `limits` bound its connections and their time (rollkit.programs.guard);
    the server is the rollout's own, so it holds at most `per_rollout`."""

    def __init__(self, ctx: RolloutContext, *, limits: ServerLimits | None = None) -> None:
        self.ctx = ctx
        self.groups = toolset_groups(ctx)
        self.urls: dict[str, str] = {}
        limits = limits or DEFAULT_LIMITS
        self.guard = ConnectionGuard(dataclasses.replace(
            limits, max_connections=min(limits.max_connections or limits.per_rollout, limits.per_rollout)))
        self._server: uvicorn.Server | None = None
        self._sock: socket.socket | None = None

    def _mcp_server(self, names: list[str]) -> Server:
        ctx = self.ctx
        tools = [
            mcp_types.Tool(
                name=name,
                description=ctx.tools[name].description,
                input_schema=ctx.tools[name].spec["function"]["parameters"],
            )
            for name in names
        ]

        async def list_tools(request: Any, params: Any) -> mcp_types.ListToolsResult:
            return mcp_types.ListToolsResult(tools=tools)

        async def call_tool(request: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
            content, ok = await self._call(params.name, params.arguments or {}, names)
            return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=content)], is_error=not ok)

        return Server("rollkit-tools", on_list_tools=list_tools, on_call_tool=call_tool)

    async def _call(self, name: str, arguments: dict[str, Any], served: list[str]) -> tuple[str, bool]:
        ctx = self.ctx
        ctx.tool_calls += 1
        tool = ctx.tools.get(name) if name in served else None
        if tool is None:
            result = ToolResult.error(f"there is no tool named {name!r}; available tools: {', '.join(served) or 'none'}")
        else:
            result = await tool(ToolCall(id=f"mcp_{uuid.uuid4().hex[:8]}", name=name, arguments=json.dumps(arguments)))
        if not result.ok:
            ctx.tool_failures += 1
        return result.content, result.ok

    async def start(self) -> dict[str, str]:
        """Bring the server up; returns {toolset: url}. A start cut short by
        a cancellation is finished and then stopped (rollkit.core.cancellation),
        so no socket is left registered with the event loop half made."""
        if not self.groups:
            return {}
        return await finish(self._start(), undo=lambda _: self.stop())

    async def _start(self) -> dict[str, str]:
        try:
            apps, mounts = [], []
            for slug, names in self.groups.items():
                server = self._mcp_server(names)
                app = server.streamable_http_app(
                    streamable_http_path="/", stateless_http=True, json_response=True, host="127.0.0.1",
                )
                apps.append(app)
                mounts.append(Mount(f"/mcp/{slug}", app=app))

            @contextlib.asynccontextmanager
            async def lifespan(_: Any) -> Any:
                async with contextlib.AsyncExitStack() as stack:
                    for app in apps:  # each tool set's MCP session manager
                        await stack.enter_async_context(app.router.lifespan_context(app))
                    yield

            root = _RequireSecret(Starlette(routes=mounts, lifespan=lifespan), self.ctx.secret, self.guard)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._sock = sock  # stop() closes it, also when bind fails
            sock.bind(("127.0.0.1", 0))
            # A tool call still running when the rollout closes gets 2s to finish.
            # log_config=None: uvicorn would otherwise reconfigure the host's
            # logging (a notebook's, a training job's) on every start.
            config = uvicorn.Config(root, log_level="warning", lifespan="on", access_log=False,
                                    timeout_graceful_shutdown=2, log_config=None,
                                    timeout_keep_alive=max(1, int(self.guard.limits.idle_timeout)))
            config.load()
            # Every connection passes the guard before uvicorn's own protocol.
            config.http_protocol_class = self.guard.protocol(config.http_protocol_class)
            server = uvicorn.Server(config)
            # startup()/shutdown() directly, not serve(): serve() would take
            # over the process's signal handlers (a notebook kernel's too).
            server.lifespan = config.lifespan_class(config)
            self._server = server
            try:
                await server.startup(sockets=[sock])
            except SystemExit:  # uvicorn exits the process when the app's lifespan fails to start
                raise ToolsetError("the MCP tool server's application failed to start (see the log above)") from None
            if server.should_exit:
                raise ToolsetError("the MCP tool server failed to start (see the log above)")
        except BaseException:
            await self.stop()
            raise
        port = sock.getsockname()[1]
        self.urls = {slug: f"http://127.0.0.1:{port}/mcp/{slug}/" for slug in self.groups}
        return dict(self.urls)

    async def stop(self) -> None:
        server, self._server = self._server, None
        sock, self._sock = self._sock, None
        if server is not None:
            try:
                if hasattr(server, "servers"):  # started: listening, lifespan up
                    await server.shutdown(sockets=[sock] if sock is not None else None)
                elif server.lifespan.startup_event.is_set() and not server.lifespan.should_exit:
                    # The lifespan came up, the listener did not: take the lifespan down.
                    await server.lifespan.shutdown()
            except Exception as exc:  # teardown only warns (L22)
                log.warning("MCP tool server shutdown: %s: %s", type(exc).__name__, exc)
        if sock is not None:
            sock.close()
