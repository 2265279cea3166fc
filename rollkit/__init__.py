"""rollkit: run LLM-agent rollouts and see inside them.

`import rollkit as rk` gives the public names below. The package is layered,
imports pointing down only:

    rollkit.core       the rollout lifecycle (pydantic only)
    rollkit.programs   agent programs and endpoints: interception server, subprocesses, OpenAIModel
    rollkit.tables     a run on disk and its columnar store: run folders, the row engine, Parquet, SQL
    rollkit.analysis   what finished runs say: statistics, groups, comparisons, DataFrames
    rollkit.interop    other tools' files in and out: their trace formats, training rows, spans
    rollkit.runs       many rollouts: evaluate, the Ray backend, live state, A/B tests, turn values
    rollkit.notebook   the notebook face: facade, panel, browser, monitor, display, plots
    rollkit.examples   ready task sets and toy models, on top
    rollkit.cli        the `rollkit` command line, over them all

One spelling per idea for sync and async: `name(...)` runs to the end and
returns the result (`rk.evaluate`, `ro.step`), `name_async(...)` is the same
work to await (`rk.evaluate_async`, `ro.step_async`), and the notebook
facade's `name_soon(...)` starts it and returns at once. Deprecated
spellings name the version that removes them (rollkit.core.deprecation;
`rollkit deprecations` lists them).

This module imports each layer's package, which registers what the layer
provides (model names, how a trace draws itself, ...), and loads no
ipywidgets, plotly, pandas, openai or aiohttp: the names that need them are
imported on first use.
"""

from __future__ import annotations

from .core import (
    Agent, AssistantMessage, ChatHarness, Event, Harness, HarnessError, Interaction, LifetimeError, LocalRuntime,
    Model, NetworkPolicy, Outcome, ProviderError, Refused, ResourceError, Request, Response, Rollout, RolloutContext, RolloutEnded,
    RolloutError, RolloutLimits, RolloutTimeouts, Runtime, SandboxError, ScriptedModel, SystemMessage, Task, TaskData, TaskError,
    Tool, ToolCall, ToolMessage, Toolset, ToolsetError, Trace, TraceFileError, Usage, UserMessage, __version__,
    RollkitError, RolloutBusy, RolloutStateError, Unavailable, UsageError,
    intercept, load, metric, register_model, reward, save, stop, tool,
    AgentUser, ForkError, RecordedUser, ScriptedUser, User, UserReply, UserStop, UserTurn, converse, fork,
    similarity, HumanModel, TokenLogprobs,
)
from .core.lazy import lazy_names
from . import programs, tables, analysis, interop, runs, notebook, examples  # noqa: E402,F401 - each registers what its layer provides

# Names whose modules pull in heavy dependencies: imported on first use.
_LAZY = {
    "OpenAIModel": ("rollkit.programs.openai_model", "OpenAIModel"),
    "SubprocessRuntime": ("rollkit.programs.subprocess_runtime", "SubprocessRuntime"),
    "SandboxRuntime": ("rollkit.programs.sandbox_runtime", "SandboxRuntime"),
    "ProgramHarness": ("rollkit.programs.program", "ProgramHarness"),
    "evaluate": ("rollkit.notebook.running", "evaluate"),
    "evaluate_async": ("rollkit.notebook.running", "evaluate_async"),
    "load_run": ("rollkit.runs.evaluation", "load_run"),
    "open_run": ("rollkit.tables.lazyrun", "open_run"),
    "compare": ("rollkit.analysis.compare", "compare"),
    "export": ("rollkit.interop.exports", "export"),
    "prices": ("rollkit.core.prices", "prices"),
    "turn_values": ("rollkit.runs.turnvalues", "turn_values"),
    "turn_values_async": ("rollkit.runs.turnvalues", "turn_values_async"),
    "turn_values_many": ("rollkit.runs.turnvalues", "turn_values_many"),
    "turn_values_many_async": ("rollkit.runs.turnvalues", "turn_values_many_async"),
    "ab_test": ("rollkit.notebook.running", "ab_test"),
    "ab_test_async": ("rollkit.notebook.running", "ab_test_async"),
    "plan_ab": ("rollkit.runs.ab", "plan_ab"),
    "groups": ("rollkit.analysis.groups", None),
    "frames": ("rollkit.analysis.frames", None),
    "plots": ("rollkit.notebook.plots", None),
    "replay_hooks": ("rollkit.notebook.whatif", "replay_hooks"),
    "tasks_from": ("rollkit.interop.tasks", "tasks_from"),
}

__all__ = [
    "__version__",
    "Agent",
    "AgentUser",
    "ForkError",
    "RecordedUser",
    "ScriptedUser",
    "User",
    "UserReply",
    "UserStop",
    "UserTurn",
    "converse",
    "fork",
    "AssistantMessage",
    "ChatHarness",
    "Event",
    "Harness",
    "HarnessError",
    "HumanModel",
    "Interaction",
    "LifetimeError",
    "LocalRuntime",
    "Model",
    "NetworkPolicy",
    "Outcome",
    "ProviderError",
    "Refused",
    "Request",
    "Response",
    "Rollout",
    "RolloutContext",
    "RolloutEnded",
    "RollkitError",
    "RolloutBusy",
    "RolloutStateError",
    "Unavailable",
    "UsageError",
    "RolloutError",
    "RolloutLimits",
    "RolloutTimeouts",
    "Runtime",
    "ResourceError",
    "SandboxError",
    "ScriptedModel",
    "SystemMessage",
    "Task",
    "TaskData",
    "TaskError",
    "Tool",
    "ToolCall",
    "ToolMessage",
    "Toolset",
    "ToolsetError",
    "Trace",
    "TraceFileError",
    "Usage",
    "UserMessage",
    "TokenLogprobs",
    "examples",
    "intercept",
    "load",
    "metric",
    "notebook",
    "programs",
    "register_model",
    "reward",
    "runs",
    "tables",
    "analysis",
    "interop",
    "save",
    "similarity",
    "stop",
    "tool",
    *_LAZY,
]


__getattr__ = lazy_names(__name__, globals(), _LAZY)
