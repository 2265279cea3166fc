"""Google's Gemini API (generateContent): what the google-genai SDKs, Gemini CLI and ADK speak.

Routes (under `/v1beta`, also `/v1` and `/v1alpha`, as the SDKs' `api_version`
picks): `POST /models/{model}:generateContent`, `:streamGenerateContent`
(server-sent events with `?alt=sse`, else one streamed JSON array, as the
API does), `:countTokens`, and `GET /models` / `GET /models/{model}`. The
model named in the path is the request's model.

Read: `contents` (roles `user` and `model`; parts `text`, `functionCall`,
`functionResponse`; a `thought` part is skipped, `thoughtSignature` ignored,
inline or file data refused), `systemInstruction` (a content or a string),
`tools[].functionDeclarations` (`parameters` in Google's OpenAPI subset, whose
upper-case types become JSON Schema's, or `parametersJsonSchema`),
`toolConfig.functionCallingConfig` (`mode` AUTO, ANY, NONE, VALIDATED, and
`allowedFunctionNames`), `generationConfig` (temperature, topP, topK,
maxOutputTokens, stopSequences, seed, presence and frequency penalties go to
the model; the rest, thinking config and response schema included, is
accepted and not used). The key comes as Google's clients send it:
`x-goog-api-key`, `?key=`, or a bearer token.

Written: a `GenerateContentResponse` with one candidate whose parts are the
text and one `functionCall` per tool call (several at once for parallel
calls, each with its `id`), `finishReason` (STOP, MAX_TOKENS, SAFETY) and
`usageMetadata`. A stream sends the text in pieces and the function calls
whole in the last chunk, which carries the finish reason and the usage, as
the API does. Errors are `{"error": {"code", "message", "status"}}` with the
gRPC status name Google's clients read.

A function call's arguments come back as a JSON object, and a client may drop
the call's `id`: the text the model wrote is kept per call in the rollout's
memory (by id, and by name and arguments for a call that lost its id), so
the conversation the trace records is the one the model saw, to the
character. A `functionResponse` without an id answers the oldest unanswered
call of its name.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from ...core.messages import AssistantMessage, Request, Response, SystemMessage, ToolCall, ToolMessage, UserMessage
from ._base import Dialect, Parsed, WireError, chunks_of, estimated_tokens, function_tool, named_tool_choice, sse

__all__ = ["GEMINI", "GeminiDialect"]

_CALLS = "gemini.calls"  # memory key: call id -> (name, the arguments text the model wrote)
_BY_CONTENT = "gemini.by_content"  # memory key: (name, canonical arguments) -> call id, for a call sent back without id
_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
# The gRPC status names Google's error bodies carry for each HTTP status.
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           405: "UNIMPLEMENTED", 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 410: "FAILED_PRECONDITION",
           413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
           501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
_MODES = {"AUTO": "auto", "VALIDATED": "auto", "MODE_UNSPECIFIED": "auto", "ANY": "required", "NONE": "none"}
_PARAMS = {"temperature": "temperature", "topP": "top_p", "topK": "top_k", "maxOutputTokens": "max_tokens",
           "stopSequences": "stop", "seed": "seed", "presencePenalty": "presence_penalty",
           "frequencyPenalty": "frequency_penalty"}
METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def _field(obj: dict[str, Any], name: str, default: Any = None) -> Any:
    """`obj[name]` under its camelCase name or its snake_case one: Google's
    JSON reader takes both, and the Python SDK sends some fields
    (`parameters_json_schema`) in snake case."""
    if name in obj:
        return obj[name]
    return obj.get(re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name), default)


def _canonical(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"))


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _json_schema(schema: Any) -> Any:
    """Google's OpenAPI-subset schema as JSON Schema: its types are upper case
    (OBJECT, STRING) where JSON Schema's are lower case."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _json_schema(s) for name, s in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf", "additionalProperties", "not"):
            out[key] = _json_schema(value)
        else:
            out[key] = value
    return out


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise WireError("tools: must be a list of tools", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise WireError(f"tools[{i}]: must be an object", f"tools[{i}]")
        others = sorted(k for k in tool if k not in ("functionDeclarations", "function_declarations") and tool[k] is not None)
        if others:
            raise WireError(f"tools[{i}]: {', '.join(others)} is not served here (function declarations only: "
                            "the interception server runs no Google-hosted tools)", f"tools[{i}].{others[0]}")
        declarations = _field(tool, "functionDeclarations") or []
        if not isinstance(declarations, list):
            raise WireError(f"tools[{i}].functionDeclarations: must be a list", f"tools[{i}].functionDeclarations")
        for j, declaration in enumerate(declarations):
            where = f"tools[{i}].functionDeclarations[{j}]"
            if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
                raise WireError(f"{where}.name: a function declaration needs a name", f"{where}.name")
            schema = _field(declaration, "parametersJsonSchema")
            if schema is None:
                schema = _json_schema(declaration.get("parameters"))
            out.append(function_tool(declaration["name"], schema, declaration.get("description")))
    return out


def _tool_choice(config: Any, tools: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """`toolConfig` as rollkit's tool choice, and the tools the model may call."""
    calling = _field(config, "functionCallingConfig") if isinstance(config, dict) else None
    if calling is None:
        return None, tools
    if not isinstance(calling, dict):
        raise WireError("toolConfig.functionCallingConfig: must be an object", "toolConfig.functionCallingConfig")
    mode = calling.get("mode", "AUTO")
    if mode not in _MODES:
        raise WireError(f"toolConfig.functionCallingConfig.mode: {mode!r} is not one of {', '.join(_MODES)}",
                        "toolConfig.functionCallingConfig.mode")
    allowed = _field(calling, "allowedFunctionNames")
    if allowed:
        names = {t["function"]["name"] for t in tools}
        unknown = [n for n in allowed if n not in names]
        if unknown:
            raise WireError(f"toolConfig.functionCallingConfig.allowedFunctionNames: {unknown} are not declared "
                            "in tools", "toolConfig.functionCallingConfig.allowedFunctionNames")
        if mode == "ANY":
            tools = [t for t in tools if t["function"]["name"] in allowed]
            if len(allowed) == 1:
                return named_tool_choice(allowed[0]), tools
    return _MODES[mode], tools


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(content, dict):
        raise WireError(f"{where}: must be a content object with parts", where)
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise WireError(f"{where}.parts: must be a list of parts", f"{where}.parts")
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise WireError(f"{where}.parts[{j}]: a part is an object", f"{where}.parts[{j}]")
    return parts


def _kind(part: dict[str, Any]) -> str:
    for kind in ("text", "functionCall", "functionResponse", "inlineData", "fileData", "executableCode",
                 "codeExecutionResult"):
        if _field(part, kind) is not None:
            return kind
    return "empty"


def _result_text(response: Any) -> str:
    """A functionResponse's `response` as the tool message's text: the one
    string it wraps (`output`, `result`, `content`), or its JSON."""
    if isinstance(response, dict) and len(response) == 1:
        [(key, value)] = response.items()
        if key in ("output", "result", "content") and isinstance(value, str):
            return value
        if key == "error" and isinstance(value, str):
            return f"error: {value}"
    return response if isinstance(response, str) else json.dumps(response)


class _Ledger:
    """Matches the calls and results a client sends back to what the model wrote."""

    def __init__(self, memory: dict[str, Any]) -> None:
        self.calls: dict[str, tuple[str, str]] = memory.get(_CALLS, {})
        self.by_content: dict[tuple[str, str], str] = memory.get(_BY_CONTENT, {})
        self.unanswered: list[tuple[str, str]] = []  # (id, name), oldest first
        self.made = 0

    def call(self, part: dict[str, Any], where: str) -> ToolCall:
        call = _field(part, "functionCall")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise WireError(f"{where}.functionCall.name: a function call needs a name", f"{where}.functionCall.name")
        name, given = call["name"], call.get("args") or {}
        id = call.get("id")
        if not (isinstance(id, str) and id):
            id = self.by_content.get((name, _canonical(given)))
        if id is None:
            self.made += 1
            id = f"{name}-{self.made}"
        written = self.calls.get(id)
        same = written is not None and written[0] == name and _loads(written[1]) == given
        self.unanswered.append((id, name))
        return ToolCall(id=id, name=name, arguments=written[1] if same else json.dumps(given))

    def result(self, part: dict[str, Any], where: str) -> ToolMessage:
        result = _field(part, "functionResponse")
        if not isinstance(result, dict) or not isinstance(result.get("name"), str):
            raise WireError(f"{where}.functionResponse.name: a function response needs a name",
                            f"{where}.functionResponse.name")
        name, id = result["name"], result.get("id")
        if isinstance(id, str) and id:
            self.unanswered = [(i, n) for i, n in self.unanswered if i != id]
        else:
            id = next((i for i, n in self.unanswered if n == name), None)
            if id is None:
                raise WireError(f"{where}.functionResponse: no earlier functionCall of {name!r} is left to answer "
                                "(send the call's id)", f"{where}.functionResponse.id")
            self.unanswered.remove((id, name))
        return ToolMessage(tool_call_id=id, content=_result_text(result.get("response")), name=name)


class GeminiDialect(Dialect):
    name = "gemini"
    title = "generateContent"
    path = "/v1beta/models/{model}:generateContent"  # as error messages name it; the routes are below
    route = r"/{version:v1beta|v1|v1alpha}/models/{target:[^/]+}"
    list_route = "/{version:v1beta|v1|v1alpha}/models"
    key_name = "API key (x-goog-api-key, ?key= or a bearer token)"
    key_hint = "set GEMINI_API_KEY to the rollout's secret (ProgramHarness sets it for the program)"

    def token(self, request: web.Request) -> str | None:
        key = request.headers.get("x-goog-api-key", "").strip() or request.query.get("key", "").strip()
        return key or super().token(request)

    @staticmethod
    def target(request: web.Request) -> tuple[str, str]:
        """The model and the method a path names: `models/m:generateContent` -> (m, generateContent)."""
        model, _, method = request.match_info.get("target", "").rpartition(":")
        return model, method

    def parse_call(self, request: web.Request, body: Any, memory: dict[str, Any]) -> Parsed:
        model, method = self.target(request)
        parsed = self.parse(body, memory, model=model)
        if method == "streamGenerateContent":
            parsed.stream = True
            if request.query.get("alt") != "sse":
                parsed.options["content_type"] = "application/json"  # one JSON array, written as it goes
        return parsed

    def _messages(self, body: dict[str, Any], memory: dict[str, Any]) -> list[Any]:
        messages: list[Any] = []
        system = _field(body, "systemInstruction")
        if isinstance(system, str):
            messages.append(SystemMessage(content=system))
        elif system is not None:
            texts = [str(p.get("text", "")) for p in _parts(system, "systemInstruction")]
            messages.append(SystemMessage(content="\n".join(texts)))
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise WireError("contents: must be a non-empty list of contents", "contents")
        ledger = _Ledger(memory)
        for i, content in enumerate(contents):
            where = f"contents[{i}]"
            parts = _parts(content, where)
            role = content.get("role") or "user"
            if role == "model":
                texts, calls = [], []
                for j, part in enumerate(parts):
                    kind = _kind(part)
                    if part.get("thought") or kind == "empty":
                        continue  # thinking, or only a thought signature
                    if kind == "text":
                        texts.append(str(part["text"]))
                    elif kind == "functionCall":
                        calls.append(ledger.call(part, f"{where}.parts[{j}]"))
                    else:
                        raise WireError(f"{where}.parts[{j}]: a {kind} part is not supported in a model turn "
                                        "(text and functionCall only)", f"{where}.parts[{j}].{kind}")
                messages.append(AssistantMessage(content="".join(texts) if texts else None, tool_calls=calls))
            elif role in ("user", "function"):
                results, texts = [], []
                for j, part in enumerate(parts):
                    kind = _kind(part)
                    if kind == "functionResponse":
                        results.append(ledger.result(part, f"{where}.parts[{j}]"))
                    elif kind == "text":
                        if not part.get("thought"):
                            texts.append(str(part["text"]))
                    elif kind != "empty":
                        raise WireError(f"{where}.parts[{j}]: a {kind} part is not supported (text, functionCall "
                                        "and functionResponse only)", f"{where}.parts[{j}].{kind}")
                messages.extend(results)
                if texts:
                    messages.append(UserMessage(content="".join(texts)))
            else:
                raise WireError(f"{where}.role: must be 'user' or 'model', got {role!r}", f"{where}.role")
        return messages

    def parse(self, body: Any, memory: dict[str, Any], *, model: str | None = None) -> Parsed:
        if not isinstance(body, dict):
            raise WireError("the body must be a JSON object")
        config = _field(body, "generationConfig") or {}
        if not isinstance(config, dict):
            raise WireError("generationConfig: must be an object", "generationConfig")
        count = _field(config, "candidateCount", 1)
        if count not in (None, 1):
            raise WireError(f"generationConfig.candidateCount: {count!r}; this server answers one candidate",
                            "generationConfig.candidateCount")
        params = {ours: _field(config, theirs) for theirs, ours in _PARAMS.items() if _field(config, theirs) is not None}
        tools = _tools(body.get("tools"))
        choice, tools = _tool_choice(_field(body, "toolConfig"), tools)
        if choice is not None:
            params["tool_choice"] = choice
        request = Request(messages=self._messages(body, memory), tools=tools, model=model or body.get("model"),
                          params=params)
        return Parsed(request)

    def count(self, body: Any, memory: dict[str, Any]) -> dict[str, Any]:
        """`countTokens`: rollkit's token count (`rollkit.core.models.count_tokens`), an estimate."""
        if not isinstance(body, dict):
            raise WireError("the body must be a JSON object")
        inner = _field(body, "generateContentRequest")
        if isinstance(inner, dict):
            body = inner
        return {"totalTokens": estimated_tokens(self._messages(body, memory), _tools(body.get("tools")))}

    def payload(self, response: Response, parsed: Parsed, *, model: str, id: str, memory: dict[str, Any]) -> dict[str, Any]:
        message = response.message
        parts: list[dict[str, Any]] = []
        if message.content:
            parts.append({"text": message.content})
        calls = memory.setdefault(_CALLS, {})
        by_content = memory.setdefault(_BY_CONTENT, {})
        for call in message.tool_calls:
            arguments = _loads(call.arguments)
            arguments = arguments if isinstance(arguments, dict) else {}
            calls[call.id] = (call.name, call.arguments)
            by_content[(call.name, _canonical(arguments))] = call.id
            parts.append({"functionCall": {"id": call.id, "name": call.name, "args": arguments}})
        usage = response.usage
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0,
                            "finishReason": _FINISH.get(response.finish_reason, "STOP")}],
            "usageMetadata": {"promptTokenCount": usage.input_tokens, "candidatesTokenCount": usage.output_tokens,
                              "totalTokenCount": usage.input_tokens + usage.output_tokens},
            "modelVersion": model,
            "responseId": id,
        }

    def events(self, payload: dict[str, Any], parsed: Parsed) -> list[bytes]:
        [candidate] = payload["candidates"]
        parts = candidate["content"]["parts"]
        text = "".join(p["text"] for p in parts if "text" in p)
        calls = [p for p in parts if "functionCall" in p]
        head = {"modelVersion": payload["modelVersion"], "responseId": payload["responseId"]}
        pieces = chunks_of(text, 64) if text else []
        chunks = [{"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}], **head}
                  for piece in pieces]
        if calls or not chunks:
            chunks.append({"candidates": [{"content": {"role": "model", "parts": calls}, "index": 0}], **head})
        chunks[-1]["candidates"][0]["finishReason"] = candidate["finishReason"]
        chunks[-1]["usageMetadata"] = payload["usageMetadata"]
        if parsed.options.get("content_type") == "application/json":
            return [b"[", b",\r\n".join(json.dumps(c).encode() for c in chunks), b"]"]
        return [sse(c) for c in chunks]

    def error_body(self, status: int, message: str, kind: str, code: str | None,
                   param: str | None = None) -> dict[str, Any]:
        reason = (code or kind).upper()
        return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN"),
                          "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                                       "domain": "rollkit"}]}}

    def model_entry(self, model: str) -> dict[str, Any]:
        return {"name": f"models/{model}", "baseModelId": model, "version": "rollkit", "displayName": model,
                "description": "the model this rollout is served by rollkit's interception server",
                "supportedGenerationMethods": list(METHODS)}

    def models_body(self, model: str) -> dict[str, Any]:
        return {"models": [self.model_entry(model)]}


GEMINI = GeminiDialect()
