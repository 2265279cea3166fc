"""Anthropic Messages: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

Read: `model`, `max_tokens` (required, as by the API; sent to the model as
`max_tokens`), `system` (a string or text blocks), `messages` whose content
is a string or blocks: `text`, `tool_use` (an assistant's tool call),
`tool_result` (a user turn's tool results, which become tool messages ahead
of the turn's text; an image or document in a result becomes a placeholder
line); `thinking` blocks are skipped, images in a user's own turn refused. `tools`
(`name`, `description`, `input_schema`), `tool_choice` (auto, any, tool,
none), `temperature`, `top_p`, `top_k`, `stop_sequences` (as `stop`).
`anthropic-version` and `anthropic-beta` headers are accepted; the key comes
in `x-api-key` or as a bearer token.

Written: a `message` with text and `tool_use` blocks, `stop_reason`
(`end_turn`, `tool_use`, `max_tokens`) and usage; a stream is
`message_start`, per block `content_block_start` / `_delta` (`text_delta`,
`input_json_delta`) / `_stop`, then `message_delta` (stop reason, output
tokens) and `message_stop`. Errors are `{"type": "error", "error": {"type",
"message"}}`. `count_tokens` answers with rollkit's documented token count
(`rollkit.core.models.count_tokens`): an estimate, not the provider's.

A tool call's arguments arrive back as a JSON object (`input`); the text the
model wrote is kept per call id in the rollout's memory, so the conversation
the trace records is the one the model saw, to the character.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ...core.messages import AssistantMessage, Request, Response, SystemMessage, ToolCall, ToolMessage, Usage, UserMessage
from ._base import Dialect, Parsed, WireError, chunks_of, estimated_tokens, function_tool, named_tool_choice, sse, text_parts

__all__ = ["ANTHROPIC", "AnthropicDialect"]

_ARGUMENTS = "anthropic.arguments"  # memory key: tool call id -> the arguments text the model wrote
_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
# Other 4xx are invalid_request_error, 5xx api_error.
_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise WireError("tools: must be a list of tool definitions", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise WireError(f"tools.{i}.name: a tool needs a name", f"tools.{i}.name")
        if tool.get("type") not in (None, "custom"):
            raise WireError(f"tools.{i}: tool type {tool['type']!r} is not supported (custom tools with an input_schema only)",
                            f"tools.{i}.type")
        out.append(function_tool(tool["name"], tool.get("input_schema"), tool.get("description")))
    return out


def _tool_choice(choice: Any) -> Any:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return named_tool_choice(choice.get("name"))
    return {"auto": "auto", "any": "required", "none": "none"}.get(kind or "", "auto")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise WireError(f"{where}.content: must be a string or a list of content blocks", f"{where}.content")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or "type" not in block:
            raise WireError(f"{where}.content.{j}: a content block is an object with a type", f"{where}.content.{j}")
    return content


def _user(blocks: list[dict[str, Any]], where: str) -> list[Any]:
    """A user turn: its tool results first (each a tool message), then its text."""
    results, texts = [], []
    for j, block in enumerate(blocks):
        kind = block["type"]
        if kind == "tool_result":
            if "tool_use_id" not in block:
                raise WireError(f"{where}.content.{j}.tool_use_id: Field required", f"{where}.content.{j}.tool_use_id")
            text = _tool_result_text(block.get("content"), f"{where}.content.{j}.content")
            if block.get("is_error"):
                text = f"error: {text}"
            results.append(ToolMessage(tool_call_id=str(block["tool_use_id"]), content=text))
        elif kind == "text":
            texts.append(str(block.get("text", "")))
        else:
            raise WireError(f"{where}.content.{j}: block type {kind!r} is not supported in a user turn "
                            "(text and tool_result only)", f"{where}.content.{j}.type")
    return [*results, *([UserMessage(content="".join(texts))] if texts else [])]


def _tool_result_text(content: Any, where: str) -> str:
    """A tool result's text. An image or document a tool returned (Claude
    Code's Read of a picture) becomes a placeholder line rather than failing
    the call: rollkit's messages carry text, and the program goes on."""
    if isinstance(content, list):
        content = [
            {"type": "text", "text": f"[{part['type']} left out: {_media(part)}; rollkit's messages carry text only]"}
            if isinstance(part, dict) and part.get("type") in ("image", "document") else part
            for part in content
        ]
    return text_parts(content, where, ("text",))


def _media(part: dict[str, Any]) -> str:
    source = part.get("source") if isinstance(part.get("source"), dict) else {}
    return str(source.get("media_type") or source.get("type") or "unknown type")


def _assistant(blocks: list[dict[str, Any]], where: str, arguments: dict[str, str]) -> AssistantMessage:
    texts, calls = [], []
    for j, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str) or "id" not in block:
                raise WireError(f"{where}.content.{j}: a tool_use block needs an id and a name", f"{where}.content.{j}")
            given = block.get("input") or {}
            written = arguments.get(str(block["id"]))
            same = written is not None and _loads(written) == given
            calls.append(ToolCall(id=str(block["id"]), name=block["name"], arguments=written if same else json.dumps(given)))
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise WireError(f"{where}.content.{j}: block type {kind!r} is not supported in an assistant turn",
                            f"{where}.content.{j}.type")
    return AssistantMessage(content="".join(texts) if texts else None, tool_calls=calls)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


