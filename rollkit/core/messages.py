"""The conversation vocabulary: messages, tool calls, and the two boundary
objects every model call passes through, `Request` and `Response`.

These are plain data (pydantic v2) shaped like the OpenAI chat-completions
protocol, so the HTTP face of the interception point is a thin translation.
This module holds no behaviour beyond conversion helpers; it must not import
the rest of rollkit.

A message's `content` is its text; a message whose source held a list of
content parts keeps them in `parts` (text, reasoning with its signature and
redaction flag, images as references, and any other part whole), in the
source's order. Reasoning is never text: it is the assistant's `reasoning`
(the readable thinking) and a part of its own, so an encrypted reasoning blob
never shows up in `content`, in search or in a token count made from text.
`split_parts` is the one reading of a list of parts every importer uses.
"""

from __future__ import annotations

import functools
import json
import operator
from typing import Annotated, Any, Callable, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, field_validator
from .sums import sum_in_order

__all__ = [
    "SystemMessage",
    "UserMessage",
    "AssistantMessage",
    "ToolMessage",
    "ToolCall",
    "Message",
    "ROLES",
    "TextPart",
    "ReasoningPart",
    "ImagePart",
    "OtherPart",
    "ContentPart",
    "split_parts",
    "canonical_parts",
    "Usage",
    "TokenLogprobs",
    "Request",
    "Response",
    "SAMPLING_KEYS",
    "sampling_of",
    "text_of",
    "to_messages",
    "opening_messages",
    "unvalidated",
]


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


_M = TypeVar("_M", bound=BaseModel)


def unvalidated(cls: type[_M], **values: Any) -> _M:
    """An instance of a plain data class (no private attributes, no
    post-init) from values already of the right types, every field given:
    what `model_construct` does without its pass over the fields' defaults,
    which makes it slower than validating. For hot paths that checked what
    they pass (the importers, recording a model call)."""
    record = cls.__new__(cls)
    object.__setattr__(record, "__dict__", values)
    object.__setattr__(record, "__pydantic_fields_set__", set(values))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


# Whether a field added to the trace format later holds nothing (None, or
# an empty list): such a field is not written (`exclude_if=is_absent`), so
# files stay as small and loading gives the default back. A tuple's `in`
# (each item: `is`, then `==`), a C method, not a Python function: the
# serializer calls it for every such field of every record it writes, and a
# Python call costs more than the check.
is_absent: Callable[[Any], bool] = (None, []).__contains__


