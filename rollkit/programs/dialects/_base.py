"""What every dialect provides, and the helpers they share."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ...core.messages import Request, Response
from ...core.models import count_tokens

__all__ = ["Dialect", "Parsed", "WireError", "sse", "chunks_of", "text_parts", "estimated_tokens"]

# Refusals and pipeline failures carry this so the openai and anthropic SDKs
# answer them once instead of retrying: a retry would only be refused again.
NO_RETRY = {"x-should-retry": "false"}


class WireError(ValueError):
    """A body the dialect cannot read; `field` names where (for the 400)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class Parsed:
    """A request read off the wire: rollkit's `Request`, whether to stream,
    and what the dialect needs to answer it (e.g. the Responses history)."""

    request: Request
    stream: bool = False
    options: dict[str, Any] = field(default_factory=dict)


class Dialect:
    """One API family. Subclasses set `name` and `path` and write `parse`,
    `payload`, `events` and `error_body`; `token` reads the bearer token."""

    name = "dialect"
    title = "dialect"  # as error messages name its requests
    path = "/"

    def token(self, request: web.Request) -> str | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return token.strip()

    def parse(self, body: Any, memory: dict[str, Any]) -> Parsed:
        raise NotImplementedError

    def parse_call(self, request: web.Request, body: Any, memory: dict[str, Any]) -> Parsed:
        """The call a request makes; a dialect whose path carries part of the
        call (Gemini's model and streaming) reads it here."""
        return self.parse(body, memory)

    def payload(self, response: Response, parsed: Parsed, *, model: str, id: str, memory: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def events(self, payload: dict[str, Any], parsed: Parsed) -> list[bytes]:
        """The payload as server-sent events, in the order the SDK reads them."""
        raise NotImplementedError

    def error_body(self, status: int, message: str, kind: str, code: str | None,
                   param: str | None = None) -> dict[str, Any]:
        """OpenAI's error shape (chat completions and Responses); `param`
        names the request field at fault."""
        return {"error": {"message": message, "type": kind, "param": param, "code": code or kind}}

    def error(self, status: int, message: str, kind: str, *, code: str | None = None,
              param: str | None = None) -> web.Response:
        return web.json_response(self.error_body(status, message, kind, code, param), status=status, headers=NO_RETRY)

    def models_body(self, model: str) -> dict[str, Any]:
        """`GET /v1/models` in OpenAI's shape: the one model the rollout serves."""
        return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "rollkit"}]}

    def unauthorized(self, missing: bool) -> web.Response:
        what = f"no {self.key_name}" if missing else f"a wrong {self.key_name}"
        return self.error(401, f"{what}: {self.key_hint}", "invalid_api_key")

    key_name = "bearer token"
    key_hint = "set OPENAI_API_KEY to the rollout's secret (ProgramHarness sets it for the program)"


def function_tool(name: str, parameters: Any, description: Any = None) -> dict[str, Any]:
    """A tool in rollkit's (chat completions) form; no schema means no arguments."""
    function = {"name": name, "parameters": parameters or {"type": "object", "properties": {}}}
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def named_tool_choice(name: Any) -> dict[str, Any]:
    """A tool choice that forces the tool `name`, in rollkit's form."""
    return {"type": "function", "function": {"name": name}}


def estimated_tokens(messages: list[Any], tools: list[dict[str, Any]]) -> int:
    """What a token-counting route answers: rollkit's documented count
    (`rollkit.core.models.count_tokens`) of the messages, plus the words of
    the tools' JSON. An estimate, not the provider's tokenizer."""
    return sum(count_tokens(m) for m in messages) + sum(len(json.dumps(t).split()) for t in tools)


def sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(data).encode() + b"\n\n"


def chunks_of(text: str, size: int) -> list[str]:
    """`text` in pieces of at most `size` characters (at least one piece), so
    a stream really arrives in deltas, as a provider's does."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def text_parts(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    """The text of a content that is a string or a list of text parts whose
    `type` is one of `kinds`; anything else (images, audio) is refused."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for i, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in kinds:
                out.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise WireError(f"{where}[{i}]: content part of type {kind!r} is not supported (text only)", where)
        return "".join(out)
    raise WireError(f"{where}: content must be a string or a list of text parts", where)
