"""Programs: agent programs and model endpoints outside this process.

What this layer owns: `OpenAIModel` (any OpenAI-compatible endpoint, through
the openai SDK), the HTTP interception server every program's model calls
pass (`interception`: the wire dialects, the per-rollout secret, refusals),
`SubprocessRuntime` (programs as subprocesses in a private folder),
`SandboxRuntime` (the same in bubblewrap sandboxes, with the network policy
enforced),
`ProgramHarness` (an existing agent program as the harness), the MCP tool
server that hands a task's tools to a program, the connection guard both
servers share against hostile programs (`guard`), and the watchdog process
that kills a run's programs when the run itself is killed (`watchdog`).

It imports the core and nothing above it (`rollkit.runs`,
`rollkit.notebook`, `rollkit.examples`). Its modules load the openai SDK,
aiohttp and mcp, so this package's own import loads none of them: the names
below are imported on first use. Importing it registers the model name
prefix "openai/".
"""

from __future__ import annotations

from typing import Any

from ..core.lazy import lazy_names

from ..core.models import register_model

_LAZY = {
    "OpenAIModel": (".openai_model", "OpenAIModel"),
    "ContextLengthExceeded": (".openai_model", "ContextLengthExceeded"),
    "InterceptionServer": (".interception", "InterceptionServer"),
    "InterceptedHarness": (".interception", "InterceptedHarness"),
    "SubprocessRuntime": (".subprocess_runtime", "SubprocessRuntime"),
    "Program": (".subprocess_runtime", "Program"),
    "SandboxRuntime": (".sandbox_runtime", "SandboxRuntime"),
    "ProgramHarness": (".program", "ProgramHarness"),
    "ToolServer": (".mcp_tools", "ToolServer"),
}

__all__ = list(_LAZY)


__getattr__ = lazy_names(__name__, globals(), _LAZY)


def _openai(model: str) -> Any:
    from .openai_model import OpenAIModel

    return OpenAIModel(model)


register_model("openai/", _openai, help="an OpenAI-compatible endpoint read from OPENAI_BASE_URL and OPENAI_API_KEY")
