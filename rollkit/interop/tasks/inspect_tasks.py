"""inspect-ai tasks as rollkit tasks, scored through inspect's own scorer code.

A `Task`, a `@task` function, `"file.py@name"` or a task an installed
package registers with inspect (`"inspect_evals/gsm8k"`: a package not
installed is named, to install) gives one rollkit task per sample. The task's solver runs twice, as inspect's own code, around the
rollkit agent: before the rollout, up to its first `generate`, which shapes
the prompt (`system_message`, `prompt_template`, `user_message`,
`multiple_choice`'s question, `use_tools`'s tools); and at scoring, where
that `generate` hands back the rollout's conversation, so what a solver does
after it (`multiple_choice` marking the chosen answer) runs on the real
reply. Later `generate` calls (a critique loop) leave the state as it is. A
solver that is itself an agent (`basic_agent`, `react`) is replaced by the
rollkit agent under test, said once as a warning.

Each of the task's scorers then runs as inspect calls it (`scorer(state,
target)`), its value read with inspect's `value_to_float`: one scorer with
one value is the reward, several (or a dict value) are metrics, as
rollkit.interop.formats.inspect_log reads a log. A scorer that raises records a
signal error on that trace and leaves the others.

The task's limits stop the rollout where inspect stops the sample, as
@stops named after them (the trace's stop condition): `message_limit`
before a call whose conversation holds that many messages, `turn_limit`
before a call past it, `token_limit` (inspect's own metering of its type)
before a call once reached and after the call that goes past it, whose
reply inspect discards, so the scorers do not see it (the trace keeps it);
`cost_limit` the same way on the trace's dollars (`trace.cost_usd`, priced
by rk.prices; a model without a price fails setup, as inspect refuses an
eval without cost data). `time_limit` and `working_limit` are not checked
(said once, saying why and naming rollkit's own agent-time budget): rollkit's
only time budget ends a rollout as a failure, unscored (L10, L23), where
inspect ends the sample and scores it, and nothing in a task can interrupt
a model call or a tool call in progress as inspect's limits do. inspect
samples have no limits of their own.

The key is the sample's id, else the task name and the sample's index; the
trace records the sample id as inspect's eval gives it (a sample without
one numbered by its position from 1). The data holds the sample (input as the prompt,
target, choices, metadata) and where the inspect task came from: a file and
name (and arguments) rebuild it in a new process; a task built in memory
rebuilds only in the process that built it. A sample with
`sandbox="local"` gets inspect's local sandbox for each rollout
(`SandboxToolset`), so inspect's `bash()`, `python()` and any tool calling
`sandbox()` run, each command with rollkit's clean environment
(rollkit.interop.tasks.inspect_local_sandbox: no host API keys unless
`pass_env=[...]` names them). Refused, naming the sample: a
sandbox other than local, input rollkit cannot hold (audio, video, images, a
conversation beyond a system prompt and one user message).

This module only builds tasks; it imports inspect-ai on first use.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from ...core.gcpause import paused
from ...core.dependencies import inspect_ai_model, inspect_ai_scorer, inspect_ai_solver
from ...core.errors import UsageError
from ...core.hooks import reward, stop
from ...core.messages import Request, Response, Usage
from ...core.task import Task, TaskData
from ...core.tools import Tool, Toolset
from ...core.trace import Trace
from ..formats.inspect_write import chat_messages
from .tasklist import INSPECT_REGISTRY_NAME, TaskList

__all__ = ["InspectData", "InspectTask", "LIMITS", "SandboxToolset", "build", "limits_of", "metered_tokens",
           "sandbox_kind"]

# Solvers that are agents of their own: the rollkit agent under test replaces them.
AGENT_SOLVERS = {"inspect_ai/basic_agent", "inspect_ai/basic_agent_loop", "inspect_ai/react", "inspect_ai/human_agent"}
_UNSUPPORTED_CONTENT = {"audio", "video", "image"}
# inspect's task limits rollkit checks (InspectTask's @stops), and those it does not.
LIMITS = ("message_limit", "turn_limit", "token_limit", "cost_limit")
_UNCHECKED_LIMITS = ("time_limit", "working_limit")

# inspect tasks loaded in this process, by their `source` (see InspectData).
_LOADED: dict[str, Any] = {}


class InspectData(TaskData):
    """One inspect sample and where its task came from. `source` is
    "FILE@NAME" for a task a file defines (rebuilt from it, with
    `task_args`), "memory:..." for one built in memory."""

    task: str
    source: str
    task_args: dict[str, Any] = {}
    sample_id: int | str
    index: int
    target: str | list[str] = ""
    choices: list[str] | None = None
    metadata: dict[str, Any] = {}
    epochs: int = 1
    # The inspect task's limits rollkit keeps (LIMITS), by inspect's names.
    limits: dict[str, Any] = {}
    sandbox: str | None = None  # "local": the sample runs in inspect's local sandbox (SandboxToolset)
    # Host variables (names) its local sandbox's commands get, as SubprocessRuntime(pass_env=) takes.
    pass_env: list[str] = []
    framework: str = "inspect-ai"
    framework_version: str = ""


class _Generated(Exception):
    """The solver reached `generate`: the prompt is shaped."""

    def __init__(self, state: Any) -> None:
        super().__init__("generate")
        self.state = state


def run_coroutine(make: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine to its end from sync code, in a worker thread when an
    event loop already runs here (a notebook cell)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollkit-inspect") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()  # type: ignore[arg-type]


def _state(sample: Any, sample_id: int | str, epoch: int, model: str) -> Any:
    from inspect_ai._eval.task.util import sample_messages

    return inspect_ai_solver.TaskState(
        model=inspect_ai_model.ModelName(model), sample_id=sample_id, epoch=epoch, input=sample.input,
        messages=sample_messages(sample), target=inspect_ai_scorer.Target(sample.target), choices=sample.choices,
        metadata=sample.metadata or {},
    )


def _walk(solver: Any, replaced: list[str]) -> list[Any]:
    """A solver as its steps, chains opened, each agent (named in `replaced`) a plain generate."""
    from inspect_ai._util.registry import is_registry_object, registry_info
    from inspect_ai.solver._chain import Chain

    name = registry_info(solver).name if is_registry_object(solver) else ""
    if name in AGENT_SOLVERS:
        replaced.append(name)
        return [inspect_ai_solver.generate()]
    if isinstance(solver, Chain):
        return [step for inner in solver for step in _walk(inner, replaced)]
    return [solver]


def _solver_steps(task: Any) -> list[Any]:
    """The task's setup and solver as a list of steps (inspect runs `setup`
    first), agents replaced by a plain generate."""
    setup = _walk(task.setup, []) if task.setup is not None else []
    return [*setup, *(_walk(task.solver, []) if task.solver is not None else [inspect_ai_solver.generate()])]


def agent_solvers(task: Any) -> list[str]:
    """The agent solvers of `task` the rollkit agent replaces."""
    replaced: list[str] = []
    if task.solver is not None:
        _walk(task.solver, replaced)
    return replaced


async def shape(task: Any, sample: Any, sample_id: int | str, steps: list[Any] | None = None) -> Any:
    """The TaskState the solver (`steps`, else the task's) leaves at its
    first `generate`: the prompt and tools."""
    async def generate(state: Any, *args: Any, **kwargs: Any) -> Any:
        raise _Generated(state)

    state = _state(sample, sample_id, 1, "rollkit/agent")
    try:
        for step in steps if steps is not None else _solver_steps(task):
            state = await step(state, generate)
    except _Generated as reached:
        return reached.state
    return state


async def replay_solver(task: Any, sample: Any, sample_id: int | str, epoch: int, trace: Trace,
                        drop_last_reply: bool = False) -> Any:
    """The TaskState after the solver ran with the rollout's conversation
    standing for its first `generate` (what scorers read); `drop_last_reply`:
    without the last reply, which inspect discards when it takes the tokens
    past the token limit."""
    model = f"rollkit/{trace.agent.get('model') or 'agent'}"
    messages = trace.messages
    if drop_last_reply:
        last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=len(messages))
        messages = messages[:last]
    conversation = chat_messages(messages)
    generated = False

    async def generate(state: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal generated
        if not generated:
            generated = True
            state.messages = list(conversation)
            replies = [m for m in conversation if m.role == "assistant"]
            state.output = (inspect_ai_model.ModelOutput.from_message(replies[-1]) if replies
                            else inspect_ai_model.ModelOutput(model=model))
        return state

    state = _state(sample, sample_id, epoch, model)
    for step in _solver_steps(task):
        state = await step(state, generate)
    if not generated:
        await generate(state)
    return state


def _as_float(value: Any) -> float | None:
    if value is None:
        return None
    return float(inspect_ai_scorer.value_to_float()(value))


async def score(task: Any, state: Any, target: Any, trace: Trace) -> dict[str, float | None]:
    """Each scorer's value as inspect reads it, by inspect's scorer names
    (a dict value as NAME.KEY); a scorer that raises is None, its error on the trace."""
    from inspect_ai._util.registry import registry_unqualified_name

    values: dict[str, float | None] = {}
    for scorer in task.scorer or []:
        name = registry_unqualified_name(scorer)
        while name in values or any(k.startswith(f"{name}.") for k in values):
            name = f"{name}{len(values) + 1}"
        try:
            result = await scorer(state, inspect_ai_scorer.Target(target))
        except Exception as exc:
            values[name] = None
            trace.record_signal_error(name, f"inspect scorer {name!r} raised {type(exc).__name__}: {exc}")
            continue
        value = None if result is None else result.value
        if isinstance(value, dict):
            values.update({f"{name}.{k}": _as_float(v) for k, v in value.items()})
        elif isinstance(value, list):
            values.update({f"{name}.{i}": _as_float(v) for i, v in enumerate(value)})
        else:
            values[name] = _as_float(value)
    return values


class _InspectTool(Tool):
    """An inspect tool, run by rollkit, described to the model as inspect
    describes it; run where inspect's `sandbox()` finds `box`'s environments
    when the sample has a sandbox."""

    def __init__(self, inspect_tool: Any, box: SandboxToolset | None = None) -> None:
        from inspect_ai.tool import ToolDef

        definition = ToolDef(inspect_tool)
        super().__init__(definition.tool, name=definition.name, description=definition.description)
        self.spec = {"type": "function", "function": {
            "name": definition.name, "description": definition.description,
            "parameters": definition.parameters.model_dump(exclude_none=True)}}
        if box is not None:
            run = definition.tool

            async def in_sandbox(**arguments: Any) -> Any:
                with box.current():
                    return await run(**arguments)

            self.fn = in_sandbox


class SandboxToolset(Toolset):
    """A sample's inspect tools with inspect's local sandbox environment
    (sandbox="local"), made at open as inspect's eval makes it (the sample's
    files copied in, its setup script run, by inspect's own code), found by
    inspect's `sandbox()` in each tool call, cleaned up at close. Like
    inspect's, it is no box: commands run on this machine as this user, in
    a temporary folder."""

    def __init__(self, tools: list[Any], task_name: str, sample: Any, pass_env: list[str] | None = None) -> None:
        super().__init__([_InspectTool(t, self) for t in tools], name="inspect")
        self.task_name, self.sample, self.pass_env = task_name, sample, tuple(pass_env or ())
        self.environments: dict[str, Any] | None = None

    async def start(self, ctx: Any) -> None:
        from inspect_ai._eval.task.sandbox import read_sandboxenv_file, resolve_sample_files
        from inspect_ai.util._sandbox.context import init_sandbox_environments_sample

        from .inspect_local_sandbox import CleanLocalSandbox, CleanSandboxConfig

        files = {path: await read_sandboxenv_file(contents)
                 for path, contents in resolve_sample_files(self.sample.files or {}).items()}
        setup = await read_sandboxenv_file(self.sample.setup) if self.sample.setup else None
        if setup is not None and not setup.decode().strip().startswith("#!"):
            setup = b"#!/usr/bin/env bash\n\n" + setup  # as inspect's eval runs a setup script
        config = CleanSandboxConfig(pass_env=self.pass_env)
        self.environments = await init_sandbox_environments_sample(
            CleanLocalSandbox, self.task_name, config, files, setup, self.sample.metadata or {})

    async def stop(self) -> None:
        from inspect_ai.util._sandbox.context import cleanup_sandbox_environments_sample

        environments, self.environments = self.environments, None
        if environments is not None:
            await cleanup_sandbox_environments_sample("local", self.task_name, None, environments, False)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Inspect's `sandbox()` finds this sample's environments (a tool call runs in its own context)."""
        from inspect_ai.util._sandbox.context import (sandbox_default_context_var,
                                                      sandbox_environments_context_var,
                                                      sandbox_with_environments_context_var)

        if self.environments is None:
            raise RuntimeError("the sample's sandbox is not running (the rollout is not open)")
        values = ((sandbox_environments_context_var, self.environments), (sandbox_with_environments_context_var, {}),
                  (sandbox_default_context_var, next(iter(self.environments))))
        tokens = [(var, var.set(value)) for var, value in values]
        try:
            yield
        finally:
            for var, token in reversed(tokens):
                var.reset(token)


class InspectTask(Task):
    """One inspect sample, prompted and scored by its inspect task's own solver and scorers."""

    Data = InspectData

    def __init__(self, data: InspectData | None = None, /, *, tools: list[Any] | None = None, **fields: Any) -> None:
        super().__init__(data, **fields)
        # Rebuilt from a trace (no tools given): load the inspect task and
        # shape the sample now, so a task that cannot be rebuilt fails here.
        self._tools = tools if tools is not None else run_coroutine(
            lambda: shape(self.inspect_task, self.sample, self.data.sample_id)).tools

    @property
    def name(self) -> str:
        return self.data.task

    @property
    def inspect_task(self) -> Any:
        return loaded(self.data.source, self.data.task_args)

    @property
    def sample(self) -> Any:
        return self.inspect_task.dataset[self.data.index]

    def all_toolsets(self) -> list[Toolset]:
        """Per rollout: the sample's inspect tools (in its own local sandbox when it has one)."""
        if self.data.sandbox == "local":
            own: list[Toolset] = [SandboxToolset(self._tools, self.data.task, self.sample, self.data.pass_env)]
        else:
            own = [Toolset([_InspectTool(t) for t in self._tools], name="inspect")] if self._tools else []
        return [*own, *super().all_toolsets()]

    async def setup(self, ctx: Any) -> None:
        ctx.trace.record_info(source=provenance(self.data))
        limit = self.data.limits.get("cost_limit")
        if limit is not None and getattr(ctx.session, "rates", None) is None:  # as inspect refuses a cost_limit without cost data
            model = ctx.trace.agent.get("model")
            raise UsageError(f"inspect task {self.data.task!r} has cost_limit={limit}, which needs a price for model "
                             f"{model!r}, and it has none; give one with rk.prices({{{model!r}: {{'input': ..., "
                             "'output': ...}}}) (dollars per million tokens)")

    # inspect's task limits, checked where inspect checks them; the stop
    # condition is the limit's name, as inspect's sample.limit.type is.
    @stop(name="message_limit")
    def message_limit(self, request: Request) -> bool:
        """inspect refuses a generate whose conversation already holds message_limit messages."""
        limit = self.data.limits.get("message_limit")
        return limit is not None and len(request.messages) >= limit

    @stop(name="turn_limit")
    def turn_limit(self, trace: Trace) -> bool:
        """inspect ends the sample on the generate past turn_limit (its reply discarded): no call past it."""
        limit = self.data.limits.get("turn_limit")
        return limit is not None and trace.num_turns >= limit

    @stop(name="token_limit")
    def token_limit_reached(self, trace: Trace) -> bool:
        """inspect refuses a generate once the metered tokens reach token_limit."""
        return self._tokens_over(trace, None, or_equal=True)

    @stop(name="token_limit")
    def token_limit_exceeded(self, response: Response, ctx: Any) -> bool:
        """inspect ends the sample after a generate that takes the metered tokens past token_limit
        (the reply is kept, its tools not run)."""
        return self._tokens_over(ctx.trace, response.usage, or_equal=False)

    def _tokens_over(self, trace: Trace, usage: Usage | None, *, or_equal: bool) -> bool:
        limit = self.data.limits.get("token_limit")
        if limit is None:
            return False
        used = metered_tokens([*(c.usage for c in trace.model_calls), usage], self.data.limits.get("token_limit_type"))
        return used >= limit if or_equal else used > limit

    @stop(name="cost_limit")
    def cost_limit_reached(self, trace: Trace) -> bool:
        """inspect refuses a generate once the sample's cost reaches cost_limit (priced by rk.prices)."""
        return self._cost_over(trace, None, or_equal=True)

    @stop(name="cost_limit")
    def cost_limit_exceeded(self, response: Response, ctx: Any) -> bool:
        """inspect ends the sample after a generate that takes the cost past cost_limit (as token_limit)."""
        card = getattr(ctx.session, "rates", None)  # the rates the rollout read at open (rollkit.core.prices)
        call = card.cost(response.usage) if card is not None and response.usage is not None else None
        return self._cost_over(ctx.trace, call, or_equal=False)

    def _cost_over(self, trace: Trace, call: float | None, *, or_equal: bool) -> bool:
        limit, spent = self.data.limits.get("cost_limit"), trace.cost_usd
        if limit is None or spent is None:  # a turn without reported usage: inspect records no cost either
            return False
        used = spent + (call or 0.0)
        return used >= limit if or_equal else used > limit

    def _past_limit(self, trace: Trace) -> bool:
        """Whether the last call took the rollout past its token or cost limit (inspect discards its reply)."""
        if trace.stop_condition == "token_limit":
            return self._tokens_over(trace, None, or_equal=False)
        return trace.stop_condition == "cost_limit" and self._cost_over(trace, None, or_equal=False)

    @reward
    async def inspect_scores(self, trace: Trace) -> dict[str, float | None]:
        """The inspect task's scorers: one value is the reward, more are metrics."""
        task = self.inspect_task
        epoch = int(trace.info.get("repeat", 0)) + 1
        exceeded = self._past_limit(trace)
        state = await replay_solver(task, self.sample, self.data.sample_id, epoch, trace, exceeded)
        values = await score(task, state, self.sample.target, trace)
        if len(values) == 1:
            return values
        for name, value in values.items():
            trace.record_signal("metric", name, value)
        return {}


def metered_tokens(usages: list[Usage | None], kind: str | None) -> int:
    """The tokens of `usages` as inspect's token limit of type `kind` ("all",
    "output" or a formula) meters them, by inspect's own metering; inspect's
    input excludes the cached prompt, rollkit's holds the whole prompt."""
    from inspect_ai.util import token_limit

    given = [u for u in usages if u is not None]
    read = sum(u.cache_read_tokens or 0 for u in given)
    written = sum(u.cache_write_tokens or 0 for u in given)
    prompt, output = sum(u.input_tokens or 0 for u in given), sum(u.output_tokens or 0 for u in given)
    usage = inspect_ai_model.ModelUsage(
        input_tokens=prompt - read - written, output_tokens=output, total_tokens=prompt + output,
        input_tokens_cache_read=read or None, input_tokens_cache_write=written or None)
    with token_limit(None, type=kind or "all") as meter:  # no limit: it only meters what it is given
        meter.record(usage)
        return int(meter.usage)


def limits_of(task: Any) -> dict[str, Any]:
    """The limits of `task` rollkit keeps (`LIMITS`); warns once about those it
    does not check (time and working time), saying why and naming rollkit's own."""
    kept = {name: getattr(task, name, None) for name in LIMITS}
    if kept.get("token_limit") is not None:
        kept["token_limit_type"] = getattr(task, "token_limit_type", None) or "all"
    unchecked = {name: getattr(task, name, None) for name in _UNCHECKED_LIMITS}
    unchecked = {name: value for name, value in unchecked.items() if value is not None}
    if unchecked:
        said = ", ".join(f"{name}={value}" for name, value in unchecked.items())
        warnings.warn(f"inspect task {task.name!r}: {said} is not checked by rollkit: inspect ends a sample out of "
                      "time and scores it, interrupting a model or tool call in progress; rollkit's only time "
                      "budget, rk.Agent(..., timeouts=rk.RolloutTimeouts(agent=SECONDS)) (agent time, close to "
                      "working_limit), ends the rollout as a failure, unscored; set it on the agent if that is "
                      "what you want", stacklevel=4)
    return {name: value for name, value in kept.items() if value is not None}


def provenance(data: InspectData) -> dict[str, Any]:
    """Where the task came from, as the trace records it (`trace.info["source"]`)."""
    return {"framework": data.framework, "version": data.framework_version, "task": data.task,
            "sample_id": data.sample_id, "source": data.source}


def loaded(source: str, task_args: dict[str, Any]) -> Any:
    """The inspect task `source` names, loaded once per process."""
    key = f"{source}|{json.dumps(task_args, sort_keys=True, default=str)}"
    found = _LOADED.get(key)
    if found is not None:
        return found
    if source.startswith("memory:"):
        raise UsageError(
            f"the inspect task {source.removeprefix('memory:')} was built in memory in another process, so it "
            "cannot be rebuilt here; define it with @task in a .py file and pass 'file.py@name' to rk.tasks_from, "
            "or pass the task: rk.fork(trace, turn=k, agent=..., task=...)"
        )
    found = _LOADED[key] = _load_registered(source, task_args) if is_registry_name(source) else _load_file(
        source, task_args)
    return found


def is_registry_name(source: str) -> bool:
    """Whether `source` is a task's name in an installed package's inspect
    registry ("PACKAGE/NAME", e.g. "inspect_evals/gsm8k"), not a file."""
    return INSPECT_REGISTRY_NAME.fullmatch(source) is not None and not Path(source).exists()


def _load_registered(source: str, task_args: dict[str, Any]) -> Any:
    """The task a package registers with inspect under `source`; refused,
    naming the package to install, when the package is not installed."""
    import importlib.util

    from inspect_ai._util.registry import registry_lookup

    package, name = source.split("/", 1)
    if importlib.util.find_spec(package) is None:
        raise UsageError(f"the inspect task {source!r} is in the package {package!r}, which is not installed here: "
                         f"pip install {package} (it registers its tasks with inspect when installed)")
    if registry_lookup("task", source) is None:
        raise UsageError(f"the package {package!r} registers no inspect task named {name!r}; its tasks are listed by "
                         f"`inspect list tasks` or the package's documentation")
    return _load_file(source, task_args, registered=True)


def _load_file(source: str, task_args: dict[str, Any], registered: bool = False) -> Any:
    from inspect_ai._eval.loader import load_tasks

    path = Path(source.split("@", 1)[0])
    if not registered and not path.is_file():
        raise UsageError(f"inspect task file {str(path)!r} does not exist; pass 'file.py@name' with a file's path")
    try:
        tasks = load_tasks([source], task_args)
    except Exception as exc:
        raise UsageError(f"inspect could not load {source!r}: {type(exc).__name__}: {exc}") from None
    if len(tasks) != 1:
        names = ", ".join(t.name for t in tasks) or "none"
        raise UsageError(f"{source!r} names {len(tasks)} inspect tasks ({names}); name one: 'file.py@name'")
    return tasks[0]


def _source_of(task: Any) -> tuple[str, dict[str, Any]]:
    """Where `task` rebuilds from: its file and registry name, or memory."""
    from inspect_ai._eval.task.constants import TASK_ALL_PARAMS_ATTR, TASK_FILE_ATTR
    from inspect_ai._util.registry import is_registry_object, registry_unqualified_name

    file = getattr(task, TASK_FILE_ATTR, None)
    if file and is_registry_object(task) and Path(file).is_file():
        args = getattr(task, TASK_ALL_PARAMS_ATTR, {}) or {}
        try:
            json.dumps(args)
        except TypeError:
            args = {}
        return f"{Path(file).resolve()}@{registry_unqualified_name(task)}", args
    return f"memory:{task.name}#{id(task):x}", {}


def _resolve(source: Any, task_args: dict[str, Any]) -> tuple[Any, str, dict[str, Any]]:
    """The inspect task `source` names, its `source` string and arguments."""
    from inspect_ai._util.registry import registry_unqualified_name

    if isinstance(source, str) and is_registry_name(source):
        return loaded(source, task_args), source, task_args
    if isinstance(source, str):
        path, _, name = source.partition("@")
        where = f"{Path(path).resolve()}@{name}" if name else str(Path(path).resolve())
        task = loaded(where, task_args)
        if not name:  # a file with one task: named, so a rebuild loads that one
            where = f"{where}@{registry_unqualified_name(task)}"
            _LOADED.setdefault(f"{where}|{json.dumps(task_args, sort_keys=True, default=str)}", task)
        return task, where, task_args
    if not hasattr(source, "dataset"):  # a @task function
        source = source(**task_args)
    elif task_args:
        raise UsageError(f"task_args go with a @task function or 'file.py@name', not a built Task; got {sorted(task_args)}")
    where, args = _source_of(source)
    _LOADED.setdefault(f"{where}|{json.dumps(args, sort_keys=True, default=str)}", source)
    return source, where, args


def _sample_ids(samples: list[Any]) -> list[int | str]:
    """Each sample's id as inspect's eval gives it: its own, else its
    position from 1 (inspect's numbering of a dataset's samples)."""
    return [index + 1 if sample.id is None else sample.id for index, sample in enumerate(samples)]


def sandbox_kind(task: Any, sample: Any) -> str | None:
    """The kind of sandbox a sample runs in (its own, else its task's), None for none."""
    sandbox = sample.sandbox or task.sandbox
    return getattr(sandbox, "type", sandbox)


def _check(task: Any, sample: Any, sample_id: int | str) -> None:
    """Refuse, naming the sample, what rollkit cannot run: a non-local sandbox, non-text input."""
    kind = sandbox_kind(task, sample)
    if kind not in (None, "local"):
        raise UsageError(
            f"inspect sample {sample_id!r} of task {task.name!r} needs a {kind!r} sandbox, which rollkit does not run; "
            "rollkit runs samples without a sandbox or with sandbox='local' (inspect's local sandbox, in the rollout)"
        )
    messages = [] if isinstance(sample.input, str) else sample.input
    for message in messages:
        for part in message.content if isinstance(message.content, list) else []:
            if part.type in _UNSUPPORTED_CONTENT:
                raise UsageError(
                    f"inspect sample {sample_id!r} of task {task.name!r} has {part.type} input, which a rollkit "
                    "task's prompt cannot hold (it is text); leave the sample out"
                )


def _prompt(task: Any, state: Any, sample_id: int | str) -> tuple[str | None, str]:
    """(system prompt, prompt) of a shaped state: system messages, then one user message."""
    messages = state.messages
    system = [m.text for m in messages if m.role == "system"]
    opening = len(messages) == len(system) + 1 and messages[-1].role == "user"
    if not opening or not all(m.role == "system" for m in messages[:-1]):
        roles = ", ".join(m.role for m in messages)
        raise UsageError(
            f"inspect sample {sample_id!r} of task {task.name!r} opens with the messages ({roles}); a rollkit task "
            "opens with system prompts and one user message"
        )
    rest = messages[-1:]
    return ("\n\n".join(system) or None), rest[0].text


def _json_args(args: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(args, default=str))


def build(source: Any, *, task_args: dict[str, Any] | None = None, pass_env: list[str] | None = None) -> TaskList:
    """The samples of an inspect task as rollkit tasks (see the module
    docstring); `pass_env` names the host variables a local sandbox's
    commands get (none by default: API keys are not passed)."""
    if isinstance(pass_env, str) or not all(isinstance(name, str) for name in pass_env or ()):
        raise UsageError(f"pass_env is a list of variable names, e.g. pass_env=['OPENAI_API_KEY']; got {pass_env!r}")
    task, where, args = _resolve(source, dict(task_args or {}))
    replaced = agent_solvers(task)
    if replaced:
        warnings.warn(f"inspect task {task.name!r}: its agent solver {', '.join(replaced)} is replaced by the rollkit "
                      "agent under test (the solver's own tools and prompt are not used)", stacklevel=3)
    samples = list(task.dataset)
    ids = _sample_ids(samples)
    for sample, sample_id in zip(samples, ids):
        _check(task, sample, sample_id)

    steps = _solver_steps(task)
    limits = limits_of(task)

    async def shape_all() -> list[Any]:
        return [await shape(task, sample, sample_id, steps) for sample, sample_id in zip(samples, ids)]

    with paused():  # a bulk build that frees nothing (rollkit.core.gcpause)
        states = run_coroutine(shape_all)
        tasks = _tasks(task, where, args, samples, ids, states, {"limits": limits, "pass_env": list(pass_env or ())})
    return TaskList(tasks, repeats=int(task.epochs or 1))


def _tasks(task: Any, where: str, args: dict[str, Any], samples: list[Any], ids: list[int | str],
           states: list[Any], options: dict[str, Any]) -> list[InspectTask]:
    import inspect_ai

    version = inspect_ai.__version__
    epochs = int(task.epochs or 1)
    task_args = _json_args(args)
    tasks = []
    for index, (sample, sample_id, state) in enumerate(zip(samples, ids, states)):
        system, prompt = _prompt(task, state, sample_id)
        data = InspectData(
            id=str(sample.id) if sample.id is not None else f"{task.name}:{index}", prompt=prompt,
            system_prompt=system, task=task.name, source=where, task_args=task_args, sample_id=sample_id,
            index=index, target=sample.target, choices=sample.choices, metadata=sample.metadata or {},
            epochs=epochs, sandbox=sandbox_kind(task, sample), framework_version=version, **options)
        tasks.append(InspectTask(data, tools=list(state.tools)))
    return tasks