class ToolCall(_Data):
    """A tool call the model asked for. `arguments` is JSON text, as on the
    wire; a dict given here is serialized, and `args()` parses it back."""

    id: str
    name: str
    arguments: str = "{}"

    @field_validator("arguments", mode="before")
    @classmethod
    def _serialize_dict(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return json.dumps(value)
        return value

    def args(self) -> dict[str, Any]:
        """The arguments as a dict. Raises ValueError when they are not a JSON object."""
        parsed = json.loads(self.arguments or "{}")
        if not isinstance(parsed, dict):
            raise ValueError(f"tool call arguments must be a JSON object, got {type(parsed).__name__}")
        return parsed


class TextPart(_Data):
    type: Literal["text"] = "text"
    text: str


class ReasoningPart(_Data):
    """Thinking the model returned as a part of its own. `reasoning` is its
    text; for a `redacted` part it is the provider's opaque or encrypted
    blob (OpenAI's encrypted reasoning, Anthropic's redacted thinking), kept
    to send back, never read as text. `summary` is the readable summary a
    provider gave with it, `signature` what the provider checks when the
    part is sent back to it."""

    type: Literal["reasoning"] = "reasoning"
    reasoning: str
    summary: str | None = Field(default=None, exclude_if=is_absent)
    signature: str | None = Field(default=None, exclude_if=is_absent)
    redacted: bool = Field(default=False, exclude_if=functools.partial(operator.is_, False))

    @property
    def readable(self) -> str | None:
        """What a reader is shown of it: the text, or for a redacted part its summary."""
        return (self.summary or None) if self.redacted else (self.reasoning or self.summary or None)


class ImagePart(_Data):
    """An image, by reference as the source wrote it: a URL, a data URL, a
    file path, or a reference into the source's own store."""

    type: Literal["image"] = "image"
    image: str
    detail: str | None = Field(default=None, exclude_if=is_absent)


class OtherPart(_Data):
    """A part rollkit has no model for (audio, video, a document, data, a
    provider-side tool use), kept whole as the source wrote it: `type` its
    kind, `data` every field of it."""

    type: str
    data: dict[str, Any] = Field(default_factory=dict)


def _part_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if isinstance(value, OtherPart):
        return "other"
    return kind if kind in ("text", "reasoning", "image") else "other"


ContentPart = Annotated[
    Union[Annotated[TextPart, Tag("text")], Annotated[ReasoningPart, Tag("reasoning")],
          Annotated[ImagePart, Tag("image")], Annotated[OtherPart, Tag("other")]],
    Discriminator(_part_kind),
]


def canonical_parts(content: str | None, reasoning: str | None) -> list[Any]:
    """The parts a message of this text and reasoning has when nothing else
    is known of them: its reasoning, then its text. An exporter writes these
    for a message without `parts`; an importer keeps `parts` only when they
    differ from these (so a message's round trip gives it back equal)."""
    return ([ReasoningPart(reasoning=reasoning)] if reasoning else []) + ([TextPart(text=content)] if content else [])


def _joined(pieces: list[str | None]) -> str | None:
    kept = [p for p in pieces if p]
    return "\n".join(kept) if kept else None


def _detail(detail: Any) -> str | None:
    """An image's detail; "auto" is what no detail means (OpenAI's and inspect's default)."""
    return detail if isinstance(detail, str) and detail and detail != "auto" else None


def split_parts(raw: list[Any]) -> tuple[str, str | None, list[Any] | None]:
    """(text, reasoning, parts) of a list of content parts as a tool wrote
    them (inspect-ai's `text`/`reasoning`/`image`, OpenAI's `text`/
    `image_url`, Anthropic's `thinking`/`redacted_thinking`, a bare
    string): the text parts joined by newlines (as inspect-ai's `.text`
    joins them), the readable reasoning joined the same way (None when
    there is none), and the parts, None when they say no more than the text
    and reasoning (`canonical_parts`). An empty part stays an empty part:
    it adds no text. Raises ValueError naming the position of a part that
    is not an object or a string."""
    parts: list[Any] = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            parts.append(TextPart(text=item))
            continue
        if not isinstance(item, dict):
            raise ValueError(f"{i}: should be a content part (an object), got {type(item).__name__}")
        kind = item.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(item.get("text", ""), str):
            parts.append(TextPart(text=item.get("text") or ""))
        elif kind == "reasoning" and isinstance(item.get("reasoning", ""), str):
            parts.append(ReasoningPart(reasoning=item.get("reasoning") or "", summary=item.get("summary") or None,
                                       signature=item.get("signature") or None, redacted=bool(item.get("redacted"))))
        elif kind == "thinking" and isinstance(item.get("thinking", ""), str):
            parts.append(ReasoningPart(reasoning=item.get("thinking") or "", signature=item.get("signature") or None))
        elif kind == "redacted_thinking" and isinstance(item.get("data", ""), str):
            parts.append(ReasoningPart(reasoning=item.get("data") or "", redacted=True))
        elif kind == "image" and isinstance(item.get("image"), str):
            parts.append(ImagePart(image=item["image"], detail=_detail(item.get("detail"))))
        elif kind == "image_url" and isinstance(item.get("image_url"), (dict, str)):
            url = item["image_url"]
            parts.append(ImagePart(image=url.get("url", "") if isinstance(url, dict) else url,
                                   detail=_detail(url.get("detail")) if isinstance(url, dict) else None))
        else:
            parts.append(OtherPart(type=str(kind), data={k: v for k, v in item.items() if k != "type" and v is not None}))
    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    reasoning = _joined([p.readable for p in parts if isinstance(p, ReasoningPart)])
    return text, reasoning, (None if parts == canonical_parts(text, reasoning) else parts)


class SystemMessage(_Data):
    role: Literal["system"] = "system"
    content: str
    parts: list[ContentPart] | None = Field(default=None, exclude_if=is_absent)


class UserMessage(_Data):
    role: Literal["user"] = "user"
    content: str
    parts: list[ContentPart] | None = Field(default=None, exclude_if=is_absent)


class AssistantMessage(_Data):
    """A message the model wrote. `reasoning` is the thinking it returned
    beside its answer (a reasoning model's summary or thinking blocks), None
    when it returned none; it is not part of `content`. `parts` keeps the
    reply's content parts when it had more than its text and reasoning (a
    signature, a redacted blob, an image, another kind of part)."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasoning: str | None = Field(default=None, exclude_if=is_absent)
    parts: list[ContentPart] | None = Field(default=None, exclude_if=is_absent)


class ToolMessage(_Data):
    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str
    name: str | None = None
    parts: list[ContentPart] | None = Field(default=None, exclude_if=is_absent)


Message = Annotated[
    Union[SystemMessage, UserMessage, AssistantMessage, ToolMessage],
    Field(discriminator="role"),
]
# The roles a Message has (its union's discriminator): readers that skip
# pydantic (rollkit.tables) refuse any other, as loading does.
ROLES = tuple(m.model_fields["role"].default for m in (SystemMessage, UserMessage, AssistantMessage, ToolMessage))


class Usage(_Data):
    """Token counts of one model call, as the provider reported them.

    None means not reported, never 0: a call that failed, a provider that
    sent no usage, an imported record without it. `input_tokens` is the
    whole prompt, cached part included; `cache_read_tokens` is the part of
    it read from the provider's prompt cache and `cache_write_tokens` the
    part written to it (providers that report them: OpenAI's
    `prompt_tokens_details.cached_tokens`, Anthropic's
    `cache_read_input_tokens` / `cache_creation_input_tokens`).
    `output_tokens` is the whole reply, reasoning included;
    `reasoning_tokens` the part of it the model spent reasoning (OpenAI's
    `completion_tokens_details.reasoning_tokens`, Gemini's thoughts)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = Field(default=None, exclude_if=is_absent)
    cache_write_tokens: int | None = Field(default=None, exclude_if=is_absent)
    reasoning_tokens: int | None = Field(default=None, exclude_if=is_absent)

    @property
    def reported(self) -> bool:
        """Whether the provider reported the prompt's or the reply's size."""
        return self.input_tokens is not None or self.output_tokens is not None

    @property
    def total_tokens(self) -> int | None:
        """Prompt plus reply; None when neither was reported."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)


class TokenLogprobs(_Data):
    """The tokens of one model call, where the endpoint returned them: what
    a trainer needs to learn from the call (an RL loss over the sampled
    tokens) and what a person reads a reply's confidence from.

    Lists of plain numbers, each present only when the endpoint gave it
    (None: not given, never guessed): `prompt_ids` the prompt's token ids
    and `ids` the reply's (vLLM's `return_token_ids`, or its
    `return_tokens_as_token_ids` tokens "token_id:N"); `text` each reply
    token as the endpoint wrote it, `logprobs` its log probability (OpenAI's
    `logprobs`); `top_logprobs`, `top_text` and `top_ids` the alternatives
    at each position (`top_logprobs=N`), in the endpoint's order. The
    reply's lists are aligned: position i of each is the reply's token i.

    `prompt_shared` is for files only: a trace writes each call's prompt
    ids without the first `prompt_shared` of them, which are the previous
    call's prompt and reply ids (a conversation resends its history every
    turn), and loading puts them back (`Trace` does both), so in memory it
    is None and `prompt_ids` whole."""

    prompt_ids: list[int] | None = Field(default=None, exclude_if=is_absent)
    ids: list[int] | None = Field(default=None, exclude_if=is_absent)
    text: list[str] | None = Field(default=None, exclude_if=is_absent)
    logprobs: list[float] | None = Field(default=None, exclude_if=is_absent)
    top_logprobs: list[list[float]] | None = Field(default=None, exclude_if=is_absent)
    top_text: list[list[str]] | None = Field(default=None, exclude_if=is_absent)
    top_ids: list[list[int]] | None = Field(default=None, exclude_if=is_absent)
    prompt_shared: int | None = Field(default=None, exclude_if=is_absent)

    @property
    def logprob_sum(self) -> float | None:
        """The reply's log probability (the sum over its tokens, left to
        right, as the columnar store's SQL sums them); None without logprobs."""
        return sum_in_order(self.logprobs) if self.logprobs else None

    @property
    def logprob_mean(self) -> float | None:
        """The mean log probability per reply token; None without logprobs."""
        return sum_in_order(self.logprobs) / len(self.logprobs) if self.logprobs else None


