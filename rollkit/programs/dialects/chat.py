"""OpenAI chat completions: `POST /v1/chat/completions`.

rollkit's messages are shaped like this protocol, so the translation is
nearly one to one. Fields other than messages, tools, model and streaming go
through untouched in `Request.params`, except the openai SDK's transport
options (`SDK_OPTIONS`), which a program must never set on the host's own
provider call. A stream sends the text and each tool call's arguments in
pieces, as a provider does, then the finish reason, then (with
`stream_options.include_usage`) the usage.

A request asking for `logprobs` gets the reply's token logprobs back in
OpenAI's shape (`choices[0].logprobs.content`), and one asking for vLLM's
`return_token_ids` the token ids in vLLM's (`choices[0].token_ids`,
`prompt_token_ids`), when the model behind returned them (an
`OpenAIModel(logprobs=True)` on an endpoint that does); otherwise they are
null, as an endpoint without them answers.
"""

from __future__ import annotations

import time
from typing import Any

import pydantic

from ...core.messages import AssistantMessage, Request, Response, SystemMessage, ToolCall, ToolMessage, UserMessage
from ._base import Dialect, Parsed, WireError, chunks_of, sse, text_parts

__all__ = ["CHAT", "ChatDialect", "parse_request", "completion_payload", "wire_message", "wire_logprobs", "SDK_OPTIONS"]

_WIRE_FIELDS = {"messages", "tools", "model", "stream", "stream_options"}
# The openai SDK's per-call transport options: never request fields. A program
# sending them in its body must not set headers (Authorization!), query
# parameters, extra body or timeouts on the host's own provider call.
SDK_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
_TEXT = ("text", "input_text")
_SEEN = "chat.seen"  # memory key: (wire dict, message) pairs of the last request and its reply


def _message(item: Any, index: int) -> Any:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise WireError(f"{where} must be an object with a 'role'", where)
    role = item.get("role")
    if role in ("system", "developer"):
        return SystemMessage(content=text_parts(item.get("content"), where, _TEXT))
    if role == "user":
        return UserMessage(content=text_parts(item.get("content"), where, _TEXT))
    if role == "assistant":
        calls = []
        for j, call in enumerate(item.get("tool_calls") or []):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or "name" not in function:
                raise WireError(f"{where}.tool_calls[{j}] needs a function with a name", f"{where}.tool_calls[{j}]")
            calls.append(ToolCall(id=str(call.get("id", "")), name=function["name"],
                                  arguments=function.get("arguments") or "{}"))
        content = item.get("content")
        return AssistantMessage(content=None if content is None else text_parts(content, where, _TEXT), tool_calls=calls)
    if role == "tool":
        if "tool_call_id" not in item:
            raise WireError(f"{where}: a tool message needs a tool_call_id", f"{where}.tool_call_id")
        return ToolMessage(tool_call_id=str(item["tool_call_id"]), content=text_parts(item.get("content"), where, _TEXT),
                           name=item.get("name"))
    raise WireError(f"{where}: unknown role {role!r} (use system, developer, user, assistant or tool)", f"{where}.role")


