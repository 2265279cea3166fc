"""The core: the rollout lifecycle of LIFECYCLE.md, and nothing around it.

What this layer owns: the conversation vocabulary (`messages`), the ledger
(`trace`), events, the error model, hooks and their routing, tasks, tools,
runtimes (the `LocalRuntime`), models (the embedded `ScriptedModel` and the
registry of model names), the rollout context, the session every model call
passes, harnesses (the in-process `ChatHarness`), scoring, the rollout
itself, users (who speaks between segments) and forks, the agent, saving
and loading traces, and the plug points where higher layers hand it what
they build.

What it must not import: anything of `rollkit.programs`, `rollkit.runs`,
`rollkit.notebook` or `rollkit.examples` (imports point down only; a test
walks the tree), nor ipywidgets, plotly, pandas, openai or aiohttp. Its only
dependencies beyond the standard library are pydantic and,
loaded only when a call is priced by the public table, genai-prices
(rollkit.core.prices).
"""

from __future__ import annotations

from .agent import Agent, Interaction, RolloutLimits, RolloutTimeouts
from .agent_user import AgentUser
from .context import RolloutContext
from .errors import (
    RollkitError, RolloutBusy, RolloutStateError, Unavailable, UsageError, ResourceError,
    HarnessError, LifetimeError, ProviderError, Refused, RolloutEnded, RolloutError, SandboxError, TaskError,
    ToolsetError,
)
from .events import Event, EventBus
from .forks import ForkError, fork
from .harness import ChatHarness, Harness
from .hooks import intercept, metric, reward, stop
from .human import HumanModel, NobodyToAsk, check_reply
from .messages import (AssistantMessage, Request, Response, SystemMessage, TokenLogprobs, ToolCall, ToolMessage, Usage,
                       UserMessage)
from .outcome import Outcome
from .models import Model, ScriptedModel, count_tokens, register_model, resolve_model
from .plugins import plug, plugged
from .rollout import Rollout, RolloutState
from .runtime import LocalRuntime, NetworkPolicy, Runtime
from .store import TraceFileError, load, save
from .task import Task, TaskData
from .tools import Tool, Toolset, tool
from .trace import Trace, UserTurn
from .users import RecordedUser, ScriptedUser, User, UserReply, UserStop, converse, drive, similarity

__version__ = "0.1.0"

__all__ = [
    "Agent", "AssistantMessage", "ChatHarness", "Event", "EventBus", "Harness", "HarnessError", "Interaction",
    "LifetimeError", "LocalRuntime", "Model", "NetworkPolicy", "Outcome", "ProviderError", "Refused", "ResourceError",
    "Request", "Response", "Rollout", "RolloutContext", "RolloutEnded", "RollkitError", "RolloutBusy", "RolloutStateError", "Unavailable", "UsageError", "RolloutState", "RolloutError", "RolloutLimits", "RolloutTimeouts",
    "Runtime", "SandboxError", "ScriptedModel", "SystemMessage", "Task", "TaskData", "TaskError", "Tool",
    "ToolCall", "ToolMessage", "Toolset", "ToolsetError", "Trace", "TraceFileError", "Usage", "UserMessage",
    "TokenLogprobs",
    "count_tokens", "intercept", "load", "metric", "plug", "plugged", "register_model",
    "resolve_model", "reward", "save", "stop", "tool",
    "AgentUser", "ForkError", "RecordedUser", "ScriptedUser", "User", "UserReply", "UserTurn", "converse", "fork",
    "similarity", "UserStop", "drive", "HumanModel", "NobodyToAsk", "check_reply",
]
