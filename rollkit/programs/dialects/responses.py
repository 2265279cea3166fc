"""OpenAI Responses: `POST /v1/responses`.

Read: `input` (a string, or items: messages with text parts, `function_call`
and `function_call_output` items; `reasoning` items are skipped),
`instructions` (a system message first), function tools (flat
`{"type": "function", "name", "parameters"}`; other tool types are refused),
`tool_choice`, `temperature`, `top_p`, `max_output_tokens` (sent to the model
as `max_tokens`), `parallel_tool_calls`, and `previous_response_id`: the
conversation of an earlier response of the same rollout continued by the
new input (its instructions are not carried over, as the API does). Other
fields (store, metadata, reasoning, text, include, truncation, ...) are
accepted and not passed to the model.

Written: a `response` object whose output is a message item (when the model
said something) and one `function_call` item per tool call; a stream is the
typed events the openai SDK parses (`response.created`, `.in_progress`,
`.output_item.added`, `.content_part.added`, `.output_text.delta` / `.done`,
`.function_call_arguments.delta` / `.done`, `.output_item.done`,
`.completed`), each with its `sequence_number`.
"""

from __future__ import annotations

import time
from typing import Any

from ...core.messages import AssistantMessage, Request, Response, SystemMessage, ToolCall, ToolMessage, UserMessage
from ._base import Dialect, Parsed, WireError, chunks_of, sse, text_parts

__all__ = ["RESPONSES", "ResponsesDialect"]

