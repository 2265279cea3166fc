"""What-if replay: new or edited hooks, and limits, over traces already recorded.

`replay(traces, hooks, limits=None)` runs `@stop` and `@intercept` hooks,
and optionally `RolloutLimits`, over recorded traces with no model call,
turn by turn, in the order the session would have run them (L12, L13):
before turn k the limits and the `Trace` stops see the trace as it stood
then; the `Request` interceptors rewrite the request turn k sent, the
`Request` stops see the rewritten request; the `Response` interceptors
rewrite turn k's reply and the `Response` stops see the rewritten reply. The
request interceptors also run over the initial prompt, as at open (turn 0,
L7), when the task has one. When the recorded run tried one more call after
its last turn (refused by a limit or a stop, or failed), the limits and
`Trace` stops are checked before it too, as turn `num_turns + 1`, and the
`Request` hooks on its request when the trace holds all of it (not when it
carried the results of tools the last reply called: a refused request's
tool results are not recorded). It reports, per (trace, turn, hook), whether the stop would have fired
(or the limit been reached), whether the rewrite would have changed the
request or the reply (with a short diff), and per trace the turn it would
have ended after: `k - 1` when a limit, a trace stop or a request stop fires
before turn k, `k` when a response stop fires on turn k's reply.

What the harness would have kept is carried forward: the prompt as the
request interceptors rewrote it at open, and each reply as the response
interceptors rewrote it, so a later request holds them as in a live run
(a request rewrite is the session's alone and is not kept). Beyond that the
replay is faithful to what was recorded, not to what would have followed:
the model's later replies are the recorded ones, so after a rewrite that
would have changed them, or a stop, rows describe the recorded turns.

`hooks` is a Task subclass (built per trace from the trace's own data, so
hooks that read `self.data` see each task's), a Task, or hook functions
decorated with `@rk.stop` / `@rk.intercept`. Hooks get `trace`, `task`,
`data`, `request`, `response`; `runtime` and `ctx` are None (nothing runs).
A hook that raises is reported on its row (`error`), and the replay goes on.
A trace whose harness rewrote the conversation's history (its turns no longer
line up with its messages) gets one row of kind "skipped" saying so (its
`ends_after` is empty: look at `kind` before counting it as never stopped).

This module computes columns of plain values; `rk.replay_hooks` turns them
into a DataFrame (rollkit.notebook).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .budgets import RolloutLimits
from .hooks import BoundHook, HookSet, bind, check_stop, collect_hooks, hook_spec, rewrite
from .messages import Request, Response, ToolMessage, opening_messages
from .session import LIMIT_NAMES, active_limits
from .task import Task
from .trace import BY_TURN, Trace, info_as_of

__all__ = ["replay", "REPLAY_COLUMNS"]

REPLAY_COLUMNS = ("id", "example_id", "task_key", "turn", "hook", "kind", "boundary", "fired", "changed",
                  "diff", "error", "ends_after")


def _hook_source(hooks: Any) -> Any:
    """A function of a trace giving (HookSet, task) for it."""
    if isinstance(hooks, type) and issubclass(hooks, Task):
        def per_trace(trace: Trace) -> tuple[HookSet, Task]:
            task = hooks(hooks.Data.model_validate(trace.task.data))
            return HookSet.build(collect_hooks(task, "task")), task

        return per_trace
    if isinstance(hooks, Task):
        fixed = (HookSet.build(collect_hooks(hooks, "task")), hooks)
        return lambda trace: fixed
    if callable(hooks):
        hooks = [hooks]
    if not isinstance(hooks, Iterable):
        raise TypeError("hooks must be a Task subclass, a Task, or @rk.stop / @rk.intercept functions")
    bound = [bind(fn, hook_spec(fn), "replay") for fn in hooks]
    for hook in bound:
        if hook.kind not in ("stop", "intercept"):
            raise TypeError(f"replay runs @stop and @intercept hooks; {hook.name!r} is a @{hook.kind}")
    fixed = (HookSet.build(bound), None)
    return lambda trace: fixed


def _diff(old: Any, new: Any) -> str:
    """Where a rewrite changed a request (first changed message) or a reply."""
    if isinstance(old, Request):
        for i, (a, b) in enumerate(zip(old.messages, new.messages)):
            if a != b:
                return f"message {i} ({a.role}): {_short(getattr(a, 'content', ''))} -> {_short(getattr(b, 'content', ''))}"
        if len(old.messages) != len(new.messages):
            return f"{len(old.messages)} messages -> {len(new.messages)}"
        return "tools or parameters changed"
    a, b = old.message, new.message
    if a.content != b.content:
        return f"reply: {_short(a.content)} -> {_short(b.content)}"
    if a.tool_calls != b.tool_calls:
        return f"tool calls: {[c.name for c in a.tool_calls]} -> {[c.name for c in b.tool_calls]}"
    return "usage or finish reason changed"


def _short(text: Any) -> str:
    text = "" if text is None else str(text)
    return repr(text if len(text) <= 48 else text[:45] + "...")


def _before(trace: Trace, turn: int, positions: list[int]) -> Trace:
    """The trace as it stood before turn `turn` (1-based): its earlier calls,
    and the messages the ledger held then (the reply of the turn before, the
    user messages of a segment starting now), without the tool results that
    only reach the ledger with the next request. Turn `num_turns + 1` is the
    call the recorded run attempted after its last turn (refused or failed)."""
    recorded = turn <= len(trace.sampled)
    end = trace.sampled[turn - 1] if recorded else len(trace.messages)
    messages = trace.messages[:end]
    if turn > 1:
        previous = trace.sampled[turn - 2]
        tail = [m for m in messages[previous + 1:] if not isinstance(m, ToolMessage)]
        messages = [*messages[: previous + 1], *tail]
    # Before the attempted call: the calls up to the last turn (not the failed one being checked).
    calls = trace.model_calls[: positions[turn - 1] if recorded else (positions[-1] + 1 if positions else 0)]
    # The info recorded per turn (a toolset's state) as it stood before this turn.
    info = trace.info
    if BY_TURN in info:
        info = {k: v for k, v in info.items() if k not in info[BY_TURN] and k != BY_TURN}
        info.update(info_as_of(trace.info, turn - 1))
    # A shallow copy with three fields replaced: model_construct would build
    # every default again (slow in pydantic), and nothing here is mutated.
    view = trace.model_copy(update={"messages": messages, "model_calls": calls, "info": info})
    return view


def _attempted_after_last_turn(trace: Trace, positions: list[int], hooks: HookSet) -> bool:
    """Whether the recorded run tried one more call after its last turn: a
    call that failed, or one refused by a limit or a trace/request @stop
    (the live session checks those before every call, L12)."""
    after = positions[-1] + 1 if positions else 0
    if any(not call.committed for call in trace.model_calls[after:]):
        return True
    refusers = {h.name for h in (*hooks.trace_stops, *hooks.request_stops)}
    return trace.stop_condition is not None and (trace.stop_condition in LIMIT_NAMES or trace.stop_condition in refusers)


def _rebuildable(trace: Trace) -> bool:
    """Whether the request of the call attempted after the last turn can be
    rebuilt from the trace: it can unless the last reply called tools, whose
    results reach the ledger only with a request that was then refused."""
    last = trace.messages[-1] if trace.messages else None
    return not getattr(last, "tool_calls", None)


class _Rows:
    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {name: [] for name in REPLAY_COLUMNS}
        self.start = 0

    def add(self, trace: Trace, turn: int, hook: str, kind: str, boundary: str, fired: bool,
            changed: bool | None = None, diff: str | None = None, error: str | None = None) -> None:
        cols = self.cols
        cols["id"].append(trace.id)
        cols["example_id"].append(trace.info.get("example_id"))
        cols["task_key"].append(trace.task.key)
        cols["turn"].append(turn)
        cols["hook"].append(hook)
        cols["kind"].append(kind)
        cols["boundary"].append(boundary)
        cols["fired"].append(fired)
        cols["changed"].append(changed)
        cols["diff"].append(diff)
        cols["error"].append(error)

    def close_trace(self, ends_after: int | None) -> None:
        n = len(self.cols["id"])
        self.cols["ends_after"].extend([ends_after] * (n - self.start))
        self.start = n


async def _stop(rows: _Rows, trace: Trace, turn: int, hook: BoundHook, values: dict[str, Any]) -> bool:
    try:
        fired = await check_stop(hook, values)
    except Exception as exc:
        rows.add(trace, turn, hook.name, "stop", hook.boundary or "", False, error=f"{type(exc).__name__}: {exc}")
        return False
    rows.add(trace, turn, hook.name, "stop", hook.boundary or "", fired)
    return fired


async def _rewrite(rows: _Rows, trace: Trace, turn: int, hook: BoundHook, values: dict[str, Any], current: Any) -> Any:
    try:
        new = await rewrite(hook, values, current)
    except Exception as exc:
        rows.add(trace, turn, hook.name, "intercept", hook.boundary or "", False, error=f"{type(exc).__name__}: {exc}")
        return current
    changed = new is not None and new != current
    rows.add(trace, turn, hook.name, "intercept", hook.boundary or "", changed, changed, _diff(current, new) if changed else None)
    return new if changed else current


class _Held:
    """What the harness would hold instead of the recorded messages: the
    opening messages as the request interceptors rewrote them at open (L7,
    any number of them), and every reply as the response interceptors
    rewrote it. A request rewrite is the session's alone and does not last."""

    def __init__(self) -> None:
        self.head: list[Any] | None = None
        self.head_of = 0  # how many recorded messages `head` stands for
        self.replies: dict[int, Any] = {}

    def __bool__(self) -> bool:
        return self.head is not None or bool(self.replies)

    def __call__(self, messages: list[Any]) -> list[Any]:
        if self.replies:
            messages = [self.replies.get(i, m) for i, m in enumerate(messages)]
        if self.head is not None:
            messages = [*self.head, *messages[self.head_of:]]
        return messages


