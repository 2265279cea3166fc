"""`OpenAIModel`: any OpenAI-compatible chat-completions endpoint as a rollkit Model.

This module owns the translation between rollkit's `Request`/`Response` and the
official `openai` SDK's chat-completions call, the pool of SDK clients (one
keep-alive client per endpoint and event loop, shared by every model pointing
there), and the mapping of provider failures onto `ProviderError` with an HTTP
status: a transport fault is a 503, a timeout a 504, an answer that is not a
chat completion a 502, and an error status keeps its own. With
`logprobs=True` it asks for the reply's logprobs and keeps them, with the
token ids a vLLM server adds, as the response's `tokens` (see
`_token_logprobs`). A prompt longer than
the context window raises `ContextLengthExceeded`, whose `stop_condition`
makes the session end the rollout as a clean stop "context_length".

It must not know about rollouts, budgets or hooks: the session that calls it
does. It is imported only when an `OpenAIModel` is first used, so `import
rollkit` never loads the SDK.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import os
import re
import weakref
from typing import Any

import openai

from ..core.checks import seconds, whole
from ..core.errors import ProviderError, UsageError
from ..core.messages import AssistantMessage, Request, Response, TokenLogprobs, ToolCall, Usage
from ..core.models import Model
from .dialects.chat import SDK_OPTIONS

__all__ = ["OpenAIModel", "ContextLengthExceeded", "close_pools", "MAX_LOGPROBS"]

# Logprob values one reply may carry (tokens plus alternatives): a 24k-token
# reply with top_logprobs=20 holds 504k; about 50 bytes each on the wire.
MAX_LOGPROBS = 1 << 19


class ContextLengthExceeded(ProviderError):
    """The prompt outgrew the model's context window. Not a failure: the
    session turns it into the clean stop `context_length`."""

    stop_condition = "context_length"


# Providers word this differently (OpenAI's code, vLLM's and Ollama's prose).
_CONTEXT_CODES = {"context_length_exceeded", "string_above_max_length"}
_CONTEXT_WORDS = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|input is too long",
    re.IGNORECASE,
)

# The SDK's per-call transport options (SDK_OPTIONS) are never taken from a
# request's params: a request may come from an agent program (through the
# interception server), which must not choose headers (Authorization!),
# query, body or timeout of the host's provider call. The host sets them in
# OpenAIModel(params=...).
# What create() takes as keyword arguments; any other field (vLLM's top_k,
# repetition_penalty, ...) goes in the JSON body through extra_body, where a
# keyword would raise TypeError.
_CREATE_FIELDS = frozenset(
    name
    for name in inspect.signature(openai.resources.chat.completions.AsyncCompletions.create).parameters
    if name != "self"
) - SDK_OPTIONS


def _call_arguments(host: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """create() keyword arguments from the host's params and a request's."""
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for source, trusted in ((host, True), (request, False)):
        for key, value in source.items():
            if key in _CREATE_FIELDS:
                kwargs[key] = value
            elif key in SDK_OPTIONS:
                if not trusted:
                    continue  # see SDK_OPTIONS
                if key == "extra_body":
                    extra.update(value or {})
                else:
                    kwargs[key] = value
            else:
                extra[key] = value
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


# One SDK client per (loop, endpoint, key, timeout, retries): an httpx pool is
# bound to the loop that opened its connections, so clients are not shared
# across loops, and keyed weakly so a closed loop's clients go with it. Each
# loop's clients are closed when the loop shuts down (asyncio.run's end,
# through its async-generator shutdown), so no connection outlives its loop;
# a loop that never ends (a notebook kernel) keeps them for reuse.
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, openai.AsyncOpenAI]] = (
    weakref.WeakKeyDictionary()
)
_closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _loop_pool() -> dict[tuple, openai.AsyncOpenAI]:
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = _pools[loop] = {}
        closer = _close_at_shutdown(pool)
        # Held here: the loop keeps its async generators only weakly.
        _closers[loop] = closer
        loop.create_task(_start(closer))
    return pool


async def _start(closer: Any) -> None:
    await closer.__anext__()  # runs it to its yield; the loop now knows it


async def _close_at_shutdown(pool: dict[tuple, openai.AsyncOpenAI]) -> Any:
    """Suspended for the loop's life; the loop's async-generator shutdown
    closes it, which closes the pool's clients."""
    try:
        yield
    finally:
        clients = list(pool.values())
        pool.clear()
        for client in clients:
            await client.close()


def _pool_key(base_url: str, api_key: str, timeout: float, max_retries: int) -> tuple:
    # The key itself is not kept in the pool's keys: only a digest of it.
    digest = hashlib.sha256(api_key.encode()).hexdigest()[:16]
    return (base_url, digest, timeout, max_retries)