class AnthropicDialect(Dialect):
    name = "anthropic"
    title = "Messages"
    path = "/v1/messages"
    count_path = "/v1/messages/count_tokens"
    key_name = "API key (x-api-key or a bearer token)"
    key_hint = "set ANTHROPIC_API_KEY to the rollout's secret (ProgramHarness sets it for the program)"

    def token(self, request: web.Request) -> str | None:
        key = request.headers.get("x-api-key", "").strip()
        return key or super().token(request)

    def models_body(self, model: str) -> dict[str, Any]:
        entry = {"type": "model", "id": model, "display_name": model, "created_at": "1970-01-01T00:00:00Z"}
        return {"data": [entry], "has_more": False, "first_id": model, "last_id": model}

    def _messages(self, body: dict[str, Any], memory: dict[str, Any]) -> list[Any]:
        system = body.get("system")
        messages: list[Any] = []
        if system:
            messages.append(SystemMessage(content=text_parts(system, "system", ("text",))))
        turns = body.get("messages")
        if not isinstance(turns, list) or not turns:
            raise WireError("messages: must be a non-empty list", "messages")
        arguments = memory.get(_ARGUMENTS, {})
        for i, turn in enumerate(turns):
            where = f"messages.{i}"
            if not isinstance(turn, dict):
                raise WireError(f"{where}: must be an object with a role and content", where)
            blocks = _blocks(turn.get("content"), where)
            if turn.get("role") == "user":
                messages.extend(_user(blocks, where))
            elif turn.get("role") == "assistant":
                messages.append(_assistant(blocks, where, arguments))
            elif turn.get("role") == "system":  # a system message within the conversation (Claude Code sends them)
                messages.append(SystemMessage(content=text_parts(blocks, f"{where}.content", ("text",))))
            else:
                raise WireError(f"{where}.role: must be 'user', 'assistant' or 'system', got {turn.get('role')!r}", f"{where}.role")
        return messages

    def parse(self, body: Any, memory: dict[str, Any]) -> Parsed:
        if not isinstance(body, dict):
            raise WireError("the body must be a JSON object")
        if not isinstance(body.get("model"), str):
            raise WireError("model: Field required (a string)", "model")
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise WireError("max_tokens: Field required (a whole number >= 1)", "max_tokens")
        if body.get("stream") is not None and not isinstance(body["stream"], bool):
            raise WireError("stream: must be true or false", "stream")
        params: dict[str, Any] = {"max_tokens": max_tokens}
        for name in ("temperature", "top_p", "top_k"):
            if body.get(name) is not None:
                params[name] = body[name]
        if body.get("stop_sequences"):
            params["stop"] = body["stop_sequences"]
        if body.get("tool_choice") is not None:
            params["tool_choice"] = _tool_choice(body["tool_choice"])
        request = Request(messages=self._messages(body, memory), tools=_tools(body.get("tools")), model=body["model"],
                          params=params)
        return Parsed(request, stream=bool(body.get("stream")))

    def count(self, body: Any, memory: dict[str, Any]) -> dict[str, Any]:
        """`count_tokens`: rollkit's token count of the conversation and tools."""
        if not isinstance(body, dict):
            raise WireError("the body must be a JSON object")
        return {"input_tokens": estimated_tokens(self._messages(body, memory), _tools(body.get("tools")))}

    def payload(self, response: Response, parsed: Parsed, *, model: str, id: str, memory: dict[str, Any]) -> dict[str, Any]:
        message = response.message
        content: list[dict[str, Any]] = []
        if message.content:
            content.append({"type": "text", "text": message.content})
        written = memory.setdefault(_ARGUMENTS, {})
        for call in message.tool_calls:
            written[call.id] = call.arguments
            arguments = _loads(call.arguments)
            content.append({"type": "tool_use", "id": call.id, "name": call.name,
                            "input": arguments if isinstance(arguments, dict) else {}})
        stop = "tool_use" if message.tool_calls else _STOP.get(response.finish_reason, "end_turn")
        return {"id": f"msg_{id}", "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": stop, "stop_sequence": None,
                "usage": _wire_usage(response.usage)}

    def events(self, payload: dict[str, Any], parsed: Parsed) -> list[bytes]:
        out: list[bytes] = []

        def event(kind: str, **data: Any) -> None:
            out.append(sse({"type": kind, **data}, event=kind))

        usage = payload["usage"]
        event("message_start", message={**payload, "content": [], "stop_reason": None,
                                        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 0}})
        for index, block in enumerate(payload["content"]):
            if block["type"] == "text":
                event("content_block_start", index=index, content_block={"type": "text", "text": ""})
                for piece in chunks_of(block["text"], 64):
                    event("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
            else:
                event("content_block_start", index=index, content_block={**block, "input": {}})
                for piece in chunks_of(json.dumps(block["input"]), 24):
                    event("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece})
            event("content_block_stop", index=index)
        event("message_delta", delta={"stop_reason": payload["stop_reason"], "stop_sequence": None},
              usage={"output_tokens": usage["output_tokens"]})
        event("message_stop")
        return out

    def error_body(self, status: int, message: str, kind: str, code: str | None,
                   param: str | None = None) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}


def _wire_usage(usage: Usage) -> dict[str, int]:
    """Usage as Anthropic reports it: `input_tokens` excludes the cached
    part, which comes as cache reads and cache writes."""
    read, write = usage.cache_read_tokens or 0, usage.cache_write_tokens or 0
    return {"input_tokens": max(0, (usage.input_tokens or 0) - read - write), "output_tokens": usage.output_tokens or 0,
            "cache_read_input_tokens": read, "cache_creation_input_tokens": write}


ANTHROPIC = AnthropicDialect()
