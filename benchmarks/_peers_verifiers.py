"""verifiers' side of benchmarks/peers.py: its workload as a verifiers v1 taskset.

Imported by verifiers under the id "_peers_verifiers" (it takes a taskset id as a
top-level module name; peers.py runs its verifiers side with benchmarks/ on the
path), never by rollkit. The taskset is QUESTIONS prompts (or
"conversation i" ones), scored by "the reply contains the target"; its
environment plays each task as a conversation of `turns` turns, the user saying
"go on" after every reply but the last, through verifiers' own
`agent.interaction(task)` (the surface verifiers' user-sim environment talks
through), and as verifiers' plain single-agent run when `turns` is 1. With
`task.tools` on, each task carries a one-tool toolset (`go_on`, served by
this module run as `python -m _peers_verifiers`, as verifiers serves a
toolset), so the scripted model can keep one chat program calling it.
"""

from __future__ import annotations

import verifiers.v1 as vf

__all__ = ["PeersTaskset", "PeersEnv"]

TARGET = "mockllm"


class GoOnToolset(vf.Toolset[vf.ToolsetConfig, vf.State]):
    TOOL_PREFIX = "peers"

    @vf.tool
    def go_on(self) -> str:
        """Say "go on"."""
        return "go on"


class PeersTaskConfig(vf.TaskConfig):
    tools: bool = False
    toolset: vf.ToolsetConfig = vf.ToolsetConfig()


class PeersTask(vf.Task[vf.TaskData, vf.State, PeersTaskConfig]):
    @classmethod
    def toolsets(cls, config: PeersTaskConfig) -> list[vf.Toolset]:
        return [GoOnToolset(config.toolset)] if config.tools else []

    @vf.reward
    async def match(self, trace: vf.Trace) -> float:
        return float(TARGET in trace.last_reply)


class PeersTasksetConfig(vf.TasksetConfig):
    count: int = 5
    prompt: str = "question"
    task: PeersTaskConfig = PeersTaskConfig()


class PeersTaskset(vf.Taskset[PeersTask, PeersTasksetConfig]):
    def load(self) -> list[PeersTask]:
        return [PeersTask(vf.TaskData(prompt=f"{self.config.prompt} {i}"), self.config.task)
                for i in range(self.config.count)]


class PeersEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()
    taskset: PeersTasksetConfig = PeersTasksetConfig()
    turns: int = 1


class PeersEnv(vf.Env[PeersEnvConfig]):
    async def run(self, task, agents) -> None:  # type: ignore[no-untyped-def]
        if self.config.turns == 1:
            await agents.agent.run(task)
            return
        async with agents.agent.interaction(task) as conversation:
            await conversation.turn()  # a prompted task speaks first
            for _ in range(self.config.turns - 1):
                await conversation.turn("go on")


if __name__ == "__main__":
    GoOnToolset.run()