async def close_pools() -> None:
    """Close every pooled client of the running event loop (the next call
    opens a new one)."""
    pool = _pools.get(asyncio.get_running_loop(), {})
    clients = list(pool.values())
    pool.clear()
    for client in clients:
        await client.close()


class OpenAIModel(Model):
    """A chat model behind an OpenAI-compatible endpoint (OpenAI, vLLM,
    Ollama, ...). `base_url` and `api_key` default to the environment's
    `OPENAI_BASE_URL` and `OPENAI_API_KEY`. `params` are sampling parameters
    sent with every call (a request's own `params` win). `max_retries` is the
    SDK's retry count for 429s, 5xx and dropped connections. Fields the SDK
    has no keyword for (vLLM's `top_k`, ...) are sent in the request body; the
    SDK's transport options (`extra_headers`, `extra_query`, `extra_body`,
    `timeout`) are honoured from `params` only, never from a request.

    `logprobs=True` asks every call for the reply's token logprobs
    (`top_logprobs=N`: and the N likeliest alternatives at each token) and
    keeps them on the trace (`ModelCall.tokens`); `token_ids=True` also
    asks a vLLM server for the prompt's and the reply's token ids (its
    `return_token_ids`, which OpenAI's own API refuses). A program's
    request may ask for more, never for less.

    `max_logprobs` bounds the logprob values (tokens and alternatives) one
    reply may carry, by default `MAX_LOGPROBS` (524,288: tens of megabytes of JSON): a
    reply with more is a ProviderError (a 502 to a program behind the
    interception server) naming the limit, and nothing of it is kept.

    `output_limit` is the most output tokens a call may produce when it
    sends no `max_tokens` (the model's or server's limit), for a hard
    dollar cap (`RolloutLimits(cost_cap="hard")`). Priced by the public
    table: by the endpoint's provider where the table knows `base_url`, else
    by the model's name alone, which for another endpoint (a local server,
    a proxy) is an estimate the trace marks (rollkit.core.prices).

    Call `await model.aclose()` when done to close its pooled connections.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        max_retries: int = 2,
        params: dict[str, Any] | None = None,
        name: str | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        token_ids: bool = False,
        output_limit: int | None = None,
        max_logprobs: int = MAX_LOGPROBS,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"OpenAIModel needs a model name such as 'gpt-4o-mini', got {model!r}")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not api_key:
            raise ValueError(
                f"OpenAIModel {model!r} has no API key: pass api_key=... or set OPENAI_API_KEY "
                "(for a local server that needs none, pass any string, e.g. api_key='none')"
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout = seconds("OpenAIModel", "timeout", timeout, zero=False)
        self.max_retries = whole("OpenAIModel", "max_retries", max_retries)
        self.params = dict(params or {})
        self.name = name or model
        self.logprobs, self.top_logprobs, self.token_ids = _token_options(model, logprobs, top_logprobs, token_ids)
        self.max_logprobs = whole("OpenAIModel", "max_logprobs", max_logprobs, minimum=1)
        self._output_limit = None if output_limit is None else whole("OpenAIModel", "output_limit", output_limit,
                                                                     minimum=1)

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "type": type(self).__name__, "base_url": self.base_url}

    def sent_params(self, request: Request) -> dict[str, Any]:
        return {**self.params, **request.params} if self.params else request.params

    def price_ref(self) -> tuple[str, str | None]:
        # The endpoint names the provider when the table knows it (OpenAI,
        # OpenRouter, ...); elsewhere the model name does (rollkit.core.prices).
        return (self.model, self.base_url)

    def output_limit(self) -> int | None:
        """`output_limit` as given, else the `max_tokens` (or
        `max_completion_tokens`) of the model's default `params`."""
        if self._output_limit is not None:
            return self._output_limit
        for key in ("max_tokens", "max_completion_tokens"):
            if isinstance(self.params.get(key), int):
                return self.params[key]
        return None

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, base_url={self.base_url!r})"

    # ---- the pooled client ------------------------------------------------
    def _client(self) -> openai.AsyncOpenAI:
        pool = _loop_pool()
        key = _pool_key(self.base_url, self._api_key, self.timeout, self.max_retries)
        client = pool.get(key)
        if client is None:
            client = pool[key] = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
        return client

    async def aclose(self) -> None:
        """Close this endpoint's pooled connections in the running loop (every
        OpenAIModel on the same endpoint shares them; the next call reopens)."""
        pool = _pools.get(asyncio.get_running_loop(), {})
        client = pool.pop(_pool_key(self.base_url, self._api_key, self.timeout, self.max_retries), None)
        if client is not None:
            await client.close()

    # ---- the call -----------------------------------------------------------
    async def complete(self, request: Request) -> Response:
        body = _call_arguments(self.params, request.params)
        body["model"] = self.model
        body["messages"] = [to_openai_message(m) for m in request.messages]
        if request.tools:
            body["tools"] = request.tools
        body.pop("stream", None)  # this model reads whole answers
        self._ask_tokens(body)
        try:
            completion = await self._client().chat.completions.create(**body)
        except openai.APITimeoutError as exc:
            raise ProviderError(
                f"model endpoint {self.base_url} did not answer within {self.timeout}s "
                f"(model {self.model!r}); raise OpenAIModel(timeout=...) or check the server's load",
                status=504,
            ) from exc
        except openai.APIConnectionError as exc:
            raise ProviderError(
                f"cannot reach the model endpoint {self.base_url} (model {self.model!r}): "
                f"{_cause(exc)}; check base_url and that the server is running",
                status=503,
            ) from exc
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except (openai.APIResponseValidationError, ValueError) as exc:
            raise ProviderError(
                f"model endpoint {self.base_url} sent an answer that is not a chat completion "
                f"(model {self.model!r}): {type(exc).__name__}: {exc}",
                status=502,
            ) from exc
        return self._response(completion)

    def _ask_tokens(self, body: dict[str, Any]) -> None:
        """Ask for what `logprobs`, `top_logprobs` and `token_ids` want,
        whatever the request said (a request may ask for more)."""
        if self.logprobs:
            body["logprobs"] = True
            if self.top_logprobs and (body.get("top_logprobs") or 0) < self.top_logprobs:
                body["top_logprobs"] = self.top_logprobs
        if self.token_ids:
            body["extra_body"] = {**body.get("extra_body", {}), "return_token_ids": True}

    def _status_error(self, exc: openai.APIStatusError) -> ProviderError:
        status = exc.status_code
        detail = _error_text(exc)
        where = f"model endpoint {self.base_url} (model {self.model!r})"
        if status in (400, 413, 422) and (exc.code in _CONTEXT_CODES or _CONTEXT_WORDS.search(detail)):
            return ContextLengthExceeded(
                f"the prompt is longer than the context window of {where}: {detail}", status=status
            )
        hint = {
            401: "check the API key (api_key=... or OPENAI_API_KEY)",
            403: "the key is not allowed to use this model",
            404: f"check the model name {self.model!r} and that base_url ends with the API root (often /v1)",
            429: "rate limited even after retries; lower the concurrency or raise max_retries",
        }.get(status, "the provider rejected the call" if status < 500 else "the provider failed")
        return ProviderError(f"{where} answered HTTP {status}: {detail}; {hint}", status=status)

    def _response(self, completion: Any) -> Response:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise ProviderError(
                f"model endpoint {self.base_url} answered without any choice (model {self.model!r})", status=502
            )
        choice = choices[0]
        message = choice.message
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
            for c in (message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        return Response(
            message=AssistantMessage(content=message.content, tool_calls=calls, reasoning=_reasoning(message)),
            usage=_usage(completion.usage),
            finish_reason=choice.finish_reason or ("tool_calls" if calls else "stop"),
            model=completion.model or self.model,
            id=getattr(completion, "id", None) or None,
            tokens=self._tokens(completion, choice),
        )

    def _tokens(self, completion: Any, choice: Any) -> TokenLogprobs | None:
        content = getattr(getattr(choice, "logprobs", None), "content", None) or []
        held = len(content) + sum(len(getattr(entry, "top_logprobs", None) or ()) for entry in content)
        if held > self.max_logprobs:
            # Checked before anything is kept: the trace, the frames and the
            # interception server's answer would each hold them again.
            raise ProviderError(
                f"model endpoint {self.base_url} sent a reply whose logprobs hold {held:,} values (its tokens and "
                f"their alternatives), more than this model keeps ({self.max_logprobs:,}, "
                "OpenAIModel(max_logprobs=...)): ask for fewer top_logprobs or a shorter reply (max_tokens)",
                status=502)
        try:
            return _token_logprobs(completion, choice)
        except (TypeError, ValueError, AttributeError) as exc:
            raise ProviderError(
                f"model endpoint {self.base_url} sent logprobs that are not OpenAI's shape (model {self.model!r}): "
                f"{type(exc).__name__}: {exc}", status=502) from exc


def _token_options(model: str, logprobs: Any, top_logprobs: Any, token_ids: Any) -> tuple[bool, int | None, bool]:
    for name, value in (("logprobs", logprobs), ("token_ids", token_ids)):
        if not isinstance(value, bool):
            raise UsageError(f"OpenAIModel {model!r}: {name} is True or False, got {value!r}")
    if top_logprobs is not None:
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or top_logprobs < 0:
            raise UsageError(f"OpenAIModel {model!r}: top_logprobs is how many alternatives to keep per token "
                             f"(a whole number, OpenAI allows 0 to 20), got {top_logprobs!r}")
        if not logprobs:
            raise UsageError(f"OpenAIModel {model!r}: top_logprobs={top_logprobs} needs logprobs=True "
                             "(the endpoint returns alternatives only with the logprobs)")
    return logprobs, top_logprobs, token_ids


# vLLM's "token_id:N" token strings (return_tokens_as_token_ids).
_TOKEN_ID = re.compile(r"token_id:(-?\d+)")


def _token_logprobs(completion: Any, choice: Any) -> TokenLogprobs | None:
    """The token ids and logprobs of a completion, where it holds them.

    The shapes, as vLLM documents them (vllm/entrypoints/openai/
    chat_completion/protocol.py: ChatCompletionResponse,
    ChatCompletionResponseChoice, ChatCompletionRequest):
    `choices[i].logprobs.content[j]` = {token, logprob, bytes,
    top_logprobs: [{token, logprob, bytes}]} (OpenAI's own shape);
    `choices[i].token_ids` and top-level `prompt_token_ids` when the request
    set `return_token_ids`; tokens written "token_id:N" when it set
    `return_tokens_as_token_ids`. SGLang puts `prompt_token_ids` on the
    choice beside `token_ids` (python/sglang/srt/entrypoints/openai/
    protocol.py: ChatCompletionResponseChoice). The SDK keeps these fields
    as extras."""
    extra = getattr(choice, "model_extra", None) or {}
    prompt_ids = _ints((getattr(completion, "model_extra", None) or {}).get("prompt_token_ids")) or _ints(
        extra.get("prompt_token_ids"))
    ids = _ints(extra.get("token_ids"))
    content = getattr(getattr(choice, "logprobs", None), "content", None) or []
    text = [entry.token for entry in content]
    logprobs = [float(entry.logprob) for entry in content] if content else None
    as_ids = _ints([_token_id(t) for t in text]) if text else None
    if as_ids is not None:  # the tokens are ids, not text
        ids, text = ids or as_ids, None
    tops = [entry.top_logprobs or [] for entry in content]
    top_logprobs = top_text = top_ids = None
    if any(tops):
        top_logprobs = [[float(alt.logprob) for alt in alts] for alts in tops]
        top_text = [[alt.token for alt in alts] for alts in tops]
        top_as_ids = [[_token_id(t) for t in row] for row in top_text]
        if all(i is not None for row in top_as_ids for i in row):
            top_ids, top_text = top_as_ids, None
    if prompt_ids is None and ids is None and logprobs is None:
        return None
    return TokenLogprobs(prompt_ids=prompt_ids, ids=ids, text=text or None, logprobs=logprobs,
                         top_logprobs=top_logprobs, top_text=top_text, top_ids=top_ids)


def _token_id(token: str) -> int | None:
    match = _TOKEN_ID.fullmatch(token)
    return int(match.group(1)) if match else None


def _ints(values: Any) -> list[int] | None:
    """A list of whole numbers, or None (not given, or not such a list)."""
    if not isinstance(values, list) or not values:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return list(values)


def _usage(usage: Any) -> Usage:
    """The provider's usage; what it did not report stays None (never 0)."""
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    reply = getattr(usage, "completion_tokens_details", None)
    return Usage(
        input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
        cache_read_tokens=getattr(details, "cached_tokens", None) if details is not None else None,
        reasoning_tokens=getattr(reply, "reasoning_tokens", None) if reply is not None else None,
    )


def _reasoning(message: Any) -> str | None:
    """The thinking an OpenAI-compatible server returned beside the answer:
    `reasoning_content` (vLLM, DeepSeek) or `reasoning` (OpenRouter, Ollama),
    fields the SDK keeps as extras."""
    extra = getattr(message, "model_extra", None) or {}
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None) or extra.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def to_openai_message(message: Any) -> dict[str, Any]:
    """A rollkit message as a chat-completions message dict."""
    role = message.role
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in message.tool_calls
            ]
        return out
    if role == "tool":
        out = {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
        if message.name:
            out["name"] = message.name
        return out
    return {"role": role, "content": message.content}


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__
    if inner is None:
        return str(exc)
    return f"{type(inner).__name__}: {inner}" if str(inner) else type(inner).__name__


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        return json.dumps(body)[:500]
    return (str(body) if body else exc.message)[:500]
