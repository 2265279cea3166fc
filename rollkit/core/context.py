"""The rollout context: the one object a harness, a task hook and a tool
service see of their rollout.

Instead of threading trace, runtime, session, tools, secret and service URLs
through every call, a `RolloutContext` carries them together. It offers the
two things a harness does: ask the model (`complete`, through the session's
interception pipeline) and run a tool call (`run_tool`, which never raises on
a bad call). It holds per-rollout harness state (`messages`, `state`) so one
harness object can serve many rollouts at once. It decides nothing about the
lifecycle.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .messages import Message, Request, Response, ToolCall, ToolMessage, unvalidated
from .tools import Tool, ToolResult

if TYPE_CHECKING:
    from .runtime import Runtime
    from .task import Task, TaskData
    from .trace import Trace

__all__ = ["RolloutContext", "ModelAccess", "new_secret", "SECRET_PREFIX"]


class ModelAccess(Protocol):
    """What a context needs of the session behind it (rollkit.core.session's
    `Session` is one): whether the exchange was stopped, and a model call
    through the interception point that raises `Refused` when a limit or a
    @stop refuses it."""

    @property
    def stopped(self) -> bool: ...

    async def complete(self, request: Request) -> Response: ...

# A secret is handed to programs as an API key, often as a separate argument
# (`--openai-api-key KEY`): one starting with "-" would be read as an option
# (token_urlsafe starts with "-" once in 64). A fixed prefix, as provider
# keys have (`sk-`), rules that out and says what the key is in a log.
SECRET_PREFIX = "rk-"


def new_secret() -> str:
    """A rollout's secret: `rk-` and 32 URL-safe random characters (192 bits),
    valid as it is in a header, a URL query and a command line."""
    return SECRET_PREFIX + secrets.token_urlsafe(24)


@dataclass(eq=False)
class RolloutContext:
    id: str
    task: Task
    data: TaskData
    trace: Trace
    runtime: Runtime
    session: ModelAccess
    # Kept out of repr: a context printed in a log or a notebook must not leak it.
    secret: str = field(repr=False)
    tools: dict[str, Tool] = field(default_factory=dict)
    tool_specs: list[dict[str, Any]] = field(default_factory=list)
    # URLs of the services open() brought up (interception, tool servers).
    services: dict[str, str] = field(default_factory=dict)
    # The harness's own view of the conversation, and free per-rollout state.
    messages: list[Message] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    tool_calls: int = 0
    tool_failures: int = 0

    @property
    def stopped(self) -> bool:
        """A limit or a @stop ended the exchange: make no more model calls."""
        return self.session.stopped

    async def complete(self, request: Request | list[Message]) -> Response:
        """Ask the model, through the rollout's interception point. Raises
        `Refused` (a clean stop) when a limit or a @stop refuses the call."""
        if not isinstance(request, Request):
            request = unvalidated(Request, messages=request, tools=self.tool_specs, model=None, params={})
        return await self.session.complete(request)

    async def run_tool(self, call: ToolCall) -> ToolMessage:
        """Run one tool call. An unknown tool, bad arguments or a raising tool
        come back as an error message for the model, never as an exception."""
        self.tool_calls += 1
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            result = ToolResult.error(f"there is no tool named {call.name!r}; available tools: {known}")
        else:
            result = await tool(call)
        if not result.ok:
            self.tool_failures += 1
        return ToolMessage(tool_call_id=call.id, content=result.content, name=call.name)
