"""Wire dialects of the interception server: how each API family looks on the wire.

This package owns the translations and nothing else; it must not import
rollkit.runs, rollkit.notebook or rollkit.examples, nor the server itself.

A dialect is a thin translation between an HTTP body and rollkit's one
`Request` / `Response` shape, and nothing else: the interception server does
authentication, segments (409), refusals (410), SDK-retry replay and the
session call the same way for every dialect, so limits, `@stop`,
`@intercept`, budgets and the trace behave identically whatever a program
speaks. Four are served:

- `chat`: OpenAI chat completions, `POST /v1/chat/completions`;
- `responses`: OpenAI Responses, `POST /v1/responses` (input items,
  `instructions`, function tools, `previous_response_id` within a rollout,
  typed server-sent events);
- `anthropic`: Anthropic Messages, `POST /v1/messages` (system, content
  blocks, tools, `stop_reason`, `x-api-key`, streaming events) and
  `POST /v1/messages/count_tokens`;
- `gemini`: Google's Gemini API, `POST /v1beta/models/{model}:generateContent`
  and `:streamGenerateContent` (contents and parts, function declarations and
  calls, `systemInstruction`, `usageMetadata`, `x-goog-api-key` or `?key=`),
  `:countTokens` and `GET /v1beta/models`.

Each answers a malformed body with its own error shape (OpenAI
`{"error": {...}}`, Anthropic `{"type": "error", "error": {...}}`, Google
`{"error": {"code", "message", "status"}}`) and a 4xx
naming the field. A dialect keeps per-rollout memory (the Responses history
behind `previous_response_id`) in the registration's `memory`, so nothing
outlives its rollout. This package imports the core and aiohttp, nothing
above the programs layer.
"""

from __future__ import annotations

from ._base import Dialect, Parsed, WireError, sse
from .anthropic import ANTHROPIC
from .chat import CHAT
from .gemini import GEMINI
from .responses import RESPONSES

DIALECTS: tuple[Dialect, ...] = (CHAT, RESPONSES, ANTHROPIC, GEMINI)

__all__ = ["Dialect", "Parsed", "WireError", "sse", "CHAT", "RESPONSES", "ANTHROPIC", "GEMINI", "DIALECTS"]
