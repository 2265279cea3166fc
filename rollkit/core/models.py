"""Models: the small async interface every model speaks, the embedded
deterministic `ScriptedModel`, and the registry of model names.

A model turns a `Request` into a `Response` and knows nothing of rollouts,
budgets or hooks: those live in the session that calls it. `OpenAIModel`
(any OpenAI-compatible endpoint) lives in `rollkit.programs.openai_model`.

Model names (`Agent(model="toy-calculator")`) resolve through a registry that
higher layers register into when their package is imported: the core knows
only "echo"; `rollkit.examples` registers "toy-calculator" and
`rollkit.programs` the prefix "openai/". The core never imports them.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Union

from .checks import seconds
from .errors import ProviderError
from .messages import AssistantMessage, Request, Response, ToolCall, Usage

__all__ = [
    "Model", "ScriptedModel", "count_tokens", "register_model", "resolve_model", "model_names", "model_choices",
    "close_model_name", "calling_rollout", "calling_rollout_key",
]

# The id of the rollout whose model call is running (set by the session
# around `model.complete`), for a model that serves several rollouts and
# must tell them apart (a HumanModel's per-rollout askers).
calling_rollout: contextvars.ContextVar[str | None] = contextvars.ContextVar("calling_rollout", default=None)
# A name of that rollout that is the same when the run is repeated
# (`trace.info["rollout_id"]`, "task#repeat", when a run named it; else the
# trace id), for a model whose randomness is seeded per rollout so runs
# reproduce (rollkit.examples.chain's slippery toy).
calling_rollout_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("calling_rollout_key", default=None)


class Model:
    """Interface: `await model.complete(request) -> Response`. Raise
    `ProviderError` for failures of the call itself."""

    name: str = "model"

    async def complete(self, request: Request) -> Response:  # pragma: no cover - interface
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release pooled connections, if any."""

    def check(self, rollout: str | None = None) -> None:
        """Raise a clear error when this model cannot answer at all for
        rollout `rollout` (called by `Rollout.open` before anything starts)."""

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "type": type(self).__name__}

    def sent_params(self, request: Request) -> dict[str, Any]:
        """The parameters this model sends with `request` (its own defaults
        under the request's); the trace records the sampling ones."""
        return request.params

    def price_ref(self) -> tuple[str, str | None] | None:
        """How the public price table knows this model: (its model name, its
        provider's API URL or None), or None for a model that runs no paid
        model (its calls cost NA unless `rk.prices` names it;
        rollkit.core.prices)."""
        return (self.name, None)

    def output_limit(self) -> int | None:
        """The most output tokens one call may produce when the call itself
        sends no `max_tokens` (None: unknown); a hard dollar cap
        (`RolloutLimits(cost_cap="hard")`) prices a call's worst case by it."""
        return None


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0


# count_tokens of the messages seen lately, by object: a conversation resends
# the same message objects every call (the interception server reuses what it
# parsed), and counting the whole history each time made a call cost time in
# the conversation's length. An entry holds a weak reference, the content and
# the tool calls it counted: it is used only for that very object with that
# very content, and leaves when the message does.
_counted: dict[int, tuple[Any, Any, Any, int]] = {}


def count_tokens(message: Any) -> int:
    """ScriptedModel's token count of one message: 1, plus one per
    whitespace-separated word of its content, plus for each tool call 1 plus
    the words of its name and of its JSON arguments."""
    key = id(message)
    entry = _counted.get(key)
    calls = message.tool_calls if type(message) is AssistantMessage else None
    if entry is not None and entry[0]() is message and entry[1] is message.content and entry[2] is calls:
        return entry[3]
    n = _count(message)
    try:
        ref = weakref.ref(message, lambda _, key=key: _counted.pop(key, None))
    except TypeError:  # not weakly referable: counted every time
        return n
    _counted[key] = (ref, message.content, calls, n)
    return n


def _count(message: Any) -> int:
    n = 1 + _words(message.content)
    if type(message) is AssistantMessage:
        for call in message.tool_calls:
            n += 1 + _words(call.name) + _words(call.arguments)
    return n


