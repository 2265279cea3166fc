"""A verifiers v1 taskset whose tasks each carry one part rollkit refuses, for tests/test_verifiers_coverage.py.

`CASES` names, for each refused entry of rollkit's COVERAGE, the task that
carries it; task "clean" carries none and must run and score as usual.
"""

from __future__ import annotations

import verifiers.v1 as vf

__all__ = ["CASES", "ORDER", "UnmappedTaskset"]


class Notes(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "notes"

    @vf.tool
    def read(self) -> str:
        """Read the notes."""
        return "nothing yet"


class RawNotes(Notes):
    """Registers a handler of its own, besides its @vf.tool methods."""

    def register(self, mcp: object) -> None:
        super().register(mcp)
        mcp.add_tool(lambda: "raw", name="raw")


class PlacedConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class PlainTask(vf.Task[vf.TaskData, vf.State, PlacedConfig]):
    @classmethod
    def toolsets(cls, config: PlacedConfig) -> list[vf.Toolset]:
        return [Notes(config.tools)]

    @vf.reward(weight=2.0)
    async def said_done(self, trace: vf.Trace) -> float:
        return float("done" in trace.last_reply)


class InterceptTask(PlainTask):
    @vf.intercept
    async def shout(self, request: vf.Request) -> vf.Request | None:
        return None


class SetupTask(PlainTask):
    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        await runtime.run(["touch", "/app/ready"], {})


class FinalizeTask(PlainTask):
    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        await runtime.run(["pytest"], {})


class ContainerTask(PlainTask):
    NEEDS_CONTAINER = True


class EnvTask(PlainTask):
    def runtime_env(self) -> dict[str, str]:
        return {"GRADER_MODE": "strict"}


class ScoreTask(PlainTask):
    async def score(self, trace: vf.Trace, runtime: vf.Runtime | None = None) -> None:
        trace.record_reward("bonus", 1.0, 1.0)


class RawToolsTask(PlainTask):
    @classmethod
    def toolsets(cls, config: PlacedConfig) -> list[vf.Toolset]:
        return [RawNotes(config.tools)]


_ROWS = {  # case: (task class, row fields, toolset config)
    "clean": (PlainTask, {}, {}),
    "@intercept": (InterceptTask, {}, {}),
    "Task.setup": (SetupTask, {}, {}),
    "Task.finalize": (FinalizeTask, {}, {}),
    "Task.NEEDS_CONTAINER": (ContainerTask, {}, {}),
    "Task.runtime_env": (EnvTask, {}, {}),
    "Task.score": (ScoreTask, {}, {}),
    "Task.scoring_deferred": (PlainTask, {}, {}),
    "TaskData.image": (PlainTask, {"image": "python:3.11-slim"}, {}),
    "TaskData.workdir": (PlainTask, {"workdir": "/app"}, {}),
    "TaskData.agent_user": (PlainTask, {"agent_user": "agent"}, {}),
    "TaskData.skills": (PlainTask, {"skills": ["skills/grading"]}, {}),
    "TaskData.network_allow": (PlainTask, {"network_allow": ["pypi.org"]}, {}),
    "TaskData.network_block": (PlainTask, {"network_block": ["example.com"]}, {}),
    "TaskData.artifacts": (PlainTask, {"artifacts": [{"source": "/app/out.txt"}]}, {}),
    "TaskData.timeout": (PlainTask, {"timeout": {"agent": 30.0}}, {}),
    "TaskData.resources": (PlainTask, {"resources": {"memory": 2.0}}, {}),
    "ToolsetConfig.url": (PlainTask, {}, {"url": "http://127.0.0.1:9/mcp"}),
    "ToolsetConfig.colocated": (PlainTask, {}, {"colocated": True}),
    "ToolsetConfig.runtime": (PlainTask, {}, {"runtime": {"type": "docker"}}),
    "Toolset.register": (RawToolsTask, {}, {}),
}
ORDER = list(_ROWS)  # the cases by their tasks' idx
# Entries a case of another name covers: defer_scoring() is how a task gets scoring_deferred.
CASES = {**{name: name for name in _ROWS if name != "clean"}, "Task.defer_scoring": "Task.scoring_deferred"}


class UnmappedTaskset(vf.Taskset[PlainTask, vf.TasksetConfig]):
    def load(self) -> list[PlainTask]:
        tasks = []
        for case, (cls, row, tools) in _ROWS.items():
            config = PlacedConfig(tools=vf.ToolsetConfig.model_validate(tools))
            task = cls(vf.TaskData(id=case, prompt="Say done.", **row), config)
            tasks.append(task.defer_scoring() if case == "Task.scoring_deferred" else task)
        return tasks
