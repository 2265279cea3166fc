"""OpenAI Responses: `POST /v1/responses`.

Read: `input` (a string, or items: messages with text parts, `function_call`
and `function_call_output` items; `reasoning` items are skipped),
`instructions` (a system message first), function tools (flat
`{"type": "function", "name", "parameters"}`), `namespace` tools (their
functions, named `namespace.name` for the model and answered with their
namespace), `custom` tools (free-form input: a function of one string
`input` for the model, answered as `custom_tool_call` items); hosted tools
(web search, file search, code interpreter, ...) are left out, since the
model behind cannot run them; any other type is refused,
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

import json
import time
from typing import Any

from ...core.messages import AssistantMessage, Request, Response, SystemMessage, ToolCall, ToolMessage, UserMessage
from ._base import Dialect, Parsed, WireError, chunks_of, function_tool, named_tool_choice, sse, text_parts

__all__ = ["RESPONSES", "ResponsesDialect"]

# Memory key: response id -> (the response it followed, the messages it
# added: its new input and its reply). A chain of n responses keeps n links,
# not n copies of a growing conversation.
_HISTORY = "responses.history"
_TEXT = ("input_text", "output_text", "text")
_PASSED = {"temperature": "temperature", "top_p": "top_p", "max_output_tokens": "max_tokens",
           "parallel_tool_calls": "parallel_tool_calls", "seed": "seed"}


# Tools the provider itself runs (a web search, a code interpreter, ...): the
# model behind rollkit cannot serve them, so they are left out of its request.
HOSTED = frozenset({"web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation",
                    "computer_use_preview", "computer_use", "mcp", "local_shell", "shell", "tool_search"})


def _function(tool: dict[str, Any], where: str, name: str | None = None) -> dict[str, Any]:
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise WireError(f"{where}: a function tool needs a 'name'", f"{where}.name")
    return function_tool(name or tool["name"], tool.get("parameters"), tool.get("description"))


def _tools(tools: Any, kinds: dict[str, tuple[str, str | None, str]]) -> list[dict[str, Any]]:
    """Function tools in chat form. A `namespace` tool's functions are named
    `namespace.name`; a `custom` tool (free-form text input) becomes a
    function taking one string `input`; hosted tools are left out. `kinds`
    learns each chat name's (kind, namespace, name), to answer in kind."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise WireError("'tools' must be a list of tool objects", "tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        if kind == "function":
            out.append(_function(tool, where))
            kinds[tool["name"]] = ("function", None, tool["name"])
        elif kind == "namespace":
            for j, inner in enumerate(tool.get("tools") or []):
                if isinstance(inner, dict) and inner.get("type") == "function" and isinstance(inner.get("name"), str):
                    name = f"{tool.get('name')}.{inner['name']}"
                    out.append(_function(inner, f"{where}.tools[{j}]", name))
                    kinds[name] = ("function", tool.get("name"), inner["name"])
        elif kind == "custom":
            schema = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
            out.append(_function({**tool, "parameters": schema}, where))
            kinds[tool["name"]] = ("custom", None, tool["name"])
        elif kind not in HOSTED:
            raise WireError(f"{where}: tool type {kind!r} is not supported (function, namespace and custom tools; "
                            "hosted tools are left out)", f"{where}.type")
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return named_tool_choice(choice.get("name"))
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
        elif kind in ("function_call", "custom_tool_call"):
            if not isinstance(item.get("name"), str) or "call_id" not in item:
                raise WireError(f"{where}: a {kind} needs a 'name' and a 'call_id'", where)
            name = f"{item['namespace']}.{item['name']}" if item.get("namespace") else item["name"]
            arguments = item.get("arguments") or "{}" if kind == "function_call" else json.dumps({"input": item.get("input", "")})
            message = _assistant(messages)
            message.tool_calls = [*message.tool_calls, ToolCall(id=str(item["call_id"]), name=name, arguments=arguments)]
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if "call_id" not in item:
                raise WireError(f"{where}: a {kind} needs a 'call_id'", f"{where}.call_id")
            output = item.get("output")
            text = output if isinstance(output, str) else text_parts(output, f"{where}.output", _TEXT)
            messages.append(ToolMessage(tool_call_id=str(item["call_id"]), content=text))
        elif kind in ("reasoning", "web_search_call", "file_search_call"):
            continue  # nothing the model behind can use: it answers in messages and tool calls
        else:
            raise WireError(f"{where}: input item type {kind!r} is not supported (messages, function_call, "
                            "function_call_output)", f"{where}.type")
    return messages


def _loads_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _conversation(known: dict[str, Any], last: str | None) -> list[Any]:
    """The messages up to and including response `last`, from its links."""
    pieces = []
    while last is not None:
        last, added = known[last]
        pieces.append(added)
    return [m for piece in reversed(pieces) for m in piece]


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
            history = _conversation(known, previous)
        new = _items(body["input"])
        conversation = [*history, *new]
        messages = ([SystemMessage(content=instructions)] if instructions else []) + conversation
        if not messages:
            raise WireError("'input' holds no message", "input")
        params = {target: body[source] for source, target in _PASSED.items() if body.get(source) is not None}
        if body.get("tool_choice") is not None:
            params["tool_choice"] = _tool_choice(body["tool_choice"])
        kinds: dict[str, tuple[str, str | None, str]] = {}
        request = Request(messages=messages, tools=_tools(body.get("tools"), kinds), model=body.get("model"), params=params)
        options = {"new": new, "instructions": instructions, "previous": previous, "kinds": kinds,
                   "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice") or "auto"}
        return Parsed(request, stream=bool(body.get("stream")), options=options)

    def payload(self, response: Response, parsed: Parsed, *, model: str, id: str, memory: dict[str, Any]) -> dict[str, Any]:
        response_id = f"resp_{id}"
        message = response.message
        output: list[dict[str, Any]] = []
        if message.content:
            output.append({"type": "message", "id": f"msg_{id}", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": message.content, "annotations": [], "logprobs": []}]})
        kinds = parsed.options.get("kinds", {})
        for j, call in enumerate(message.tool_calls):
            kind, namespace, name = kinds.get(call.name, ("function", None, call.name))
            if kind == "custom":
                text = _loads_object(call.arguments).get("input", call.arguments)
                output.append({"type": "custom_tool_call", "id": f"ctc_{id}_{j}", "call_id": call.id, "name": name,
                               "input": text if isinstance(text, str) else json.dumps(text), "status": "completed"})
                continue
            item = {"type": "function_call", "id": f"fc_{id}_{j}", "call_id": call.id, "name": name,
                    "arguments": call.arguments, "status": "completed"}
            if namespace:
                item["namespace"] = namespace
            output.append(item)
        # The conversation after this response, for a later previous_response_id.
        memory.setdefault(_HISTORY, {})[response_id] = (parsed.options["previous"], [*parsed.options["new"], message])
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
            "usage": {"input_tokens": usage.input_tokens or 0, "output_tokens": usage.output_tokens or 0,
                      "total_tokens": usage.total_tokens or 0,
                      "input_tokens_details": {"cached_tokens": usage.cache_read_tokens or 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
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
            elif item["type"] == "custom_tool_call":
                event("response.output_item.added", output_index=index, item={**item, "input": "", "status": "in_progress"})
                for piece in chunks_of(item["input"], 24):
                    event("response.custom_tool_call_input.delta", item_id=item["id"], output_index=index, delta=piece)
                event("response.custom_tool_call_input.done", item_id=item["id"], output_index=index, input=item["input"])
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


RESPONSES = ResponsesDialect()