Reply = Union[str, AssistantMessage, Response]
ReplySource = Union[Reply, Callable[[Request], Any]]


class ScriptedModel(Model):
    """The embedded default: deterministic, instant, no network.

    `replies` is a list (reply i answers the request that already holds i
    assistant messages, so one model can serve many conversations at once) or
    a function of the request. A reply is a string, an `AssistantMessage`
    (tool calls included; see `ScriptedModel.call`), a `Response`, or a
    function (sync or async) of the request returning one of those.

    Token count, so budgets burn predictably: a message costs 1 token plus one
    per whitespace-separated word of its content, plus, per tool call, 1 plus
    the words of its name and of its JSON arguments. `input_tokens` is the sum
    over the request's messages, `output_tokens` the cost of the reply.

    `delay` seconds are awaited before each reply, to stand in for latency.

    `max_tokens` is the most output tokens a reply may have when the request
    sends no `max_tokens` of its own (its `output_limit()`, which a hard
    dollar cap prices a call by): as a provider would, a longer text reply
    is cut to fit (finish_reason "length"); a tool call that does not fit
    is a ProviderError, since a cut call would not be one.
    """

    def __init__(
        self,
        replies: Sequence[ReplySource] | Callable[[Request], Any] = (),
        *,
        name: str = "scripted",
        delay: float = 0.0,
        max_tokens: int | None = None,
    ) -> None:
        if isinstance(replies, (str, AssistantMessage, Response)):
            replies = [replies]
        if not callable(replies) and not isinstance(replies, Sequence):
            raise TypeError("ScriptedModel replies must be a list of replies or a function of the request")
        self.replies = replies
        self.name = name
        self.delay = seconds("ScriptedModel", "delay", delay)
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 1):
            raise ValueError(f"ScriptedModel max_tokens must be a whole number >= 1, or None; got {max_tokens!r}")
        self.max_tokens = max_tokens

    def output_limit(self) -> int | None:
        return self.max_tokens

    def price_ref(self) -> None:
        # Deterministic and free to run, but not free as a model: its cost is
        # NA (silently: a demo warns about nothing), not 0, unless
        # rk.prices gives its name a price (tests do, to burn a dollar budget).
        return None

    @staticmethod
    def call(tool: str, content: str | None = None, /, **arguments: Any) -> AssistantMessage:
        """An assistant message that calls `tool` with `arguments`. Its call id
        is set per conversation when the model replies with it."""
        call = ToolCall(id="call", name=tool, arguments=json.dumps(arguments))
        return AssistantMessage(content=content, tool_calls=[call])

    async def complete(self, request: Request) -> Response:
        if self.delay:
            await asyncio.sleep(self.delay)
        source: Any = self.replies
        if not callable(source):
            index = sum(1 for m in request.messages if m.role == "assistant")
            if index >= len(source):
                raise ProviderError(
                    f"ScriptedModel {self.name!r} has no reply #{index + 1} (it was given "
                    f"{len(source)}); add replies or pass a function of the request",
                    status=400,
                )
            source = source[index]
        reply = source(request) if callable(source) else source
        if inspect.isawaitable(reply):
            reply = await reply
        return self._response(reply, request)

    def _response(self, reply: Any, request: Request) -> Response:
        if isinstance(reply, Response):
            return reply
        if isinstance(reply, str):
            message = AssistantMessage(content=reply)
        elif isinstance(reply, AssistantMessage):
            message = reply
        else:
            raise ProviderError(
                f"ScriptedModel {self.name!r} got a reply of type {type(reply).__name__}; "
                "a reply is a str, an AssistantMessage or a Response"
            )
        if message.tool_calls:
            # Ids numbered by position in the conversation: transcripts stay
            # the same from run to run, and unique within one conversation.
            turn = sum(1 for m in request.messages if m.role == "assistant")
            calls = [c.model_copy(update={"id": f"call_{turn}_{j}"}) for j, c in enumerate(message.tool_calls)]
            message = message.model_copy(update={"tool_calls": calls})
        message, cut = self._fit(message, request)
        usage = Usage.model_construct(
            input_tokens=sum(count_tokens(m) for m in request.messages),
            output_tokens=count_tokens(message),
        )
        finish = "tool_calls" if message.tool_calls else "length" if cut else "stop"
        return Response.model_construct(message=message, usage=usage, finish_reason=finish, model=self.name)


    def _fit(self, message: AssistantMessage, request: Request) -> tuple[AssistantMessage, bool]:
        """The reply within the call's `max_tokens` (else the model's), and whether it was cut."""
        asked = request.params.get("max_tokens") if request.params else None
        bound = asked if isinstance(asked, int) and not isinstance(asked, bool) else self.max_tokens
        if bound is None or count_tokens(message) <= bound:
            return message, False
        if message.tool_calls:
            raise ProviderError(f"ScriptedModel {self.name!r}: a tool call of {count_tokens(message)} tokens does "
                                f"not fit max_tokens={bound}; raise max_tokens", status=400)
        words = (message.content or "").split()[:max(bound - 1, 0)]
        return message.model_copy(update={"content": " ".join(words)}), True