class Request(_Data):
    """What goes to the model: the conversation, the tools it may call, and
    sampling parameters passed through untouched."""

    messages: list[Message]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    model: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)


# The sampling parameters a trainer needs to read a call's logprobs (the
# temperature they were sampled at) and to sample alike: recorded on each
# call as sent (`ModelCall.sampling`). OpenAI's newer `max_completion_tokens`
# is recorded as `max_tokens`, the name every trainer reads.
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "seed")


def sampling_of(params: dict[str, Any]) -> dict[str, Any] | None:
    """The sampling parameters among a call's `params` (None when it set
    none, which is what a trace keeps then)."""
    if not params:
        return None
    picked = {key: params[key] for key in SAMPLING_KEYS if params.get(key) is not None}
    if "max_tokens" not in picked and params.get("max_completion_tokens") is not None:
        picked["max_tokens"] = params["max_completion_tokens"]
    return picked or None


class Response(_Data):
    """What the model answered."""

    message: AssistantMessage
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str | None = None
    # The provider's id of this answer (OpenAI's completion id), where it gave one.
    id: str | None = Field(default=None, exclude_if=is_absent)
    # Token ids and logprobs, where the endpoint returned them (OpenAIModel(logprobs=True)).
    tokens: TokenLogprobs | None = Field(default=None, exclude_if=is_absent)


