"""Hooks: the decorators task and harness authors write, and how they are
routed, validated and called.

Task authors never register a hook at a place: the annotation of its boundary
parameter says where it hangs (L16). `@intercept` on a `Request` rewrites
requests, on a `Response` rewrites responses; `@stop` on either is checked at
that boundary, on a `Trace` before every turn. The shape is checked once, when
a rollout is built, and a wrong one raises `TypeError` naming the hook (L17,
L18). Other parameters are filled by annotation or by name: `trace`, `task`
(the Task), `data` (its TaskData), `runtime`, `ctx` (the RolloutContext).

This module owns the hook vocabulary and calling convention; it does not
decide when hooks run (the session and the scorer do).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import TaskError, crossing
from .messages import Request, Response
from .trace import Trace

__all__ = ["reward", "metric", "stop", "intercept", "HookSpec", "BoundHook", "HookSet", "collect_hooks"]

BOUNDARY_TYPES: dict[type, str] = {Request: "request", Response: "response", Trace: "trace"}
_NAMED_SOURCES = ("trace", "task", "data", "runtime", "ctx", "request", "response")


@dataclass(frozen=True)
class HookSpec:
    kind: str  # "reward", "metric", "stop" or "intercept"
    name: str | None = None
    weight: float = 1.0
    priority: int = 0


def _hook_decorator(kind: str, fn: Callable | None, **options: Any) -> Any:
    def mark(f: Callable) -> Callable:
        f.__rollkit_hook__ = HookSpec(kind=kind, **options)  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def reward(fn: Callable | None = None, *, weight: float = 1.0, name: str | None = None) -> Any:
    """Mark a scoring function as a reward. `trace.reward` sums rewards times
    their weight (L30). Return a number, a bool, None (missing), or a mapping
    of names to numbers (L28)."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise TypeError(f"reward weight must be a number, got {weight!r}")
    return _hook_decorator("reward", fn, weight=float(weight), name=name)


def metric(fn: Callable | None = None, *, name: str | None = None) -> Any:
    """Mark a scoring function as a metric: measured and reported, not summed."""
    return _hook_decorator("metric", fn, name=name)


def stop(fn: Callable | None = None, *, priority: int = 0, name: str | None = None) -> Any:
    """Mark a predicate that ends the rollout cleanly when it returns True.
    Annotate its one boundary parameter as `Request`, `Response` or `Trace`."""
    return _hook_decorator("stop", fn, priority=priority, name=name)


def intercept(fn: Callable | None = None, *, priority: int = 0, name: str | None = None) -> Any:
    """Mark a rewriter. Annotate its one boundary parameter as `Request` or
    `Response`; return a replacement of that type, or None for no change
    (do not mutate the argument: only a returned replacement is recorded).

    A request rewriter runs over the initial prompt once at open (L7) and then
    over every request, which re-sends the conversation so far: write it to be
    idempotent (rewrite only what is not yet rewritten)."""
    return _hook_decorator("intercept", fn, priority=priority, name=name)


# ---- parameter plans ------------------------------------------------------


def _source_for(param: inspect.Parameter, hint: Any) -> str | None:
    from .context import RolloutContext
    from .runtime import Runtime
    from .task import Task, TaskData

    if isinstance(hint, type):
        for boundary_type, source in BOUNDARY_TYPES.items():
            if issubclass(hint, boundary_type):
                return source
        for cls, source in ((Task, "task"), (TaskData, "data"), (Runtime, "runtime"), (RolloutContext, "ctx")):
            if issubclass(hint, cls):
                return source
    if param.name in _NAMED_SOURCES:
        return param.name
    return None


def _hint(fn: Callable, param: inspect.Parameter) -> Any:
    """The parameter's annotation resolved to a type, one parameter at a time
    (so one unresolvable annotation does not hide the others), with
    `X | None` unwrapped to X."""
    annotation = param.annotation
    if annotation is param.empty:
        return None
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, getattr(fn, "__globals__", {}), {})  # noqa: S307 - the author's own annotation
        except Exception:
            return None
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    return annotation


