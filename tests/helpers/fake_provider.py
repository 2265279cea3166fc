"""A fake remote model provider for OpenAIModel's tests.

A real aiohttp server on 127.0.0.1 speaking the chat-completions protocol. The
test queues behaviours; each request takes the next one (or "ok" when the
queue is empty):

- "ok": a chat completion echoing the last user message (tool calls when the
  last user message starts with "call "; when it starts with "think ", the
  reply carries `reasoning_content` and the usage a cached part, in
  `prompt_tokens_details.cached_tokens`, and reasoning tokens, in
  `completion_tokens_details.reasoning_tokens`, as vLLM and OpenAI send them; when
  it starts with "quiet ", the completion has no usage at all).
- "slow": waits on `release` (an event the test sets) before answering ok.
- "429", "500": that status with an OpenAI-shaped error body.
- "context_length": 400 with OpenAI's context_length_exceeded error.
- "malformed": 200, content-type JSON, body not JSON.
- "drop": closes the connection without answering.
- "bad_logprobs": ok, but each logprob the request asked for is a string.

Token ids and logprobs come in vLLM's documented response shape
(vllm/entrypoints/openai/chat_completion/protocol.py), each only when the
request asks: `logprobs` (and `top_logprobs`: k) gives
`choices[].logprobs.content[]` with token/logprob/bytes/top_logprobs (the
alternatives after the token itself are "alt1".."alt{k-1}", each 1 less
likely than the last); `return_token_ids` gives `choices[].token_ids` and a
top-level `prompt_token_ids` (on the choice, SGLang's place, when
`prompt_ids_on_the_choice` is set); `return_tokens_as_token_ids` writes
each token "token_id:N". Ids come from `vocab`, grown as tokens are first
seen; a prompt's ids are a begin-of-text 1 then the ids of its messages'
words. The reply's tokens are `replies[turn]` ((token, logprob) pairs; the
turn is the number of assistant messages in the request, cycling) when the
test gives `replies`, else the echo's words, each at logprob -0.5.

With nothing queued, a request whose last user message starts with
`fake:<behaviour>` gets that behaviour (every time it is asked, retries
included), so concurrent rollouts each bring their own fault.

Every request body is kept in `requests` (its headers in `headers`, its
query in `queries`) so tests assert what was sent, and every completion
answered in `answers`.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections import deque
from typing import Any

from aiohttp import web


class FakeProvider:
    def __init__(self, replies: list[list[tuple[str, float]]] | None = None) -> None:
        self.behaviours: deque[str] = deque()
        self.requests: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.replies = replies
        self.vocab: dict[str, int] = {}
        self.prompt_ids_on_the_choice = False
        self.headers: list[dict[str, str]] = []
        self.queries: list[dict[str, str]] = []
        self.release = asyncio.Event()
        self.slow_started = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> FakeProvider:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        return self

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def queue(self, *behaviours: str) -> None:
        self.behaviours.extend(behaviours)

    def id_of(self, token: str) -> int:
        return self.vocab.setdefault(token, 100 + len(self.vocab))

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        self.queries.append(dict(request.query))
        behaviour = self.behaviours.popleft() if self.behaviours else _asked(body)
        if behaviour == "slow":
            self.slow_started.set()
            await self.release.wait()
            behaviour = "ok"
        if behaviour in ("ok", "bad_logprobs"):
            answer = self._answer(body, garbled=behaviour == "bad_logprobs")
            self.answers.append(answer)
            return web.json_response(answer)
        if behaviour in ("429", "500"):
            status = int(behaviour)
            kind = "rate_limit_exceeded" if status == 429 else "server_error"
            # retry-after-ms 0 keeps the SDK's retries immediate in tests.
            return web.json_response(
                {"error": {"message": f"fake {kind}", "type": kind, "param": None, "code": kind}},
                status=status,
                headers={"retry-after-ms": "0"},
            )
        if behaviour == "context_length":
            message = (
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9000 tokens. Please reduce the length of the messages."
            )
            return web.json_response(
                {"error": {"message": message, "type": "invalid_request_error", "param": "messages",
                           "code": "context_length_exceeded"}},
                status=400,
            )
        if behaviour == "malformed":
            return web.Response(text='{"id": "chatcmpl-1", "choices": [', content_type="application/json")
        if behaviour == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        raise AssertionError(f"unknown fake behaviour {behaviour!r}")

    def _answer(self, body: dict[str, Any], garbled: bool) -> dict[str, Any]:
        """A completion, with the token ids and logprobs the request asked for."""
        answer = _completion(body)
        choice = answer["choices"][0]
        if self.replies is not None:
            turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
            reply = self.replies[turn % len(self.replies)]
            choice["message"] = {"role": "assistant", "content": "".join(t for t, _ in reply)}
        else:
            reply = [(t, -0.5) for t in re.findall(r"\s*\S+", choice["message"]["content"] or "")]
        as_ids = bool(body.get("return_tokens_as_token_ids"))

        def entry(token: str, logprob: Any) -> dict[str, Any]:
            shown = f"token_id:{self.id_of(token)}" if as_ids else token
            return {"token": shown, "logprob": logprob, "bytes": list(token.encode())}

        if body.get("logprobs"):
            k = body.get("top_logprobs") or 0
            choice["logprobs"] = {"content": [
                {**entry(t, "likely" if garbled else p),
                 "top_logprobs": [entry(t, p)] + [entry(f"alt{j}", p - j) for j in range(1, k)]}
                for t, p in reply]}
        if body.get("return_token_ids"):
            words = [w for m in body["messages"] for w in str(m.get("content") or "").split()]
            choice["token_ids"] = [self.id_of(t) for t, _ in reply]
            (choice if self.prompt_ids_on_the_choice else answer)["prompt_token_ids"] = [
                1, *(self.id_of(w) for w in words)]
        return answer


def _asked(body: dict[str, Any]) -> str:
    last = next((m for m in reversed(body["messages"]) if m["role"] == "user"), {"content": ""})
    text = last["content"] if isinstance(last["content"], str) else ""
    return text.split()[0].removeprefix("fake:") if text.startswith("fake:") else "ok"


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    last = next((m for m in reversed(body["messages"]) if m["role"] == "user"), {"content": ""})
    text = last["content"] if isinstance(last["content"], str) else ""
    message: dict[str, Any] = {"role": "assistant", "content": f"echo: {text}"}
    finish = "stop"
    if text.startswith("call "):
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": text.split()[1], "arguments": json.dumps({"x": 1})}}],
        }
        finish = "tool_calls"
    prompt = sum(len(str(m.get("content") or "").split()) for m in body["messages"])
    usage: dict[str, Any] | None = {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}
    if text.startswith("think "):
        message["reasoning_content"] = "the user wants an echo"
        usage["prompt_tokens_details"] = {"cached_tokens": prompt - 1}  # type: ignore[index]
        usage["completion_tokens_details"] = {"reasoning_tokens": 2}  # type: ignore[index]
    if text.startswith("quiet "):
        usage = None
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        **({"usage": usage} if usage is not None else {}),
    }