_HISTORY = "responses.history"  # memory key: response id -> the conversation after it
_TEXT = ("input_text", "output_text", "text")
_PASSED = {"temperature": "temperature", "top_p": "top_p", "max_output_tokens": "max_tokens",
           "parallel_tool_calls": "parallel_tool_calls", "seed": "seed"}


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise WireError("'tools' must be a list of tool objects", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise WireError(f"tools[{i}]: tool type {kind!r} is not supported (function tools only)", f"tools[{i}].type")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise WireError(f"tools[{i}]: a function tool needs a 'name'", f"tools[{i}].name")
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        if tool.get("description"):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _assistant(messages: list[Any]) -> AssistantMessage:
    """The assistant message a function_call item adds to: the last message
    if it is the assistant's (one response's output items are one turn),
    otherwise a new one."""
    if messages and isinstance(messages[-1], AssistantMessage):
        return messages[-1]
    message = AssistantMessage(content=None)
    messages.append(message)
    return message


def _items(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [UserMessage(content=value)]
    if not isinstance(value, list):
        raise WireError("'input' must be a string or a list of input items", "input")
    messages: list[Any] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise WireError(f"{where} must be an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            text = text_parts(item.get("content"), f"{where}.content", _TEXT)
            if role in ("system", "developer"):
                messages.append(SystemMessage(content=text))
            elif role == "user":
                messages.append(UserMessage(content=text))
            elif role == "assistant":
                last = messages[-1] if messages else None
                if isinstance(last, AssistantMessage) and last.content is None:
                    last.content = text  # its function calls came first
                else:
                    messages.append(AssistantMessage(content=text))
            else:
                raise WireError(f"{where}: unknown role {role!r} (use system, developer, user or assistant)", f"{where}.role")
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or "call_id" not in item:
                raise WireError(f"{where}: a function_call needs a 'name' and a 'call_id'", where)
            message = _assistant(messages)
            message.tool_calls = [*message.tool_calls,
                                  ToolCall(id=str(item["call_id"]), name=item["name"], arguments=item.get("arguments") or "{}")]
        elif kind == "function_call_output":
            if "call_id" not in item:
                raise WireError(f"{where}: a function_call_output needs a 'call_id'", f"{where}.call_id")
            output = item.get("output")
            text = output if isinstance(output, str) else text_parts(output, f"{where}.output", _TEXT)
            messages.append(ToolMessage(tool_call_id=str(item["call_id"]), content=text))
        elif kind == "reasoning":
            continue  # no reasoning to carry: the model behind answers in messages
        else:
            raise WireError(f"{where}: input item type {kind!r} is not supported (messages, function_call, "
                            "function_call_output)", f"{where}.type")
    return messages


class ResponsesDialect(Dialect):
    name = "responses"
    title = "Responses"
    path = "/v1/responses"

    def parse(self, body: Any, memory: dict[str, Any]) -> Parsed:
        if not isinstance(body, dict):
            raise WireError("the body must be a JSON object")
        if "input" not in body:
            raise WireError("'input' is required: a string or a list of input items", "input")
        for name in ("stream", "parallel_tool_calls"):
            if body.get(name) is not None and not isinstance(body[name], bool):
                raise WireError(f"'{name}' must be true or false", name)
        if body.get("model") is not None and not isinstance(body["model"], str):
            raise WireError("'model' must be a string", "model")
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise WireError("'instructions' must be a string", "instructions")
        history: list[Any] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            known = memory.get(_HISTORY, {})
            if previous not in known:
                raise WireError(f"'previous_response_id' {previous!r} is not a response of this rollout", "previous_response_id")
            history = list(known[previous])
        new = _items(body["input"])
        conversation = [*history, *new]
        messages = ([SystemMessage(content=instructions)] if instructions else []) + conversation
        if not messages:
            raise WireError("'input' holds no message", "input")
        params = {target: body[source] for source, target in _PASSED.items() if body.get(source) is not None}
        if body.get("tool_choice") is not None:
            params["tool_choice"] = _tool_choice(body["tool_choice"])
        request = Request(messages=messages, tools=_tools(body.get("tools")), model=body.get("model"), params=params)
        options = {"conversation": conversation, "instructions": instructions, "previous": previous,
                   "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice") or "auto"}
        return Parsed(request, stream=bool(body.get("stream")), options=options)

    def payload(self, response: Response, parsed: Parsed, *, model: str, id: str, memory: dict[str, Any]) -> dict[str, Any]:
        response_id = f"resp_{id}"
        message = response.message
        output: list[dict[str, Any]] = []
        if message.content:
            output.append({"type": "message", "id": f"msg_{id}", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": message.content, "annotations": [], "logprobs": []}]})
        for j, call in enumerate(message.tool_calls):
            output.append({"type": "function_call", "id": f"fc_{id}_{j}", "call_id": call.id, "name": call.name,
                           "arguments": call.arguments, "status": "completed"})
        # The conversation after this response, for a later previous_response_id.
        memory.setdefault(_HISTORY, {})[response_id] = [*parsed.options["conversation"], message]
        incomplete = response.finish_reason == "length"
        usage = response.usage
        return {
            "id": response_id, "object": "response", "created_at": int(time.time()), "model": model,
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "error": None, "output": output, "instructions": parsed.options["instructions"],
            "previous_response_id": parsed.options["previous"], "tools": parsed.options["tools"],
            "tool_choice": parsed.options["tool_choice"], "parallel_tool_calls": True,
            "temperature": parsed.request.params.get("temperature"), "top_p": parsed.request.params.get("top_p"),
            "max_output_tokens": parsed.request.params.get("max_tokens"), "metadata": {},
            "text": {"format": {"type": "text"}}, "truncation": "disabled",
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                      "total_tokens": usage.input_tokens + usage.output_tokens,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
        }

    def events(self, payload: dict[str, Any], parsed: Parsed) -> list[bytes]:
        out: list[bytes] = []

        def event(kind: str, **data: Any) -> None:
            out.append(sse({"type": kind, "sequence_number": len(out), **data}, event=kind))

        started = {**payload, "status": "in_progress", "output": [], "usage": None}
        event("response.created", response=started)
        event("response.in_progress", response=started)
        for index, item in enumerate(payload["output"]):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                event("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
                empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                event("response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=empty)
                for piece in chunks_of(text, 64):
                    event("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                          delta=piece, logprobs=[])
                event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                      text=text, logprobs=[])
                event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                      part=item["content"][0])
            else:
                event("response.output_item.added", output_index=index,
                      item={**item, "arguments": "", "status": "in_progress"})
                for piece in chunks_of(item["arguments"], 24):
                    event("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=piece)
                event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                      arguments=item["arguments"], name=item["name"])
            event("response.output_item.done", output_index=index, item=item)
        event("response.completed" if payload["status"] == "completed" else "response.incomplete", response=payload)
        return out

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}


RESPONSES = ResponsesDialect()
