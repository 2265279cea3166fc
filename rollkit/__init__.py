"""rollkit: run LLM-agent rollouts and see inside them.

`import rollkit as rk` gives the public names below. The core (everything but
`rollkit.notebook`, `rollkit.frames` and `rollkit.plots`) imports no
ipywidgets, plotly or pandas; those, the openai SDK and aiohttp load only when
a feature that needs them is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from .agent import Agent, Interaction, RolloutLimits, RolloutTimeouts
from .context import RolloutContext
from .errors import HarnessError, LifetimeError, ProviderError, Refused, RolloutError, SandboxError, TaskError, ToolsetError
from .events import Event
from .harness import ChatHarness, Harness
from .hooks import intercept, metric, reward, stop
from .messages import AssistantMessage, Request, Response, SystemMessage, ToolCall, ToolMessage, Usage, UserMessage
from .models import Model, ScriptedModel
from .rollout import Rollout
from .runtime import LocalRuntime, NetworkPolicy, Runtime
from .store import TraceFileError, load, save
from .task import Task, TaskData
from .tools import Tool, Toolset, tool
from .trace import Trace

__version__ = "0.1.0"

# Names whose modules pull in heavy dependencies: imported on first use.
_LAZY = {
    "OpenAIModel": ("rollkit.openai_model", "OpenAIModel"),
    "SubprocessRuntime": ("rollkit.subprocess_runtime", "SubprocessRuntime"),
    "ProgramHarness": ("rollkit.program", "ProgramHarness"),
    "evaluate": ("rollkit.evaluation", "evaluate"),
    "evaluate_async": ("rollkit.evaluation", "evaluate_async"),
    "load_run": ("rollkit.evaluation", "load_run"),
    "notebook": ("rollkit.notebook", None),
    "frames": ("rollkit.frames", None),
    "plots": ("rollkit.plots", None),
    "examples": ("rollkit.examples", None),
}

__all__ = [
    "Agent",
    "AssistantMessage",
    "ChatHarness",
    "Event",
    "Harness",
    "HarnessError",
    "Interaction",
    "LifetimeError",
    "LocalRuntime",
    "Model",
    "NetworkPolicy",
    "ProviderError",
    "Refused",
    "Request",
    "Response",
    "Rollout",
    "RolloutContext",
    "RolloutError",
    "RolloutLimits",
    "RolloutTimeouts",
    "Runtime",
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
    "intercept",
    "load",
    "metric",
    "reward",
    "save",
    "stop",
    "tool",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attr = _LAZY[name]
        module = importlib.import_module(module_name)
        value = module if attr is None else getattr(module, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rollkit' has no attribute {name!r}")
