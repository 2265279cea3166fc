"""What a verifiers v1 task or taskset can carry, and what rollkit does with each part.

`COVERAGE` names every kind of thing verifiers 0.4 lets a `Task`, its
`TaskData`, its `TaskConfig`, a `Taskset`, its `TasksetConfig`, a toolset
or a toolset's config carry, every decorator kind (`@vf.reward` ...), and the
agent config fields of a verifiers run, each with what rollkit does with it:
`mapped` (and where), `refused` (a task carrying it fails at open, naming
it), `run` (the run's, not the task's: rollkit's agent, model and limits take
its place) or `inert` (it does not change a single-agent rollout or its
score). tests/test_verifiers_coverage.py reads verifiers' own lists, so a
kind verifiers adds later fails that test until someone decides.

`unmapped(vtask, taskset)` lists the refused parts a task carries, each
naming the part and what to do; `VerifiersTask.setup` raises them as one
TaskError, so that task's rollout fails and the rest of the run goes on.
This module does not import verifiers itself: it reads what it is given.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COVERAGE", "unmapped"]

_SANDBOX = "needs a verifiers runtime (a sandbox), which rollkit does not provide"

COVERAGE: dict[str, tuple[str, str]] = {
    # Decorator kinds (verifiers.v1.utils.decorators: each `mark("kind")`).
    "@reward": ("mapped", "VerifiersTask.verifiers_scores: names, weights, priority order, keyed results"),
    "@metric": ("mapped", "VerifiersTask.verifiers_scores, before the rewards"),
    "@stop": ("mapped", "verifiers_stop / verifiers_request_stop / verifiers_response_stop, by boundary"),
    "@tool": ("mapped", "VerifiersToolset: one rollkit tool each, named <TOOL_PREFIX>_<tool>"),
    "@intercept": ("refused", "rewrites requests or responses; rollkit does not map verifiers intercepts"),
    # Task (class attributes and methods).
    "Task.NEEDS_CONTAINER": ("refused", "the task needs a container; " + _SANDBOX),
    "Task.setup": ("refused", "an override takes (trace, runtime): " + _SANDBOX),
    "Task.finalize": ("refused", "an override takes (trace, runtime): " + _SANDBOX),
    "Task.runtime_env": ("refused", "a non-empty environment is for the verifiers runtime's processes"),
    "Task.score": ("refused", "an override replaces verifiers' scoring, which rollkit calls hook by hook"),
    "Task.scoring_deferred": ("refused", "verifiers skips scoring a deferred task; rollkit would score it"),
    "Task.defer_scoring": ("refused", "its copy is scoring_deferred (see Task.scoring_deferred)"),
    "Task.stage_verifier": ("inert", "called only by verifiers' isolated-verifier env, not a taskset's rollout"),
    "Task.validate": ("inert", "a model-free check of the ground truth, not part of a rollout"),
    "Task.hooks": ("mapped", "called for the stops, metrics and rewards (config-plugged ones merged)"),
    "Task.plugged_judges": ("mapped", "verifiers_tasks.score: judged at the endpoint judge= names"),
    "Task.toolsets": ("mapped", "VerifiersTask.all_toolsets"),
    "Task.key": ("mapped", "the vf.Trace's task key"),
    "Task.hash": ("mapped", "the vf.Trace's task hash"),
    "Task.with_data": ("mapped", "iterating the taskset (idx, system prompt)"),
    "Task.with_system_prompt": ("mapped", "iterating the taskset"),
    "Task.config_type": ("mapped", "the task's config, built by the taskset"),
    "Task.data_type": ("mapped", "the row, kept whole in task.data.row"),
    # TaskData fields.
    "TaskData.idx": ("mapped", "task.data.idx, and the task's id when the row has none"),
    "TaskData.id": ("mapped", "the rollkit task's id (<taskset>:<id>)"),
    "TaskData.name": ("inert", "a label, kept in task.data.row"),
    "TaskData.description": ("inert", "a label, kept in task.data.row"),
    "TaskData.prompt": ("mapped", "the task's prompt (one user message; other shapes are refused at load)"),
    "TaskData.system_prompt": ("mapped", "the task's system prompt"),
    "TaskData.image": ("refused", "a container image; " + _SANDBOX),
    "TaskData.workdir": ("refused", "a working directory in the task's container; " + _SANDBOX),
    "TaskData.agent_user": ("refused", "the user the harness runs as in the task's box; " + _SANDBOX),
    "TaskData.skills": ("refused", "skills installed for the harness in the task's box; " + _SANDBOX),
    "TaskData.network_allow": ("refused", "a runtime network allowlist; " + _SANDBOX),
    "TaskData.network_block": ("refused", "a runtime network blocklist; " + _SANDBOX),
    "TaskData.artifacts": ("refused", "paths collected from the task's runtime; " + _SANDBOX),
    "TaskData.artifact_max_bytes": ("inert", "bounds artifacts, which are refused"),
    "TaskData.timeout": ("refused", "per-stage timeouts rollkit does not take from the task (rollkit's are "
                                    "the agent's: rk.RolloutTimeouts)"),
    "TaskData.resources": ("refused", "cpu/memory/gpu/disk of the task's box; " + _SANDBOX),
    # TaskConfig fields.
    "TaskConfig.judges": ("mapped", "judged at the endpoint judge= names, else missing with an error"),
    "TaskConfig.stops": ("mapped", "merged by Task.hooks('stop')"),
    "TaskConfig.metrics": ("mapped", "merged by Task.hooks('metric')"),
    "TaskConfig.rewards": ("mapped", "merged by Task.hooks('reward'), their weights kept"),
    # Taskset and its config.
    "Taskset.load": ("mapped", "iterated as verifiers iterates it"),
    "Taskset.toolsets": ("mapped", "the taskset's shared toolsets, per rollout (VerifiersTask.all_toolsets)"),
    "Taskset.INFINITE": ("mapped", "an unbounded taskset needs limit=N"),
    "Taskset.bounded": ("mapped", "an unbounded taskset needs limit=N"),
    "Taskset.transform": ("mapped", "a view's selection (include, take ...) applies when iterating"),
    "Taskset.include": ("mapped", "a view: give the view as the source"),
    "Taskset.exclude": ("mapped", "a view: give the view as the source"),
    "Taskset.select": ("mapped", "a view: give the view as the source"),
    "Taskset.shuffle": ("mapped", "a view: give the view as the source"),
    "Taskset.skip": ("mapped", "a view: give the view as the source"),
    "Taskset.take": ("mapped", "limit=N takes it"),
    "Taskset.task_type": ("inert", "the task class, read by verifiers' loaders"),
    "TasksetConfig.task": ("mapped", "the tasks' config, saved with each task"),
    "TasksetConfig.system_prompt": ("mapped", "applied when iterating, as verifiers applies it"),
    "TasksetConfig.id": ("mapped", "'verifiers:ID' loads the installed taskset"),
    # A toolset (verifiers.v1.mcp: Toolset and its ServerBase).
    "Toolset.TOOL_PREFIX": ("mapped", "the prefix of its tools' names, as verifiers' chat loop names them"),
    "Toolset.server_name": ("mapped", "the prefix of its tools' names, and the toolset's name"),
    "Toolset.setup": ("mapped", "called when the rollout's toolset starts"),
    "Toolset.setup_task": ("mapped", "called with the task's row when the rollout's toolset starts (not shared)"),
    "Toolset.state": ("mapped", "the rollout's trace.info['verifiers_state'], pulled and pushed per call"),
    "Toolset.register": ("refused", "an override registers MCP handlers rollkit does not read (it takes the "
                                    "@vf.tool methods)"),
    "Toolset.run": ("inert", "serves the toolset standalone, outside a rollout"),
    # A toolset's config (verifiers.v1.mcp.toolset.ToolsetConfig, SharedToolsetConfig).
    "ToolsetConfig.colocated": ("refused", "runs the tool server in the agent's box; " + _SANDBOX),
    "ToolsetConfig.runtime": ("refused", "a runtime other than a local subprocess; " + _SANDBOX),
    "ToolsetConfig.url": ("refused", "a tool server already running elsewhere; rollkit runs a toolset's "
                                     "object in the rollout's process and does not call remote MCP servers"),
    # The run's agent config (vf.AgentConfig): given to vf-eval, not carried by a taskset.
    "AgentConfig.harness": ("run", "rollkit's agent drives the rollout"),
    "AgentConfig.runtime": ("run", "rollkit runs the toolsets in the rollout's process"),
    "AgentConfig.model": ("run", "the rollkit agent's model (recorded in the vf.Trace's agent config)"),
    "AgentConfig.client": ("run", "the rollkit agent's model client"),
    "AgentConfig.sampling": ("run", "the rollkit agent's sampling (recorded per call in the vf.Trace)"),
    "AgentConfig.max_turns": ("run", "rollkit's max_turns limit (recorded in the vf.Trace's agent config)"),
    "AgentConfig.max_input_tokens": ("run", "rollkit's token limit of that name"),
    "AgentConfig.max_output_tokens": ("run", "rollkit's token limit of that name"),
    "AgentConfig.max_total_tokens": ("run", "rollkit's token limit of that name"),
    "AgentConfig.timeout": ("run", "rollkit's agent timeouts (rk.RolloutTimeouts)"),
    "AgentConfig.retries": ("run", "the rollkit agent's retries"),
    "AgentConfig.network_notice": ("run", "verifiers adds it only under a runtime network policy, refused here"),
}


def _overridden(vtask: Any, base: type, name: str) -> bool:
    return getattr(type(vtask), name) is not getattr(base, name)


def _task_parts(vtask: Any, base: type) -> list[str]:
    """The refused parts of the task class: intercepts, runtime hooks, container, scoring."""
    from verifiers.v1.utils.decorators import discover_decorated

    found = [f"@vf.intercept {fn.__name__!r} (it rewrites requests or responses, which rollkit does not map; "
             f"override {fn.__name__} without the decorator in a subclass to run the task without it)"
             for fn in discover_decorated(vtask, "intercept")]
    found += [f"{hook}(trace, runtime) overridden ({_SANDBOX})"
              for hook in ("setup", "finalize") if _overridden(vtask, base, hook)]
    if getattr(vtask, "NEEDS_CONTAINER", False):
        found.append(f"NEEDS_CONTAINER = True ({_SANDBOX})")
    if _overridden(vtask, base, "runtime_env") and vtask.runtime_env():
        found.append(f"runtime_env() {sorted(vtask.runtime_env())} (an environment for a verifiers runtime's "
                     "processes, which rollkit does not provide)")
    if _overridden(vtask, base, "score"):
        found.append("score() overridden (rollkit calls the task's metrics, rewards and judges one by one, as "
                     "vf.Task.score does: move what the override adds into @vf.reward or @vf.metric methods)")
    if getattr(vtask, "scoring_deferred", False):
        found.append("scoring deferred (defer_scoring(): verifiers would not score it here)")
    return found


# The row fields COVERAGE refuses, in its order.
_REFUSED_DATA = [key.split(".", 1)[1] for key, (kind, _) in COVERAGE.items()
                 if key.startswith("TaskData.") and kind == "refused"]


def _data_parts(data: Any) -> list[str]:
    """The task's row fields that need a verifiers runtime, where set."""
    defaults = type(data).model_fields
    found = []
    for name in _REFUSED_DATA:
        if getattr(data, name) != defaults[name].get_default(call_default_factory=True):
            value = data.model_dump(mode="json", include={name})[name]
            found.append(f"data.{name} = {value!r} ({COVERAGE['TaskData.' + name][1]}; load the task without it "
                         "to run it here)")
    return found