@functools.lru_cache(maxsize=None)
def _plan(fn: Callable, hook_name: str) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(parameter, source) pairs for `fn`, plus the boundaries it annotates."""
    plan = []
    boundaries = []
    for param in inspect.signature(fn).parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = _hint(fn, param)
        source = _source_for(param, hint)
        if source is None:
            if param.default is not param.empty:
                continue
            raise TypeError(
                f"hook {hook_name!r}: parameter {param.name!r} cannot be filled; annotate it as "
                "Trace, Request, Response, Task, TaskData, Runtime or RolloutContext, or name it "
                f"one of {', '.join(_NAMED_SOURCES)}"
            )
        if isinstance(hint, type) and any(issubclass(hint, t) for t in BOUNDARY_TYPES):
            boundaries.append(source)
        plan.append((param.name, source))
    return tuple(plan), tuple(boundaries)


# What each kind of hook can be given. Scoring sees the finished trace; a
# boundary hook sees its own boundary object, and a rewriter never the ledger
# (neither the trace nor the context that holds it, L18).
_SCORING_SOURCES = {"trace", "task", "data", "runtime", "ctx"}
_BOUNDARY_SOURCES = {
    ("stop", "trace"): {"trace", "task", "data", "runtime", "ctx"},
    ("stop", "request"): {"request", "task", "data", "runtime", "ctx"},
    ("stop", "response"): {"response", "task", "data", "runtime", "ctx"},
    ("intercept", "request"): {"request", "task", "data", "runtime"},
    ("intercept", "response"): {"response", "task", "data", "runtime"},
}


def _route(kind: str, fn: Callable, hook_name: str) -> str | None:
    """Where a stop or intercept hangs, from its annotations alone (L16-L18),
    and a check that every parameter can be given at that place."""
    plan, boundaries = _plan(fn, hook_name)
    if kind not in ("stop", "intercept"):
        _check_sources(kind, hook_name, plan, _SCORING_SOURCES, "a scoring function")
        return None
    allowed = "Request, Response or Trace" if kind == "stop" else "Request or Response"
    if len(boundaries) != 1:
        found = "none" if not boundaries else " and ".join(boundaries)
        raise TypeError(
            f"@{kind} hook {hook_name!r} must annotate exactly one parameter as {allowed} "
            f"(the boundary it hangs on); found {found}"
        )
    boundary = boundaries[0]
    if kind == "intercept" and (boundary == "trace" or any(src in ("trace", "ctx") for _, src in plan)):
        raise TypeError(
            f"@intercept hook {hook_name!r} cannot take the Trace: rewriters do not read the whole "
            "ledger. Annotate its parameter as Request or Response, or make it a @stop"
        )
    _check_sources(kind, hook_name, plan, _BOUNDARY_SOURCES[(kind, boundary)], f"a {boundary} @{kind}")
    return boundary


def _check_sources(kind: str, hook_name: str, plan: tuple[tuple[str, str], ...], allowed: set[str], where: str) -> None:
    for param, source in plan:
        if source not in allowed:
            raise TypeError(
                f"@{kind} hook {hook_name!r}: parameter {param!r} asks for the {source}, which {where} "
                f"is not given; it may take {', '.join(sorted(allowed))}"
            )


@dataclass(frozen=True)
class BoundHook:
    """A hook ready to call: the function, its options and its parameter plan."""

    name: str
    kind: str
    fn: Callable
    plan: tuple[tuple[str, str], ...]
    boundary: str | None
    weight: float = 1.0
    priority: int = 0
    owner: str = "task"

    async def call(self, values: dict[str, Any]) -> Any:
        result = self.fn(**{param: values[source] for param, source in self.plan})
        if inspect.isawaitable(result):
            result = await result
        return result


def bind(fn: Callable, spec: HookSpec, owner: str, attr: str | None = None) -> BoundHook:
    raw = getattr(fn, "__func__", fn)
    name = spec.name or attr or getattr(raw, "__name__", repr(raw))
    plan, _ = _plan(raw, name)
    boundary = _route(spec.kind, raw, name)
    return BoundHook(name, spec.kind, fn, plan, boundary, spec.weight, spec.priority, owner)


@dataclass
class HookSet:
    """A rollout's hooks, grouped by where they hang, each group in a stable
    order: priority, then name (L20)."""

    request_interceptors: list[BoundHook]
    response_interceptors: list[BoundHook]
    request_stops: list[BoundHook]
    response_stops: list[BoundHook]
    trace_stops: list[BoundHook]
    rewards: list[BoundHook]
    metrics: list[BoundHook]

    @classmethod
    def build(cls, hooks: list[BoundHook]) -> HookSet:
        def pick(kind: str, boundary: str | None = None) -> list[BoundHook]:
            chosen = [h for h in hooks if h.kind == kind and (boundary is None or h.boundary == boundary)]
            return sorted(chosen, key=lambda h: (h.priority, h.name))

        return cls(
            request_interceptors=pick("intercept", "request"),
            response_interceptors=pick("intercept", "response"),
            request_stops=pick("stop", "request"),
            response_stops=pick("stop", "response"),
            trace_stops=pick("stop", "trace"),
            rewards=[h for h in hooks if h.kind == "reward"],
            metrics=[h for h in hooks if h.kind == "metric"],
        )


@functools.lru_cache(maxsize=None)
def _class_hooks(cls: type) -> tuple[tuple[str, HookSpec], ...]:
    found = []
    for attr in dir(cls):
        spec = getattr(getattr(cls, attr, None), "__rollkit_hook__", None)
        if isinstance(spec, HookSpec):
            found.append((attr, spec))
    return tuple(found)


def collect_hooks(obj: Any, owner: str) -> list[BoundHook]:
    """The hooks declared on `obj`'s class, bound to `obj` and validated."""
    return [bind(getattr(obj, attr), spec, owner, attr) for attr, spec in _class_hooks(type(obj))]


def hook_spec(fn: Callable) -> HookSpec:
    spec = getattr(fn, "__rollkit_hook__", None)
    if not isinstance(spec, HookSpec):
        raise TypeError(f"{fn!r} is not a rollkit hook: decorate it with @rk.reward, @rk.metric, @rk.stop or @rk.intercept")
    return spec


async def check_stop(hook: BoundHook, values: dict[str, Any]) -> bool:
    """Run a @stop; anything but a bool is a TaskError (L19)."""
    with crossing(TaskError, f"@stop {hook.name!r}"):
        verdict = await hook.call(values)
    if not isinstance(verdict, bool):
        raise TaskError(f"@stop {hook.name!r} must return a bool, got {type(verdict).__name__}: {verdict!r}")
    return verdict


async def rewrite(hook: BoundHook, values: dict[str, Any], current: Any) -> Any:
    """Run an @intercept; returns the replacement, or None for no change (L19)."""
    with crossing(TaskError, f"@intercept {hook.name!r}"):
        result = await hook.call(values)
    if result is not None and not isinstance(result, type(current)):
        raise TaskError(
            f"@intercept {hook.name!r} must return a {type(current).__name__} or None, "
            f"got {type(result).__name__}"
        )
    return result