def _echo(request: Request) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return f"You said: {message.content}"
    return "Hello."


ModelFactory = Callable[[str], Model]

# name -> factory(name); a name ending in "/" is a prefix ("openai/" serves
# "openai/gpt-4o-mini"), given the part after it.
_registry: dict[str, tuple[ModelFactory, str]] = {}


def register_model(name: str, factory: ModelFactory, *, help: str = "") -> None:  # noqa: A002 - the word users read
    """Make `Agent(model=name)` build `factory(name)`. A name ending in "/"
    is a prefix: `factory` gets what follows it ("openai/" + "gpt-4o-mini").
    `help` is shown in the error for an unknown name. Registering a name
    again replaces it."""
    if not isinstance(name, str) or not name or name.strip() != name:
        raise ValueError(f"a model name is a non-empty string without surrounding spaces, got {name!r}")
    if not callable(factory):
        raise TypeError(f"register_model({name!r}, ...) needs a function of the name, got {type(factory).__name__}")
    _registry[name] = (factory, help)


def model_names() -> dict[str, str]:
    """The registered names (prefixes end in "/") and their help texts."""
    return {name: help for name, (_, help) in _registry.items()}


def model_choices() -> list[str]:
    """The registered names as a person types them: a prefix as `openai/NAME`."""
    return [f"{name}NAME" if name.endswith("/") else name for name in _registry]


def close_model_name(model: str) -> str | None:
    """The registered name `model` was most likely a typo of, or None."""
    import difflib

    choices = model_choices()
    prefix, slash, rest = model.partition("/")
    if slash and rest:  # "opneai/gpt-4o": the prefix is what went wrong
        close = difflib.get_close_matches(prefix + "/NAME", choices, n=1)
        return close[0].replace("NAME", rest) if close else None
    close = difflib.get_close_matches(model, choices, n=1)
    return close[0] if close else None


def resolve_model(model: Model | str) -> Model:
    """A Model from a Model or a registered name (see `register_model`)."""
    if isinstance(model, Model):
        return model
    if not isinstance(model, str):
        raise TypeError(f"model must be a rollkit Model or a model name, got {type(model).__name__}")
    entry = None if model.endswith("/") else _registry.get(model)
    if entry is not None:
        return entry[0](model)
    prefix, slash, rest = model.partition("/")
    entry = _registry.get(prefix + "/") if slash and rest else None
    if entry is not None:
        return entry[0](rest)
    known = ", ".join(
        repr(f"{name}<model>" if name.endswith("/") else name) + (f" ({help})" if help else "")
        for name, (_, help) in _registry.items()
    )
    close = close_model_name(model)
    guess = f" (did you mean {close!r}?)" if close else ""
    raise ValueError(f"unknown model name {model!r}{guess}: use {known}, or pass a Model such as rk.ScriptedModel([...])")


register_model("echo", lambda name: ScriptedModel(_echo, name="echo"), help="repeats the user's last message")