def _request(messages: list[Any], tools: list[dict[str, Any]]) -> Request:
    return Request.model_construct(messages=messages, tools=tools, model=None, params={})


async def _replay_open(rows: _Rows, trace: Trace, hooks: HookSet, task: Task | None, base: dict[str, Any],
                       tools: list[dict[str, Any]], held: _Held) -> None:
    """The prompt rewrite at open (turn 0), run only when the task has a
    prompt, as live (a user-first task opens with nothing to rewrite)."""
    data = task.data.model_dump() if task is not None else trace.task.data
    if not hooks.request_interceptors or not data.get("prompt"):
        return
    count = len(opening_messages(data.get("system_prompt"), data.get("prompt")))
    first = _request(trace.messages[:count], tools)
    request = first
    for hook in hooks.request_interceptors:
        request = await _rewrite(rows, trace, 0, hook, {**base, "request": request}, request)
    if request is not first:
        held.head, held.head_of = list(request.messages), count


async def _replay_one(rows: _Rows, trace: Trace, hooks: HookSet, task: Task | None, limits: list[tuple[str, int, str]],
                      tools: list[dict[str, Any]]) -> None:
    data = task.data if task is not None else None
    base = {"task": task, "data": data, "runtime": None, "ctx": None}
    if len(trace.sampled) != trace.num_turns:
        rows.add(trace, 0, "(not replayed)", "skipped", "", False, error=(
            "the harness rewrote the conversation's history, so its turns no longer line up with its "
            "messages; this trace is left out"))
        rows.close_trace(None)
        return
    ends: int | None = None
    turns = trace.num_turns
    positions = [i for i, c in enumerate(trace.model_calls) if c.committed]
    held = _Held()
    await _replay_open(rows, trace, hooks, task, base, tools, held)
    last = turns + 1 if _attempted_after_last_turn(trace, positions, hooks) else turns
    for turn in range(1, last + 1):
        if hooks.trace_stops:
            view = _before(trace, turn, positions)
            if held:
                view = view.model_copy(update={"messages": held(view.messages)})
        # Each committed call holds the budget totals right after it.
        spent = trace.model_calls[positions[turn - 2]] if turn > 1 else None
        for name, limit, attr in limits:
            used = getattr(spent, "cum_" + attr.removeprefix("num_")) if spent else 0
            reached = used is not None and used >= limit  # a cost not known is no cost reached
            rows.add(trace, turn, name, "limit", "limit", reached)
            if reached and ends is None:
                ends = turn - 1
        for hook in hooks.trace_stops:
            if await _stop(rows, trace, turn, hook, {**base, "trace": view}) and ends is None:
                ends = turn - 1
        if turn > turns and not _rebuildable(trace):
            break  # its request held tool results the trace never recorded
        index = trace.sampled[turn - 1] if turn <= turns else len(trace.messages)
        request = _request(held(trace.messages[:index]), tools)
        for hook in hooks.request_interceptors:
            request = await _rewrite(rows, trace, turn, hook, {**base, "request": request}, request)
        for hook in hooks.request_stops:
            if await _stop(rows, trace, turn, hook, {**base, "request": request}) and ends is None:
                ends = turn - 1
        if turn > turns:
            break  # the attempted call has no recorded reply
        call = trace.model_calls[positions[turn - 1]]
        recorded = Response.model_construct(message=trace.messages[index], usage=call.usage,
                                            finish_reason=call.finish_reason or "stop", model=None)
        response = recorded
        for hook in hooks.response_interceptors:
            response = await _rewrite(rows, trace, turn, hook, {**base, "response": response}, response)
        if response is not recorded:
            held.replies[index] = response.message
        for hook in hooks.response_stops:
            if await _stop(rows, trace, turn, hook, {**base, "response": response}) and ends is None:
                ends = turn
    rows.close_trace(ends)


async def replay(traces: Iterable[Trace], hooks: Any = (), *, limits: Any = None) -> dict[str, list[Any]]:
    """The replay's columns (REPLAY_COLUMNS), one row per (trace, turn, hook
    or limit); see the module docstring."""
    hooks_for = _hook_source(hooks)
    active: list[tuple[str, int, str]] = []
    if limits is not None:
        limits = limits if isinstance(limits, RolloutLimits) else RolloutLimits(**dict(limits))
        active = active_limits(limits)
    rows = _Rows()
    for i, trace in enumerate(traces):
        if not isinstance(trace, Trace):
            raise TypeError(f"item {i} is a {type(trace).__name__}, not an rk.Trace")
        hook_set, task = hooks_for(trace)
        tools = [spec for ts in task.all_toolsets() for spec in ts.specs()] if task is not None else []
        await _replay_one(rows, trace, hook_set, task, active, tools)
    return rows.cols