def _toolset_parts(servers: list[Any]) -> list[str]:
    """Toolsets that register their own handlers, or whose config puts the tool
    server anywhere but a local process."""
    from verifiers.v1.runtimes import SubprocessConfig

    from verifiers.v1 import Toolset

    found, remedy = [], "; give it a default vf.ToolsetConfig() to run it here"
    for server in servers:
        config, name = getattr(server, "config", None), getattr(server, "server_name", type(server).__name__)
        if type(server).register is not Toolset.register:
            found.append(f"toolset {name!r} overrides register() ({COVERAGE['Toolset.register'][1]}; declare its "
                         "tools as @vf.tool methods of a vf.Toolset to run it here)")
        if getattr(config, "url", None):
            found.append(f"toolset {name!r} at url {config.url!r} ({COVERAGE['ToolsetConfig.url'][1]}{remedy})")
        if getattr(config, "colocated", False):
            found.append(f"toolset {name!r} colocated ({COVERAGE['ToolsetConfig.colocated'][1]}{remedy})")
        runtime = getattr(config, "runtime", None)
        if runtime is not None and not isinstance(runtime, SubprocessConfig):
            found.append(f"toolset {name!r} on runtime {getattr(runtime, 'type', type(runtime).__name__)!r} "
                         f"({COVERAGE['ToolsetConfig.runtime'][1]}{remedy})")
    return found


def unmapped(vtask: Any, taskset: Any) -> list[str]:
    """What `vtask` (of `taskset`) carries that rollkit refuses, each part named
    with what to do; empty when the task runs here as it runs in verifiers."""
    import verifiers.v1 as v

    servers = [*type(vtask).toolsets(vtask.config), *type(taskset).toolsets(taskset.config)]
    return [*_task_parts(vtask, v.Task), *_data_parts(vtask.data), *_toolset_parts(servers)]

