"""The conversation vocabulary: messages, tool calls, and the two boundary
objects every model call passes through, `Request` and `Response`.

These are plain data (pydantic v2) shaped like the OpenAI chat-completions
protocol, so the HTTP face of the interception point is a thin translation.
This module holds no behaviour beyond conversion helpers; it must not import
the rest of rollkit.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

__all__ = [
    "SystemMessage",
    "UserMessage",
    "AssistantMessage",
    "ToolMessage",
    "ToolCall",
    "Message",
    "Usage",
    "Request",
    "Response",
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


def _absent(value: Any) -> bool:
    """Fields added to the trace format later are not written when they
    hold nothing (None, or an empty list): files stay as small, and loading
    gives the default back."""
    return value is None or value == []


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


class SystemMessage(_Data):
    role: Literal["system"] = "system"
    content: str


class UserMessage(_Data):
    role: Literal["user"] = "user"
    content: str


class AssistantMessage(_Data):
    """A message the model wrote. `reasoning` is the thinking it returned
    beside its answer (a reasoning model's summary or thinking blocks), None
    when it returned none; it is not part of `content`."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasoning: str | None = Field(default=None, exclude_if=_absent)


class ToolMessage(_Data):
    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str
    name: str | None = None


Message = Annotated[
    Union[SystemMessage, UserMessage, AssistantMessage, ToolMessage],
    Field(discriminator="role"),
]


class Usage(_Data):
    """Token counts of one model call, as the provider reported them.

    None means not reported, never 0: a call that failed, a provider that
    sent no usage, an imported record without it. `input_tokens` is the
    whole prompt, cached part included; `cache_read_tokens` is the part of
    it read from the provider's prompt cache and `cache_write_tokens` the
    part written to it (providers that report them: OpenAI's
    `prompt_tokens_details.cached_tokens`, Anthropic's
    `cache_read_input_tokens` / `cache_creation_input_tokens`)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = Field(default=None, exclude_if=_absent)
    cache_write_tokens: int | None = Field(default=None, exclude_if=_absent)

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


class Request(_Data):
    """What goes to the model: the conversation, the tools it may call, and
    sampling parameters passed through untouched."""

    messages: list[Message]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    model: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class Response(_Data):
    """What the model answered."""

    message: AssistantMessage
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str | None = None


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