def parse_request(body: Any, seen: list[tuple[Any, Any]] | None = None) -> Request:
    """A chat-completions request body as a rollkit `Request`. Fields other
    than messages, tools, model and streaming go through untouched in
    `params`, except the SDK's transport options (SDK_OPTIONS), dropped.

    `seen`: (wire dict, message) pairs of the rollout's previous request and
    reply, in order. A message equal to its place there is that message
    object, not a new one: a program resends its whole history every call,
    and building it anew (and then comparing it with the ledger field by
    field) made each call cost time in the length of the conversation."""
    if not isinstance(body, dict):
        raise WireError("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("'messages' must be a non-empty list", "messages")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise WireError("'tools' must be a list of objects", "tools")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise WireError("'stream' must be true or false", "stream")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise WireError("'stream_options' must be an object, e.g. {\"include_usage\": true}", "stream_options")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise WireError("'model' must be a string", "model")
    try:
        # Each message was validated as it was built and the other fields
        # checked above: validating the request again would walk the whole
        # history on every call.
        return Request.model_construct(
            messages=_messages(messages, seen or ()),
            tools=tools,
            model=body.get("model"),
            params={k: v for k, v in body.items() if k not in _WIRE_FIELDS and k not in SDK_OPTIONS},
        )
    except pydantic.ValidationError as exc:
        raise WireError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from exc


def _messages(items: list[Any], seen: Any) -> list[Any]:
    """The messages of `items`, reusing `seen`'s for the prefix they share
    (only a prefix: the trace's ledger takes an identical last message to
    mean an identical history)."""
    n = min(len(items), len(seen))
    same = n if n and items[:n] == [raw for raw, _ in seen[:n]] else 0  # one comparison in C, the usual case
    if same < n:
        while seen[same][0] == items[same]:
            same += 1
    return [message for _, message in seen[:same]] + [_message(item, i) for i, item in enumerate(items) if i >= same]


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


def wire_logprobs(tokens: Any) -> dict[str, Any] | None:
    """A response's `TokenLogprobs` as a choice's `logprobs` (OpenAI's
    shape); a token known only by its id is written "token_id:N", as vLLM
    writes it."""
    if tokens is None or tokens.logprobs is None:
        return None
    n = len(tokens.logprobs)
    text = tokens.text or [f"token_id:{i}" for i in tokens.ids or ()]
    if len(text) != n:
        return None
    tops_p = tokens.top_logprobs or [[] for _ in range(n)]
    tops_t = tokens.top_text or [[f"token_id:{i}" for i in row] for row in tokens.top_ids or [[]] * n]
    known = tokens.text is not None  # else the bytes of "token_id:N" would be no token's
    content = []
    for token, logprob, alt_p, alt_t in zip(text, tokens.logprobs, tops_p, tops_t):
        content.append({"token": token, "logprob": logprob, "bytes": list(token.encode()) if known else None,
                        "top_logprobs": [{"token": t, "logprob": p,
                                          "bytes": list(t.encode()) if tokens.top_text is not None else None}
                                         for t, p in zip(alt_t, alt_p)]})
    return {"content": content, "refusal": None}


def _with_tokens(payload: dict[str, Any], response: Response, params: dict[str, Any]) -> dict[str, Any]:
    """Add what the request asked of the tokens (see the module's doc)."""
    tokens = response.tokens
    choice = payload["choices"][0]
    if params.get("logprobs"):
        choice["logprobs"] = wire_logprobs(tokens)
    if params.get("return_token_ids"):
        choice["token_ids"] = tokens.ids if tokens is not None else None
        payload["prompt_token_ids"] = tokens.prompt_ids if tokens is not None else None
    return payload


def completion_payload(response: Response, *, model: str, id: str) -> dict[str, Any]:
    """A `Response` as a chat.completion object."""
    message: dict[str, Any] = {"role": "assistant", "content": response.message.content}
    if response.message.tool_calls:
        message["tool_calls"] = _wire_calls(response.message)
    usage = response.usage
    prompt, completion = usage.input_tokens or 0, usage.output_tokens or 0
    return {
        "id": id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": response.finish_reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens or 0},
        },
    }


class ChatDialect(Dialect):
    name = "chat"
    title = "chat-completions"
    path = "/v1/chat/completions"

    def parse(self, body: Any, memory: dict[str, Any]) -> Parsed:
        request = parse_request(body, memory.get(_SEEN))
        # Kept for the next call (parse_request): this request's messages,
        # then the reply (payload) as the program will send it back.
        memory[_SEEN] = list(zip(body["messages"], request.messages))
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Parsed(request, stream=bool(body.get("stream")), options={"include_usage": usage})

    def payload(self, response: Response, parsed: Parsed, *, model: str, id: str, memory: dict[str, Any]) -> dict[str, Any]:
        payload = _with_tokens(completion_payload(response, model=model, id=f"chatcmpl-{id}"), response,
                               parsed.request.params)
        seen = memory.get(_SEEN)
        if seen is not None and len(seen) == len(parsed.request.messages):
            seen.append((payload["choices"][0]["message"], response.message))
        return payload

    def events(self, payload: dict[str, Any], parsed: Parsed) -> list[bytes]:
        head = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
                "model": payload["model"]}

        def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> bytes:
            return sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None,
                                             **more}]})

        choice = payload["choices"][0]
        message = choice["message"]
        # vLLM sends the prompt's ids with the first chunk; the reply's tokens
        # come here whole with the finish reason (the SDK's stream helpers
        # join a choice's logprobs across chunks).
        first = sse({**head, "prompt_token_ids": payload["prompt_token_ids"],
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                                  "logprobs": None}]}) if "prompt_token_ids" in payload else None
        out = [first or chunk({"role": "assistant", "content": ""})]
        out += [chunk({"content": piece}) for piece in chunks_of(message["content"] or "", 64) if piece]
        for i, call in enumerate(message.get("tool_calls") or []):
            # The id and name first, then the arguments in pieces (the SDK's
            # stream helpers accumulate them).
            first = {"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"], "arguments": ""}}
            out.append(chunk({"tool_calls": [first]}))
            for piece in chunks_of(call["function"]["arguments"], 24):
                out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
        out.append(chunk({}, choice["finish_reason"], **{k: choice[k] for k in ("logprobs", "token_ids") if k in choice}))
        if parsed.options.get("include_usage"):
            out.append(sse({**head, "choices": [], "usage": payload["usage"]}))
        out.append(b"data: [DONE]\n\n")
        return out


CHAT = ChatDialect()
