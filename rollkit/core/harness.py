"""Harnesses: the agent program of a rollout.

A `Harness` runs one segment per `step()`: from new messages (the initial
prompt, or the user's turn) until it yields control, either because it is done
or because it waits for the user. It reaches the model only through
`ctx.complete` (the rollout's interception point) and keeps its per-rollout
state on the context, so one harness object serves many rollouts at once. It
may declare its own `@metric`s, things only it knows (L29).

`ChatHarness` is the built-in in-process loop: call the model; if it asked for
tools, run them and call again; yield when it answers without tool calls.
Harnesses do not charge time, check limits or score: the rollout does.
"""

from __future__ import annotations

from typing import Any

from .context import RolloutContext
from .hooks import metric
from .messages import Message, Request, unvalidated

__all__ = ["Harness", "ChatHarness", "ToolCallRate"]


class Harness:
    """Base class. Override `segment`; optionally `setup`, `serve`, `cleanup`."""

    name = "harness"

    async def setup(self, ctx: RolloutContext) -> None:
        """Prepare this rollout (under the shared setup deadline, L5)."""

    async def serve(self, ctx: RolloutContext) -> dict[str, str]:
        """Bring up the services this harness needs (L6); return their URLs,
        which the network policy keeps reachable."""
        return {}

    async def segment(self, ctx: RolloutContext, messages: list[Message]) -> None:
        """Run until yielding control. `messages` are new: the initial prompt
        on the first segment, the user's messages after."""
        raise NotImplementedError

    def restore(self, ctx: RolloutContext, messages: list[Message]) -> None:
        """A forked rollout starts from `messages` (rollkit.core.forks): make
        them the harness's view of the conversation. A harness that keeps
        more per-rollout state restores it here, or refuses with an error."""
        ctx.messages = messages

    async def cleanup(self, ctx: RolloutContext) -> None:
        """Close this rollout's harness session (first thing in close, L21)."""

    def describe(self) -> dict[str, Any]:
        return {"harness": self.name, "type": type(self).__name__}


class ToolCallRate:
    """Mix into a harness whose tool calls go through `ctx.run_tool` (the
    chat loop, a program's MCP tools): it reports their success rate."""

    @metric
    def tool_call_success_rate(self, ctx: RolloutContext) -> float | None:
        """Share of tool calls that ran cleanly; missing when none were made."""
        if ctx.tool_calls == 0:
            return None
        return 1.0 - ctx.tool_failures / ctx.tool_calls


class ChatHarness(ToolCallRate, Harness):
    """Call the model, run the tools it asks for, repeat; yield when it
    answers without tool calls. Resuming continues the same conversation."""

    name = "chat"

    async def segment(self, ctx: RolloutContext, messages: list[Message]) -> None:
        conversation = ctx.messages
        conversation.extend(messages)
        while True:
            request = unvalidated(Request, messages=conversation, tools=ctx.tool_specs, model=None, params={})
            response = await ctx.complete(request)
            reply = response.message
            conversation.append(reply)
            if not reply.tool_calls or ctx.stopped:
                return
            for call in reply.tool_calls:
                conversation.append(await ctx.run_tool(call))
