"""A keyless, deterministic OpenAI-compatible chat server on 127.0.0.1, in a thread.

For proofs against other frameworks that run their own event loop
(inspect-ai's `eval`, a plain `openai` client): the server cannot live in the
test's loop, as tests/helpers/fake_provider.py does, so it is the standard library's
threaded HTTP server. `reply(messages)` decides each answer from the request's
messages alone (a string, or {"tool": name, "arguments": {...}} for a tool
call), so the same conversation gets the same reply whoever asks; a
streamed request (`stream: true`, as verifiers' chat program sends) gets it
as chunks. Every
request must carry `Authorization: Bearer <secret>` (the per-test secret);
others get 401. Use it as a context manager: it stops its server and thread
on exit. `cpu_s` is the CPU time its connections took (each is served by a
thread of its own), for a benchmark that takes the model's share off a
peer's time (benchmarks/peers.py).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[list[dict[str, Any]]], Any]


def _message(answer: Any, turn: int) -> tuple[dict[str, Any], str]:
    if isinstance(answer, dict) and "tool" in answer:
        call = {"id": f"call_{turn}", "type": "function",
                "function": {"name": answer["tool"], "arguments": json.dumps(answer.get("arguments", {}))}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {"role": "assistant", "content": str(answer)}, "stop"


def _chunks(message: dict[str, Any], finish: str, usage: dict[str, int], body: dict[str, Any],
            turn: int) -> list[dict[str, Any]]:
    """The reply as a streamed answer's chunks (`stream: true`): the whole
    message in one delta, then the finish reason, then usage when asked for."""
    delta: dict[str, Any] = {"role": "assistant", "content": message["content"]}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    head = {"id": f"chatcmpl-{turn}", "object": "chat.completion.chunk", "created": 0,
            "model": body.get("model", "scripted")}
    chunks = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**head, "choices": [], "usage": usage})
    return chunks


class ScriptedProvider:
    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.secret = secrets.token_hex(8)
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.cpu_s = 0.0
        self._cpu_lock = threading.Lock()

    def __enter__(self) -> ScriptedProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                finally:  # this connection's thread started with it: its clock is the connection's cost
                    with provider._cpu_lock:
                        provider.cpu_s += time.thread_time()

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.headers.get("authorization") != f"Bearer {provider.secret}":
                    return self._send(401, {"error": {"message": "bad key", "type": "auth", "code": "invalid_api_key"}})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                provider.requests.append(body)
                turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
                message, finish = _message(provider.reply(body["messages"]), turn)
                prompt = sum(len(str(m.get("content") or "").split()) for m in body["messages"])
                usage = {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}
                if body.get("stream"):
                    return self._stream(_chunks(message, finish, usage, body, turn))
                self._send(200, {"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0,
                                 "model": body.get("model", "scripted"),
                                 "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                 "usage": usage})

            def _stream(self, chunks: list[dict[str, Any]]) -> None:
                data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send(self, status: int, document: dict[str, Any]) -> None:
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-provider", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def text(content: Any) -> str:
    """A message's text, whether content is a string or OpenAI parts."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")