_MESSAGE_ADAPTER: TypeAdapter[Any] = TypeAdapter(Message)


def text_of(message: Any) -> str:
    """The text content of a message ("" when it has none)."""
    return getattr(message, "content", None) or ""


def opening_messages(system_prompt: str | None, prompt: str | None) -> list[Message]:
    """What a conversation opens with: the system prompt, then the task's
    prompt, each only when given."""
    opening: list[Message] = []
    if system_prompt:
        opening.append(SystemMessage(content=system_prompt))
    if prompt:
        opening.append(UserMessage(content=prompt))
    return opening


def to_messages(messages: Any) -> list[Any]:
    """Normalize what a user passes to `step()`: None, a string, a message, a
    dict in OpenAI shape, or a list of those. A string is a user message."""
    if messages is None:
        return []
    if isinstance(messages, (str, BaseModel, dict)):
        messages = [messages]
    out = []
    for item in messages:
        if isinstance(item, str):
            out.append(UserMessage(content=item))
        elif isinstance(item, (SystemMessage, UserMessage, AssistantMessage, ToolMessage)):
            out.append(item)
        elif isinstance(item, dict):
            out.append(_MESSAGE_ADAPTER.validate_python(item))
        else:
            raise TypeError(
                f"cannot use {type(item).__name__} as a message: pass a string "
                "(a user message), a rollkit message, or a dict with a 'role'"
            )
    return out
