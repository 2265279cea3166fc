"""verifiers v1 tasksets that fail, for the bad-input proofs in tests/test_verifiers_tasks.py.

`BrokenLoadTaskset` cannot read its rows. `ShakyTaskset` has three tasks:
the first is stopped by its trace `@vf.stop` after its tool call and scores,
the second's `judged` reward raises, the third's toolset does not start; every task also has a reward that needs a verifiers
runtime (a sandbox), which rollkit refuses by name, a reward that builds its
judge's client itself (which judge= cannot aim), refused by name, and a
request `@vf.stop` that never fires.
"""

from __future__ import annotations

import verifiers.v1 as vf

__all__ = ["BrokenLoadTaskset", "ShakyTaskset"]


class BrokenLoadTaskset(vf.Taskset[vf.Task, vf.TasksetConfig]):
    def load(self) -> list[vf.Task]:
        raise FileNotFoundError("rows.jsonl is missing")


class ShakyData(vf.TaskData):
    mood: str


class ShakyToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "shaky"

    async def setup_task(self, task: ShakyData) -> None:
        if task.mood == "no-tools":
            raise ConnectionError("the tool backend refused the connection")

    @vf.tool
    def ping(self) -> str:
        """Answer pong."""
        return "pong"


class ShakyTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class ShakyTask(vf.Task[ShakyData, vf.State, ShakyTaskConfig]):
    @classmethod
    def toolsets(cls, config: ShakyTaskConfig) -> list[vf.Toolset]:
        return [ShakyToolset(config.tools)]

    @vf.stop
    async def pinged(self, trace: vf.Trace) -> bool:
        return self.data.mood == "fine" and len(trace.assistant_messages) >= 1

    @vf.stop
    async def never(self, request: vf.Request) -> bool:
        return False

    @vf.reward(weight=2.0)
    async def judged(self, trace: vf.Trace) -> float:
        if self.data.mood == "raises":
            raise ValueError("the judge could not parse the reply")
        return float("done" in trace.last_reply)

    @vf.reward
    async def tests_pass(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        return 1.0

    @vf.reward(weight=0.5)
    async def own_judge(self, trace: vf.Trace) -> float:
        """A judge whose client the reward builds itself: a hosted model, unless refused."""
        judge = vf.Judge(vf.JudgeConfig(model="openai/gpt-6-luna"))
        return float((await judge.complete(f"Is {trace.last_reply!r} right? yes/no")).text == "yes")


class ShakyConfig(vf.TasksetConfig):
    task: ShakyTaskConfig = ShakyTaskConfig()


class ShakyTaskset(vf.Taskset[ShakyTask, ShakyConfig]):
    def load(self) -> list[ShakyTask]:
        return [ShakyTask(ShakyData(prompt=f"Say done ({mood}).", mood=mood), self.config.task)
                for mood in ("fine", "raises", "no-tools")]
