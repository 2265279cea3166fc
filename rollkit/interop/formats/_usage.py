"""One reader for every usage object the tools rollkit imports write: the
spellings of OpenAI (chat `prompt_tokens` with `prompt_tokens_details.
cached_tokens` and `completion_tokens_details.reasoning_tokens`; responses
`input_tokens_details` / `output_tokens_details`), LiteLLM (OpenAI's, with
DeepSeek's `prompt_cache_hit_tokens` and a top-level `reasoning_tokens`
passed through), Anthropic (`input_tokens` without the cache, with
`cache_read_input_tokens` / `cache_creation_input_tokens` beside it) and
Gemini (`promptTokenCount`, `cachedContentTokenCount`, `thoughtsTokenCount`).

rollkit's Usage counts the whole prompt as input (cached part included)
and the whole reply as output (reasoning included), each part None when the
source did not say (never 0). Reads nothing from disk; owns no format.
"""

from __future__ import annotations

from typing import Any

from ...core.messages import Usage

__all__ = ["usage_of"]


def _int(value: Any) -> Any:
    """A count as an int; None stays None; anything else is handed on as
    it is, for Usage to refuse naming the field (a hostile file)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return int(value)
    return value


def _first(usage: dict[str, Any], *paths: str) -> int | None:
    for path in paths:
        holder: Any = usage
        for part in path.split("."):
            holder = holder.get(part) if isinstance(holder, dict) else None
        if holder is not None and not isinstance(holder, dict):
            return _int(holder)
    return None


def usage_of(usage: Any) -> Usage | None:
    """The Usage of a provider's usage object in any of the spellings
    above; None when it is not an object or reports no count at all."""
    if not isinstance(usage, dict):
        return None
    read = _first(usage, "prompt_tokens_details.cached_tokens", "input_tokens_details.cached_tokens",
                  "cache_read_input_tokens", "prompt_cache_hit_tokens", "cachedContentTokenCount", "cached_tokens")
    written = _first(usage, "cache_creation_input_tokens", "prompt_tokens_details.cache_creation_tokens")
    reasoning = _first(usage, "completion_tokens_details.reasoning_tokens", "output_tokens_details.reasoning_tokens",
                       "reasoning_tokens", "thoughtsTokenCount")
    prompt = _first(usage, "prompt_tokens", "promptTokenCount")
    if prompt is None:
        prompt = _first(usage, "input_tokens")
        if prompt is not None and ("cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage):
            # Anthropic's input_tokens leaves out what was read from and written to the cache.
            parts = [_int(usage.get(k)) for k in ("cache_read_input_tokens", "cache_creation_input_tokens")]
            if isinstance(prompt, int) and all(isinstance(p, int) or p is None for p in parts):
                prompt += sum(p or 0 for p in parts)
    output = _first(usage, "completion_tokens", "output_tokens")
    if output is None:
        output = _first(usage, "candidatesTokenCount")
        if isinstance(output, int) and isinstance(reasoning, int):
            output += reasoning  # Gemini counts the thoughts apart from the candidates
    if prompt is None and output is None and read is None and reasoning is None:
        return None
    return Usage(input_tokens=prompt, output_tokens=output, cache_read_tokens=read, cache_write_tokens=written,
                 reasoning_tokens=reasoning)
