"""Tools the model may call: the `@tool` decorator and `Toolset`.

A tool is a typed Python function (sync or async). Its signature becomes an
OpenAI function schema and a pydantic model that validates the model's
arguments. A bad call (unknown tool, arguments that do not validate, a tool
that raises) never crashes the rollout: the model gets an error message back
as the tool result and the rollout goes on. A `Toolset` groups tools and may
hold a service lifetime (`start`/`stop`) that `open()` and `close()` drive
(L6, L21); a failure there is a `ToolsetError`.

This module does not decide when tools run; harnesses do.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pydantic

from .messages import ToolCall

__all__ = ["tool", "Tool", "Toolset", "ToolResult"]


def tool(fn: Callable | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Make a function (or a method of a Task or Toolset) callable by the model.
    Its parameters, with their annotations and defaults, are the arguments the
    model must give; the first paragraph of its docstring is the description."""

    def mark(f: Callable) -> Callable:
        f.__rollkit_tool__ = (name, description)  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


# How a failed tool call's answer to the model begins (ToolResult.error).
_ERROR = "error: "


@dataclass(frozen=True)
class ToolResult:
    """What a tool call answers the model (`content`), and whether it ran
    cleanly (`ok`)."""

    content: str
    ok: bool

    @classmethod
    def error(cls, why: str) -> ToolResult:
        """A failed call: the model reads `error: <why>`."""
        return cls(_ERROR + why, ok=False)

    @staticmethod
    def is_error(content: str) -> bool:
        """Whether a tool message's text is a failed call's answer (see
        `error`): a conversation keeps only the text, so a fork counts its
        prefix's failures by it."""
        return content.startswith(_ERROR)


class Tool:
    """One callable tool with its schema and argument validator."""

    def __init__(self, fn: Callable, name: str | None = None, description: str | None = None) -> None:
        self.fn = fn
        self.name, self.description, self.arguments_model, self.spec = _compile(
            getattr(fn, "__func__", fn), name, description
        )

    def check(self, arguments: dict[str, Any]) -> str | None:
        """What is wrong with calling this tool with `arguments`, or None."""
        try:
            self.arguments_model.model_validate(arguments)
        except (ValueError, pydantic.ValidationError) as exc:
            return self._invalid(exc)
        return None

    def _invalid(self, exc: Exception) -> str:
        return f"invalid arguments for tool {self.name!r}: {_validation_text(exc)}"

    async def __call__(self, call: ToolCall) -> ToolResult:
        try:
            raw = call.args()
            args = self.arguments_model.model_validate(raw)
        except (ValueError, pydantic.ValidationError) as exc:
            return ToolResult.error(self._invalid(exc))
        try:
            result = self.fn(**{k: getattr(args, k) for k in self.arguments_model.model_fields})
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            return ToolResult.error(f"tool {self.name!r} raised {type(exc).__name__}: {exc}")
        return ToolResult(result if isinstance(result, str) else json.dumps(result, default=str), ok=True)


@functools.lru_cache(maxsize=None)
def _compile(fn: Callable, name: str | None, description: str | None) -> tuple[str, str, Any, dict[str, Any]]:
    """Name, description, argument model and schema of a tool function; cached
    because building a pydantic model costs about a millisecond per rollout."""
    name = name or fn.__name__
    doc = inspect.getdoc(fn) or ""
    description = description or doc.split("\n\n")[0].replace("\n", " ")
    fields: dict[str, Any] = {}
    try:
        # Annotations written as strings (`from __future__ import annotations`)
        # are read in the function's module, where its types are defined.
        signature = inspect.signature(fn, eval_str=True)
    except (NameError, AttributeError, SyntaxError, TypeError):  # e.g. a type local to a function:
        # pydantic resolves what it can in the module below, and names what it cannot.
        signature = inspect.signature(fn)
    for param in signature.parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = Any if param.annotation is param.empty else param.annotation
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    model = pydantic.create_model(f"{name}_arguments", __module__=fn.__module__, **fields)  # type: ignore[call-overload]
    schema = model.model_json_schema()
    schema.pop("title", None)
    spec = {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}
    return name, description, model, spec


def _validation_text(exc: Exception) -> str:
    if isinstance(exc, pydantic.ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
        )
    return str(exc)


@functools.lru_cache(maxsize=None)
def _tool_attrs(cls: type) -> tuple[tuple[str, Any], ...]:
    found = []
    for attr in dir(cls):
        marker = getattr(getattr(cls, attr, None), "__rollkit_tool__", None)
        if marker is not None:
            found.append((attr, marker))
    return tuple(found)


def tools_of(obj: Any) -> list[Tool]:
    """The @tool methods declared on `obj`'s class, bound to `obj`."""
    return [Tool(getattr(obj, attr), *marker) for attr, marker in _tool_attrs(type(obj))]


class Toolset:
    """A named group of tools. Pass functions, or subclass and decorate
    methods with `@tool`. Override `start`/`stop` for a service lifetime."""

    name: str = "tools"

    def __init__(self, tools: Iterable[Callable | Tool] = (), *, name: str | None = None) -> None:
        if name is not None:
            self.name = name
        self.tools: dict[str, Tool] = {}
        for item in [*tools_of(self), *tools]:
            t = item if isinstance(item, Tool) else Tool(item, *getattr(item, "__rollkit_tool__", (None, None)))
            if t.name in self.tools:
                raise ValueError(f"toolset {self.name!r} has two tools named {t.name!r}")
            self.tools[t.name] = t

    async def start(self, ctx: Any) -> dict[str, str] | None:
        """Bring the service up (called by open(), L6). Return the URLs it
        serves ({name: url}); the network policy keeps them reachable."""
        return None

    async def stop(self) -> None:
        """Bring the service down (called by close() and abort())."""

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec for t in self.tools.values()]
