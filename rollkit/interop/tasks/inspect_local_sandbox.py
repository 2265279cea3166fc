"""inspect's local sandbox with rollkit's clean environment (`CleanLocalSandbox`).

inspect's own `LocalSandboxEnvironment` runs every command (`bash()`,
`python()`, a tool's `sandbox().exec`, the sample's setup script) with the
host's whole environment, API keys included. Here each command gets the
environment rollkit's runtimes give a program
(rollkit.programs.subprocess_runtime.clean_environment): the harmless host
variables, HOME (and TMPDIR in its `.tmp`) in the sandbox's folder, the host
variables the user lists in `pass_env`, and what the caller passes. Nothing
else of the host reaches the command.

inspect's subprocess always starts from the host's environment, so a command
runs through a small launcher that keeps only the clean environment's names
(their values come from the clean environment) and then execs the command:
exact whatever the host's environment holds when the command starts, and no
value is ever on a command line.

It owns only the environment of the commands; files, folders and cleanup are
inspect's own. It imports inspect-ai, so it is imported on first use.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from inspect_ai.util._sandbox._cli import SANDBOX_CLI
from inspect_ai.util._sandbox.environment import SandboxEnvironment
from inspect_ai.util._sandbox.local import LocalSandboxEnvironment
from pydantic import BaseModel

from ...programs.subprocess_runtime import clean_environment

__all__ = ["CleanLocalSandbox", "CleanSandboxConfig"]

# Runs argv[i+1:] with only the variables argv[1:i] names (i: the "--"); a
# program not found exits 127 as a shell's would.
_LAUNCHER = """import os, sys
i = sys.argv.index("--")
try:
    os.execvpe(sys.argv[i + 1], sys.argv[i + 1:], {k: os.environ[k] for k in sys.argv[1:i] if k in os.environ})
except OSError as error:
    sys.stderr.write(f"{sys.argv[i + 1]}: {error.strerror}\\n")
    sys.exit(126 if isinstance(error, PermissionError) else 127)
"""


class CleanSandboxConfig(BaseModel):
    """The sandbox's config, as inspect hands it to `sample_init`: the host
    variables passed through (`pass_env`, as `SubprocessRuntime` takes)."""

    pass_env: tuple[str, ...] = ()


class CleanLocalSandbox(LocalSandboxEnvironment):
    """inspect's local sandbox whose commands get rollkit's clean environment."""

    def __init__(self, pass_env: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.pass_env = pass_env

    @classmethod
    async def sample_init(cls, task_name: str, config: Any, metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        return {"default": cls(config.pass_env if isinstance(config, CleanSandboxConfig) else ())}

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> Any:
        clean = clean_environment(Path(self.directory.name), pass_env=self.pass_env, env=env)
        if cmd and cmd[0] == SANDBOX_CLI:  # as inspect's exec does for its sandbox-tools program
            self._sandbox_tools_used = True
            clean[self._SANDBOX_TOOLS_DIR_ENV] = str(self._sandbox_tools_dir)
        launched = [sys.executable, "-I", "-S", "-c", _LAUNCHER, *clean, "--", *cmd] if cmd else cmd
        return await super().exec(launched, input=input, cwd=cwd, env=clean, user=user, timeout=timeout,
                                  timeout_retry=timeout_retry, concurrency=concurrency)
