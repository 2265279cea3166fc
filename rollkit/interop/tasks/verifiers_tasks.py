"""verifiers v1 tasksets as rollkit tasks, scored by the tasks' own `@vf.reward`s and `@vf.metric`s.

A source is a `vf.Taskset` instance, a `Taskset` class (built with its
config: `config=` or the config's fields as options), or
`"verifiers:TASKSET_ID"`, the id of an installed taskset package as
`vf-eval` takes it. The tasks are taken the way verifiers iterates a taskset
(`iter(taskset)`: each task's `idx` set and the taskset-level system prompt
applied); each becomes a rollkit task with its prompt, system prompt and the
whole verifiers row in its data, so a saved trace rebuilds the taskset, and
the task, in a new process.

Tools: each of the task's toolsets (`Task.toolsets(config)`) and the
taskset's shared ones (`Taskset.toolsets(config)`) become a rollkit toolset
per rollout, its tools named as verifiers' chat loop names them for the model
(`<TOOL_PREFIX>_<tool>`). verifiers serves a toolset as an MCP server per
rollout whose state is the rollout's `trace.state`, pulled before and pushed
after each call; here the toolset object runs in the rollout's process, its
`setup()` and `setup_task(data)` at open, and the state round-trips the same
way through `trace.info["verifiers_state"]`, so it lives as long as the
rollout and is saved with it; it is recorded per turn
(`Trace.record_turn_info`), so a fork after turn k, or a replay, starts from
the state as it stood after turn k.

Scoring: every metric, then every reward of the task (`Task.hooks`, config-
plugged functions included), is called as `Task.score` calls it (verifiers'
`invoke` hands each the parameters it names of task and trace), on a
`vf.Trace` built from the rollkit trace as verifiers' trace stands while it
scores: the conversation as its message graph (which replies the model
sampled, each node stamped when its turn committed, the tools offered on its
root), `trace.tools` (the tools the requests offered, as verifiers' chat
dialect reads them, recorded per turn as `trace.info["verifiers_tools"]`),
the model calls with their model, sampling, usage, finish reason and time,
the agent's model and turn/token limits,
`trace.timing` from rollkit's phases (the same five; scoring not yet ended,
the agent's model/harness split not yet made, as verifiers makes them after
scoring), the toolsets' state, and the stop that ended it (completed, not yet
`ok`: verifiers sets that after scoring). Names and weights are the
task's. A signal that raises is missing on that trace with its error; one
that needs a verifiers runtime (a sandbox: a `runtime` parameter without a
default) is missing with an error naming it, and a task that carries what
rollkit does not map (an `@vf.intercept`, a `setup`/`finalize` override, a
container image ...: `verifiers_coverage.COVERAGE`) fails at open with an
error naming each such part. A
config-plugged judge (`TaskConfig.judges`) runs, as verifiers runs it, against
the OpenAI-compatible endpoint `judge=` names (its base_url, model and the
environment variable holding its key, in verifiers' own client config, saved
with the task); without `judge=` its reward is missing with an error naming
the model it would call (by default a hosted one) and how to name one. A
judge the task's own reward builds from a judge config in the task's config
(`Judge(self.config.judge)`) is aimed the same way: the reward sees a copy of
the task whose config's judge fields are aimed, or, none named, stand-ins
that make the reward missing with that error when it uses one. A reward
whose source builds a judge's client itself (`JudgeConfig(...)`, or a
`Judge` given no config: a hosted model) cannot be aimed without changing
verifiers for every rollout of the process, so it is missing with an error
naming it and saying to read the judge from the task's config.
The task's @vf.stops map onto rollkit's stops by their boundary, checked
where verifiers checks them: trace stops before each model call
(`verifiers_stop`), request stops on each request, cut after each new tool
result, and at the tool gate, on each tool call of a reply before it runs
(`verifiers_request_stop`; a stopped request's messages the trace does not
hold are kept as `trace.info["verifiers_unsent"]`, as verifiers commits them),
response stops on each reply (`verifiers_response_stop`); the one that
fired is `trace.info["verifiers_stop"]`.

This module only builds tasks; it imports verifiers on first use.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import json
import textwrap
from collections.abc import Mapping
from typing import Any

from ...core.gcpause import paused
from ...core.errors import TaskError, ToolsetError, Unavailable, UsageError
from ...core.hooks import reward, stop
from ...core.messages import AssistantMessage, Request, Response, SystemMessage, ToolMessage, UserMessage
from ...core.task import Task, TaskData
from ...core.tools import Tool, Toolset
from ...core.trace import Trace
from .tasklist import TaskList
from .verifiers_coverage import unmapped

__all__ = ["VerifiersData", "VerifiersTask", "build", "judge_endpoint", "verifiers_trace"]

STATE_KEY = "verifiers_state"  # trace.info key of the toolsets' shared state
TOOLS_KEY = "verifiers_tools"  # trace.info key of the tools the requests offered (verifiers' trace.tools)
UNSENT_KEY = "verifiers_unsent"  # trace.info key of a stopped request's messages the trace does not hold

# Tasksets loaded in this process, by (source, config as JSON), and their tasks by idx.
_TASKSETS: dict[tuple[str, str], tuple[Any, dict[int, Any]]] = {}


def vf() -> Any:
    """verifiers.v1, imported on first use."""
    try:
        return importlib.import_module("verifiers.v1")
    except ImportError as exc:
        raise Unavailable(f"verifiers v1 tasksets need verifiers>=0.4: pip install 'rollkit[verifiers]' ({exc})") from None


class VerifiersData(TaskData):
    """One verifiers task: where its taskset comes from (`taskset`: "verifiers:ID"
    or "module:Class", with its config) and its row (`row`, verifiers' TaskData)."""

    taskset: str
    config: dict[str, Any] = {}
    idx: int
    row: dict[str, Any] = {}
    judge: dict[str, Any] = {}
    framework: str = "verifiers"
    framework_version: str = ""


class VerifiersToolset(Toolset):
    """One verifiers toolset, for one rollout: its tools under the names the
    model sees in verifiers, its state the rollout's (see the module's docstring)."""

    def __init__(self, server: Any, task: VerifiersTask, *, shared: bool) -> None:
        self.server, self.task, self.shared = server, task, shared
        self.trace: Trace | None = None
        prefix = server.server_name
        tools = []
        for fn in vf().utils.decorators.discover_decorated(server, "tool"):
            raw = getattr(fn, "tool_name", None) or fn.__name__
            tool = Tool(self._stateful(fn), name=f"{prefix}_{raw}" if prefix else raw,
                        description=(fn.__doc__ or "").strip() or None)
            # The model sees the input schema verifiers' MCP server advertises (mcp's own
            # build of it, titled), not rollkit's: a new dict, the compiled one is shared.
            tool.spec = {**tool.spec, "function": {**tool.spec["function"], "parameters": _advertised(fn, raw)}}
            tools.append(tool)
        super().__init__(tools, name=prefix or type(server).__name__)

    async def start(self, ctx: Any) -> None:
        self.trace = ctx.trace
        try:
            await self.server.setup()
            if not self.shared:
                await self.server.setup_task(self.task.vtask.data)
        except Exception as exc:
            raise ToolsetError(f"verifiers toolset {self.name!r} of task {self.task.key!r} did not start: "
                               f"{type(exc).__name__}: {exc}") from exc
        return None

    async def stop(self) -> None:
        # What verifiers' server closes when it exits (resources a toolset's setup entered).
        await self.server._exit_stack.aclose()

    def _stateful(self, fn: Any) -> Any:
        """`fn` run as verifiers' server runs a tool: the rollout's state pulled
        into the server's state type, set for the call, pushed back if changed."""
        call_state = importlib.import_module("verifiers.v1.mcp.server")._call_state
        adapter = self.server._state_adapter

        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            assert self.trace is not None, "a verifiers tool ran before its toolset started"
            stateful = self.server._state_cls is not vf().State
            state = adapter.validate_python(self.trace.info.get(STATE_KEY, {})) if stateful else vf().State()
            before = adapter.dump_json(state)
            token = call_state.set(state)
            try:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
            finally:
                call_state.reset(token)
            if stateful and adapter.dump_json(state) != before:
                merged = {**self.trace.info.get(STATE_KEY, {}), **adapter.dump_python(state, mode="json")}
                self.trace.record_turn_info({STATE_KEY: merged})
            return result

        return call


def _advertised(fn: Any, name: str) -> dict[str, Any]:
    """The input schema verifiers' tool server advertises for `fn` (it
    registers each tool with the MCP server's `add_tool`, which builds it so)."""
    return importlib.import_module("mcp.server.mcpserver.tools.base").Tool.from_function(fn, name=name).parameters


class VerifiersTask(Task):
    """A verifiers v1 task, prompted by its row and scored by its own rewards and metrics."""

    Data = VerifiersData

    def __init__(self, data: VerifiersData | None = None, /, *, vtask: Any = None, **fields: Any) -> None:
        super().__init__(data, **fields)
        # Each rollout's last request, by trace id, for the tool gate on its reply.
        self._sent: dict[str, list[Any]] = {}
        self._vtask = vtask if vtask is not None else task_at(self.data.taskset, self.data.config, self.data.idx)
        # What the verifiers task refuses depends only on it and its taskset,
        # which this task keeps: found at the first setup, not at every rollout's.
        # Its stops by boundary likewise: built once, not three times a turn.
        self._refused: list[str] | None = None
        self._by_boundary: tuple[list[Any], list[Any], list[Any]] | None = None

    @property
    def name(self) -> str:
        return self.data.taskset

    @property
    def vtask(self) -> Any:
        """The verifiers task (rebuilt from its taskset when this task was rebuilt from a trace)."""
        return self._vtask

    def all_toolsets(self) -> list[Toolset]:
        taskset, _tasks = loaded(self.data.taskset, self.data.config)
        own = [VerifiersToolset(s, self, shared=False) for s in type(self._vtask).toolsets(self._vtask.config)]
        shared = [VerifiersToolset(s, self, shared=True) for s in type(taskset).toolsets(taskset.config)]
        return [*own, *shared, *super().all_toolsets()]

    async def setup(self, ctx: Any) -> None:
        """Record where the task came from; refuse it, naming each part, when it
        carries what rollkit does not map (`verifiers_coverage.unmapped`)."""
        ctx.trace.record_info(source=provenance(self.data))
        if self._refused is None:
            taskset, _tasks = loaded(self.data.taskset, self.data.config)
            self._refused = unmapped(self._vtask, taskset)
        if self._refused:
            raise TaskError(f"verifiers task {type(self._vtask).__name__} {self.data.id!r} (idx {self.data.idx}) "
                            f"carries what rollkit does not map, so it cannot run here: {'; '.join(self._refused)}")

    def _stops(self) -> tuple[list[Any], list[Any], list[Any]]:
        """`_stops(self.vtask)`, built once (three stop hooks ask it every turn)."""
        if self._by_boundary is None:
            self._by_boundary = _stops(self._vtask)
        return self._by_boundary

    @stop
    async def verifiers_stop(self, trace: Trace, ctx: Any) -> bool:
        """The task's trace @vf.stop functions, checked as verifiers checks
        them before each model call; the one that fired is `trace.info["verifiers_stop"]`."""
        trace_stops, _, _ = self._stops()
        if not trace_stops:
            return False
        # The hook's `trace` is a read-only view: the record goes on ctx.trace.
        return await _first_fired(trace_stops, {vf().Trace: verifiers_trace(trace, self._vtask)}, ctx.trace)

    @stop
    async def verifiers_response_stop(self, response: Response, ctx: Any) -> bool:
        """The task's response @vf.stop functions, checked on each reply as
        verifiers checks them (before the reply is delivered)."""
        _, response_stops, request_stops = self._stops()
        sent = self._sent.pop(ctx.trace.id, [])
        if not (response_stops or request_stops):
            return False
        v = vf()
        reply = _vf_message(response.message)
        built = v.Response(id=response.id or "", created=0, model=response.model or "", message=reply,
                           finish_reason=_finish(response.finish_reason))
        seen = verifiers_trace(ctx.trace, self._vtask)
        if await _first_fired(response_stops, {v.Response: built, v.Trace: seen}, ctx.trace):
            return True
        # verifiers' tool gate: before the harness runs a tool call, the request stops see
        # the branch with that call and an empty result for it (one call at a time), and
        # the trace with the turn committed (the request's new messages, then the reply).
        if not request_stops:
            return False
        tools = _vf_tools(ctx.trace.info.get(TOOLS_KEY, []))
        for message in sent[len(ctx.trace.messages):]:
            seen.nodes.append(v.MessageNode(parent=len(seen.nodes) - 1, message=message))
        seen.nodes.append(v.MessageNode(parent=len(seen.nodes) - 1, message=reply, sampled=True))
        for call in reply.tool_calls or []:
            probe = v.ToolMessage(tool_call_id=call.id, content="", name=call.name)
            gate = v.Request(messages=[*sent, reply, probe], tools=tools or None)
            if await _first_fired(request_stops, {v.Request: gate, v.Trace: seen}, ctx.trace):
                return True
        return False

    @stop
    async def verifiers_request_stop(self, request: Request, ctx: Any) -> bool:
        """The task's request @vf.stop functions, checked before each model call
        as verifiers checks them: on the request cut after each new tool result,
        then whole. The tools the request offers are recorded per turn
        (`trace.info["verifiers_tools"]`, verifiers' `trace.tools`); when a stop
        fires, the request's messages the trace does not hold yet are kept
        (`info["verifiers_unsent"]`), as verifiers commits them as nodes."""
        v, trace = vf(), ctx.trace
        tools = [tool.model_dump(mode="json", exclude_none=True)
                 for tool in _parse_tools(request.tools)]
        known = _merged_tools(trace.info.get(TOOLS_KEY, []), tools)
        if known != trace.info.get(TOOLS_KEY, []):
            trace.record_turn_info({TOOLS_KEY: known})
        _, _, request_stops = self._stops()
        if not request_stops:
            return False
        messages = [_vf_message(m) for m in request.messages]
        self._sent[trace.id] = messages
        held = len(trace.messages) if list(request.messages[:len(trace.messages)]) == trace.messages else 0
        ends = [i + 1 for i in range(held, len(messages)) if isinstance(messages[i], v.ToolMessage)]
        seen = verifiers_trace(trace, self._vtask)
        for end in ends if ends and ends[-1] == len(messages) else [*ends, len(messages)]:
            cut = v.Request(messages=messages[:end], tools=_vf_tools(tools) or None)
            if await _first_fired(request_stops, {v.Request: cut, v.Trace: seen}, trace):
                trace.record_turn_info({UNSENT_KEY: [m.model_dump(mode="json") for m in messages[held:]]})
                return True
        return False

    @reward
    async def verifiers_scores(self, trace: Trace) -> dict[str, float | None]:
        """The task's metrics and rewards, by their names and weights (recorded
        on the trace directly, as verifiers records them)."""
        self._sent.pop(trace.id, None)
        await score(self._vtask, trace, self.data.judge)
        return {}


def _stops(vtask: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """The task's trace, response and request @vf.stop functions, as verifiers sorts them."""
    v, session = vf(), importlib.import_module("verifiers.v1.session")
    by_boundary: dict[Any, list[Any]] = {v.Trace: [], v.Response: [], v.Request: []}
    for fn in vtask.hooks("stop"):
        by_boundary[session.hook_boundary(fn, allow_trace=True)].append(fn)
    return by_boundary[v.Trace], by_boundary[v.Response], by_boundary[v.Request]


def _parse_tools(specs: list[dict[str, Any]]) -> list[Any]:
    """A request's tool declarations as verifiers' chat dialect reads them."""
    return importlib.import_module("verifiers.v1.dialects.chat").parse_tools(specs) or []


def _vf_tools(dumped: list[dict[str, Any]]) -> list[Any]:
    return [vf().Tool.model_validate(tool) for tool in dumped]


def _merged_tools(known: list[dict[str, Any]], offered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tools seen across requests, the latest definition winning for each
    identity (namespace, name, type), as verifiers keeps `trace.tools`."""
    merged = {(t.get("namespace"), t["name"], t.get("type", "function")): t for t in [*known, *offered]}
    return list(merged.values())


async def _first_fired(stops: list[Any], available: dict[Any, Any], trace: Trace) -> bool:
    """Call `stops` as verifiers calls them, in order; the first that fires is
    recorded as `trace.info["verifiers_stop"]`."""
    session = importlib.import_module("verifiers.v1.session")
    for fn in stops:
        result = await session.call_hook(fn, available)
        if not isinstance(result, bool):
            raise TaskError(f"@vf.stop {fn.__name__!r} must return bool, got {type(result).__name__}")
        if result:
            trace.record_turn_info({"verifiers_stop": fn.__name__})
            return True
    return False


def _needs_runtime(fn: Any) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


async def score(vtask: Any, trace: Trace, judge: Mapping[str, Any] | None = None) -> None:
    """Each of `vtask`'s metrics, then rewards, then config-plugged judges,
    called as `Task.score` calls them, recorded on `trace`; one that raises
    or needs a runtime is missing with its error. The judges run against the
    endpoint `judge` names (see `judge_endpoint`), or are refused without one:
    the plugged ones, and those the task's own rewards build from a judge
    config in the task's config (`scoring_task`)."""
    available = {"task": vtask.data, "trace": verifiers_trace(trace, vtask, scoring=True)}
    scored = scoring_task(vtask, judge)
    for kind in ("metric", "reward"):
        for fn in scored.hooks(kind):
            weight = float(getattr(fn, "_vf_weight", 1.0)) if kind == "reward" else None
            await _record(kind, fn.__name__, fn, weight, vtask, available, trace)
    for plugged in vtask.plugged_judges():
        name, weight = plugged.reward_name, float(plugged.config.weight)
        if not judge:
            trace.record_signal("reward", name, None, weight)
            trace.record_signal_error(name, _judge_refusal(vtask, name, plugged.config))
            continue
        named = vf().utils.loaders.load_judge(_aimed(plugged.config, judge))
        await _record("reward", name, named.score, weight, vtask, available, trace, what="judge")


async def _record(kind: str, name: str, fn: Any, weight: float | None, vtask: Any, available: dict[str, Any],
                  trace: Trace, what: str | None = None) -> None:
    """One scoring function called as verifiers' `invoke` calls it, its value
    (or each value of the mapping it returns) recorded under `name`."""
    what = what or kind
    trace.record_signal(kind, name, None, weight)
    refusal = _refusal(fn, f"verifiers {what} {name!r} of task {type(vtask).__name__}")
    if refusal:
        trace.record_signal_error(name, refusal)
        return
    try:
        value = vf().utils.decorators.invoke(fn, available)
        if not inspect.isawaitable(value):  # verifiers gathers them: a plain value fails there too
            raise TypeError(f"it returned {type(value).__name__}, not an awaitable; verifiers awaits "
                            "every scoring function (make it async)")
        value = await value
    except Exception as exc:
        unnamed = _cause(exc, JudgeNotNamed)
        trace.record_signal_error(name, f"verifiers {what} {name!r} of task {type(vtask).__name__} {unnamed}"
                                  if unnamed else f"verifiers {what} {name!r} raised {type(exc).__name__}: {exc}")
        return
    if isinstance(value, Mapping):
        trace.drop_signal(kind, name)
        for key, number in value.items():
            trace.record_signal(kind, str(key), _number(number), weight)
    else:
        trace.record_signal(kind, name, _number(value), weight)


def _refusal(fn: Any, what: str) -> str | None:
    """Why `fn` cannot be scored here, before it is called: it needs a
    verifiers runtime, or it builds a judge whose endpoint judge= cannot aim."""
    if _needs_runtime(fn):
        return f"{what} needs a verifiers runtime (a sandbox), which rollkit does not provide"
    built = own_judge(getattr(fn, "__func__", fn))
    if built:
        return (f"{what} builds its judge's client in the reward itself ({built}(...)), which judge= cannot "
                f"aim; {JUDGE_ONLY_NAMED}: read the judge's config from the task's config (a JudgeConfig field, "
                "e.g. Judge(self.config.judge)), which rk.tasks_from(..., judge={...}) aims")
    return None


def _cause(exc: BaseException | None, kind: type[BaseException]) -> BaseException | None:
    """`exc` or the first of its causes or contexts that is a `kind`."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, kind):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


class JudgeNotNamed(TaskError):
    """A reward used a judge config of the task's config while no judge= was named
    (task code that broke: the reward is missing with this error)."""


class UnnamedJudge:
    """Stands, while scoring, for a judge config in the task's config when no
    judge= is named: any use of it (building a Judge with it reads it) raises
    `JudgeNotNamed`, so the reward is missing with an error naming the field."""

    def __init__(self, field: str, config: Any) -> None:
        self.__dict__["_why"] = (f"calls the judge in its config's {field!r} (judge model {config.model!r} at "
                                 f"{config.base_url}); {NAME_A_JUDGE}")

    def __getattr__(self, name: str) -> Any:
        raise JudgeNotNamed(self.__dict__["_why"])

    def __bool__(self) -> bool:
        raise JudgeNotNamed(self.__dict__["_why"])


def scoring_task(vtask: Any, judge: Mapping[str, Any] | None) -> Any:
    """`vtask` as its rewards are called: each judge config among its config's
    fields (a `JudgeConfig`, other than the plugged `judges`) aimed at the
    endpoint `judge` names, or, none named, an `UnnamedJudge` in its place. A
    shallow copy: the task the rollout holds keeps its own config."""
    judge_config = importlib.import_module("verifiers.v1.configs.judge").JudgeConfig
    config = vtask.config
    fields = [name for name in type(config).model_fields
              if name != "judges" and isinstance(getattr(config, name), judge_config)]
    if not fields:
        return vtask
    clone = copy.copy(vtask)
    clone.config = config.model_copy(update={
        name: _aimed(getattr(config, name), judge) if judge else UnnamedJudge(name, getattr(config, name))
        for name in fields})
    return clone


@functools.lru_cache(maxsize=256)
def own_judge(fn: Any) -> str | None:
    """The judge client `fn` builds from nothing the task's config holds, as
    written in its source: a call of a client config type (`JudgeConfig(...)`)
    or of a `Judge` given no config (which takes the default, a hosted model)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    client_config = importlib.import_module("verifiers.v1.configs.client").BaseClientConfig
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = _resolved(node.func, getattr(fn, "__globals__", {}))
        if not isinstance(called, type):
            continue
        unconfigured = not node.args and not any(k.arg == "config" for k in node.keywords)
        if issubclass(called, client_config) or (issubclass(called, vf().Judge) and unconfigured):
            return ast.unparse(node.func)
    return None


def _resolved(node: ast.expr, names: dict[str, Any]) -> Any:
    """What a name or dotted attribute in a function's source names in its module."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        return getattr(_resolved(node.value, names), node.attr, None)
    return None


# The client fields of verifiers' JudgeConfig (its BaseClientConfig) that
# `judge=` may set: where to call and which environment variable holds the
# key, never a key itself (the endpoint is saved with each task's data).
JUDGE_FIELDS = ("base_url", "model", "api_key_var", "headers_from_env", "timeout")


def judge_endpoint(judge: Any) -> dict[str, Any]:
    """`judge=` checked: a mapping with `base_url` and `model` (an OpenAI-
    compatible endpoint), optionally `api_key_var` (the environment variable
    verifiers reads the key from; none given, it sends no key),
    `headers_from_env` and `timeout`, as verifiers' judge config names them."""
    if judge is None:
        return {}
    if not isinstance(judge, Mapping):
        raise UsageError(f"judge= takes a mapping like {{'base_url': 'http://127.0.0.1:8000/v1', 'model': "
                         f"'NAME', 'api_key_var': 'ENV_VAR'}}, not a {type(judge).__name__}")
    unknown = sorted(set(judge) - set(JUDGE_FIELDS))
    missing = [k for k in ("base_url", "model") if not judge.get(k)]
    if unknown or missing:
        raise UsageError(f"judge= takes {list(JUDGE_FIELDS)} (base_url and model required; a key only through "
                         f"api_key_var, the environment variable holding it): missing {missing}, unknown {unknown}")
    return {"api_key_var": "", **judge}


def _aimed(config: Any, judge: Mapping[str, Any]) -> Any:
    """The plugged judge's config aimed at the endpoint `judge` names, validated
    by its own type (so its prompt, choices and weight stay the task's)."""
    return type(config).model_validate({**config.model_dump(), **judge})


JUDGE_ONLY_NAMED = "rollkit calls a judge only at an endpoint you name, so this reward is missing"
NAME_A_JUDGE = (JUDGE_ONLY_NAMED + ": pass rk.tasks_from(..., judge={'base_url': URL, 'model': NAME, "
                "'api_key_var': ENV_VAR})")


def _judge_refusal(vtask: Any, name: str, config: Any) -> str:
    return (f"verifiers judge {name!r} of task {type(vtask).__name__} would call judge model {config.model!r} at "
            f"{config.base_url}; {NAME_A_JUDGE}")


def _finish(reason: str | None) -> str | None:
    """A finish reason as verifiers types it (one it does not know is None)."""
    return reason if reason in ("stop", "length", "tool_calls") else None


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _vf_message(message: Any) -> Any:
    v = vf()
    if isinstance(message, SystemMessage):
        return v.SystemMessage(content=message.content)
    if isinstance(message, UserMessage):
        return v.UserMessage(content=message.content)
    if isinstance(message, ToolMessage):
        return v.ToolMessage(tool_call_id=message.tool_call_id, content=message.content, name=message.name)
    assert isinstance(message, AssistantMessage), type(message)
    calls = [v.ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls or []]
    return v.AssistantMessage(content=message.content, reasoning_content=message.reasoning, tool_calls=calls or None)


def _vf_calls(trace: Trace, stamps: list[float]) -> list[Any]:
    """The model calls, each committed one tied to the reply node it produced,
    as verifiers records them at intercept time (the model requested, its
    sampling settings, usage with cache reads split out, finish reason, time).
    `stamps` gets each node's time: when the call that brought it in ended."""
    v = vf()
    replies = iter(trace.sampled)
    calls = []
    for call in trace.model_calls:
        node = next(replies, None) if call.committed else None
        if node is not None:
            stamps.extend(call.end for _ in range(len(stamps), node + 1))
        usage = call.usage
        counted = usage.input_tokens is not None and usage.output_tokens is not None
        calls.append(v.ModelCall(
            node=node, model=trace.agent.get("model"), finish_reason=_finish(call.finish_reason),
            sampling=v.Sampling.model_validate(call.sampling or {}),
            usage=v.Usage(prompt_tokens=usage.input_tokens - (usage.cache_read_tokens or 0),
                          completion_tokens=usage.output_tokens, cached_input_tokens=usage.cache_read_tokens,
                          reasoning_tokens=usage.reasoning_tokens) if counted else None,
            time=v.TimeSpan(start=call.start, end=call.end),
            error=v.Error(type=call.error.type, message=call.error.message) if call.error else None))
    return calls


def _timing(trace: Trace) -> Any:
    """rollkit's phase spans as verifiers' `Timing` (the same five phases; an
    open span has no end yet). The agent's model/harness split stays zero, as
    verifiers splits it only after scoring."""
    v = vf()
    spans = {name: v.TimeSpan(start=span.start, end=span.end or 0.0) for name, span in trace.phases.items()}
    none = v.TimeSpan()
    agent = spans.get("agent", none)
    starts = [span.start for span in trace.phases.values()]
    return v.Timing(start=min(starts) if starts else 0.0, boot=spans.get("boot", none),
                    setup=spans.get("setup", none), agent=v.AgentSpan(start=agent.start, end=agent.end),
                    finalize=spans.get("finalize", none), scoring=spans.get("scoring", none))


def _nodes(trace: Trace, stamps: list[float]) -> list[Any]:
    """The conversation as verifiers' message graph: one branch, the tools
    offered on its root, the replies marked sampled, each node stamped when
    it was committed; then a stopped request's unsent messages."""
    v = vf()
    sampled = set(trace.sampled)
    tools = _vf_tools(trace.info.get(TOOLS_KEY, []))
    unsent = [v.UserMessage.model_validate(m) if m["role"] == "user" else
              v.ToolMessage.model_validate(m) if m["role"] == "tool" else v.AssistantMessage.model_validate(m)
              for m in trace.info.get(UNSENT_KEY, [])]
    messages = [*(_vf_message(m) for m in trace.messages), *unsent]
    last = trace.model_calls[-1].end if trace.model_calls else 0.0
    return [v.MessageNode(parent=i - 1 if i else None, message=message, sampled=i in sampled,
                          tools=tools if i == 0 else [], timestamp=stamps[i] if i < len(stamps) else last)
            for i, message in enumerate(messages)]


def _agent_config(trace: Trace) -> Any:
    """The agent's config as verifiers records it on a trace, where rollkit's
    trace says the same: the model and the turn and token limits of the run."""
    limits = {name: trace.limits[name] for name in ("max_turns", "max_input_tokens", "max_output_tokens",
                                                     "max_total_tokens") if trace.limits.get(name) is not None}
    return vf().AgentConfig(model=trace.agent.get("model"), **limits)


def verifiers_trace(trace: Trace, vtask: Any, *, scoring: bool = False) -> Any:
    """The `vf.Trace` verifiers would hold for this rollout, built from the
    rollkit trace (see the module's docstring for what it carries). While
    `scoring`, it stands as verifiers' does when it scores: completed, the
    stop that ended it named (`agent_completed` when none did), and not yet
    marked ok (verifiers sets `ok` after scoring)."""
    v = vf()
    stamps: list[float] = []
    calls = _vf_calls(trace, stamps)
    condition = trace.stop_condition
    if condition in ("verifiers_stop", "verifiers_response_stop", "verifiers_request_stop"):
        condition = trace.info.get("verifiers_stop", condition)
    if scoring and condition is None and not trace.errors:
        condition = "agent_completed"
    state_type = v.state.state_cls(type(vtask))
    built = v.Trace(task=v.TraceTask(type=type(vtask).__name__, data=vtask.data, key=vtask.key, hash=vtask.hash),
                    agent=v.AgentInfo(config=_agent_config(trace)), tools=_vf_tools(trace.info.get(TOOLS_KEY, [])),
                    nodes=_nodes(trace, stamps), calls=calls, timing=_timing(trace),
                    is_completed=scoring or trace.completed, ok=bool(trace.ok) and not scoring,
                    stop_condition=condition, errors=[v.Error(type=e.type, message=e.message) for e in trace.errors])
    built.state = state_type.model_validate(trace.info.get(STATE_KEY, {}))
    return built


def provenance(data: VerifiersData) -> dict[str, Any]:
    """Where the task came from, as the trace records it (`trace.info["source"]`)."""
    return {"framework": data.framework, "version": data.framework_version, "taskset": data.taskset,
            "idx": data.idx}


def _config_json(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _taskset_class(source: str) -> Any:
    v = vf()
    if source.startswith("verifiers:"):
        ident = source.removeprefix("verifiers:")
        try:
            return v.utils.loaders.taskset_class(ident)
        except (ImportError, TypeError, AttributeError) as exc:
            raise UsageError(f"verifiers has no taskset {ident!r}: {exc}") from None
    module, _, qualname = source.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def loaded(source: str, config: dict[str, Any]) -> tuple[Any, dict[int, Any]]:
    """The taskset `source` names, built with `config`, and its tasks by idx
    (loaded once per process)."""
    key = (source, _config_json(config))
    found = _TASKSETS.get(key)
    if found is None:
        cls = _taskset_class(source)
        found = _TASKSETS[key] = (_construct(cls, _config_type(cls).model_validate(config), source), {})
    return found


def _config_type(cls: Any) -> Any:
    return vf().utils.generic.concrete_type(cls, vf().TasksetConfig, origin=vf().Taskset) or vf().TasksetConfig


def _construct(cls: Any, config: Any, source: str) -> Any:
    try:
        return cls(config)
    except Exception as exc:
        raise UsageError(f"verifiers taskset {source!r} failed to build: {type(exc).__name__}: {exc}") from exc


def task_at(source: str, config: dict[str, Any], idx: int) -> Any:
    """The task at position `idx` of the taskset's `load()`, as iterating it gives it."""
    taskset, tasks = loaded(source, config)
    if idx not in tasks:
        whole = copy.copy(taskset)
        whole.transform = None  # a view's selection does not change positions
        for task in _iterate(whole, source, stop=idx):
            tasks[task.data.idx] = task
    if idx not in tasks:
        raise UsageError(f"verifiers taskset {source!r} has no task at idx {idx}")
    return tasks[idx]


def _iterate(taskset: Any, source: str, stop: int | None = None) -> list[Any]:
    got = []
    try:
        for task in taskset:
            got.append(task)
            if stop is not None and task.data.idx >= stop:
                break
    except Exception as exc:
        raise UsageError(f"verifiers taskset {source!r} failed to load its tasks (after {len(got)}): "
                         f"{type(exc).__name__}: {exc}") from exc
    return got


def _source_of(source: Any, config: Any, fields: dict[str, Any]) -> tuple[str, Any]:
    """The taskset to read and the reference that rebuilds it."""
    v = vf()
    if isinstance(source, v.Taskset):
        if config is not None or fields:
            raise UsageError("a verifiers Taskset instance carries its config; pass the class to give one")
        return f"{type(source).__module__}:{type(source).__qualname__}", source
    if isinstance(source, str):
        cls, ref = _taskset_class(source), source
        fields = {"id": source.removeprefix("verifiers:"), **fields}
    else:
        cls, ref = source, f"{source.__module__}:{source.__qualname__}"
    config_type = _config_type(cls)
    if config is None:
        try:
            config = config_type.model_validate(fields)
        except ValueError as exc:
            raise UsageError(f"verifiers taskset {ref!r} refused its config {fields}: {exc}") from None
    elif fields:
        raise UsageError(f"give verifiers taskset {ref!r} either config= or its fields, not both ({sorted(fields)})")
    return ref, _construct(cls, config, ref)


def build(source: Any, *, config: Any = None, limit: int | None = None, judge: Any = None,
          **fields: Any) -> TaskList:
    """The tasks of a verifiers v1 taskset (see the module's docstring).
    `config` is the taskset's config object, or give its fields as options;
    `limit` takes the first tasks (needed for an infinite taskset); `judge`
    is the endpoint the task's config-plugged judges call (`judge_endpoint`)."""
    endpoint = judge_endpoint(judge)
    ref, taskset = _source_of(source, config, fields)
    if limit is not None:
        taskset = taskset.take(limit)
    if not taskset.bounded:
        raise UsageError(f"verifiers taskset {ref!r} is infinite: pass limit=N to take its first N tasks")
    settings = taskset.config.model_dump(mode="json")
    _TASKSETS.setdefault((ref, _config_json(settings)), (taskset, {}))[1].clear()
    known = _TASKSETS[(ref, _config_json(settings))][1]
    version = _version()
    with paused():  # a bulk build that frees nothing (rollkit.core.gcpause)
        tasks = []
        for vtask in _iterate(taskset, ref):
            known[vtask.data.idx] = vtask
            tasks.append(VerifiersTask(_data(vtask, ref, settings, version, endpoint), vtask=vtask))
    return TaskList(tasks)


def _data(vtask: Any, ref: str, settings: dict[str, Any], version: str, judge: dict[str, Any]) -> VerifiersData:
    row = vtask.data
    name = ref.removeprefix("verifiers:").rsplit(":", 1)[-1]
    system, prompt = row.system_prompt, row.prompt
    if prompt is not None and not isinstance(prompt, str):
        systems = [m for m in prompt if m.role == "system"]
        users = [m for m in prompt if m.role != "system"]
        if len(users) != 1 or users[0].role != "user" or len(systems) > 1 or (systems and system):
            raise UsageError(f"verifiers task {name}:{row.idx} opens with {[m.role for m in prompt]}; rollkit "
                             "takes a prompt of one user message (and at most one system prompt)")
        system = systems[0].content if systems else system
        prompt = users[0].content if isinstance(users[0].content, str) else row.prompt_text
    return VerifiersData(id=f"{name}:{row.id if row.id is not None else row.idx}", prompt=prompt,
                         system_prompt=system, taskset=ref, config=settings, idx=row.idx,
                         row=row.model_dump(mode="json", exclude_none=True), judge=judge, framework_version=version)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verifiers")
    except PackageNotFoundError:
        return ""
