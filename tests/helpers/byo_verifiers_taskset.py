"""A verifiers v1 taskset for the proofs in tests/test_verifiers_tasks.py.

An installed-style taskset package (the id "byo_verifiers_taskset" imports
this module, which exports its Taskset in `__all__`; the tests put
tests/helpers/ on their subprocesses' PYTHONPATH, since verifiers takes an
id as a top-level module name): three capital-city
questions under a system prompt, each with a stateful notes toolset (its
state is the rollout's, synced by verifiers' state channel), a weighted
reward that reads the reply, a second reward that reads the toolset's state,
two metrics, a trace stop and a response stop; tests/helpers/byo_verifiers_replies.py is the scripted model both
runs are answered by.
Run as a module, it serves the toolset (verifiers starts tool servers with
`python -m <the toolset class's module>`).
"""

from __future__ import annotations

import verifiers.v1 as vf
from helpers.byo_verifiers_replies import QUESTIONS

__all__ = ["CapitalsTaskset"]

SYSTEM = "You answer geography questions. Write your answer in the notes first."


class NotesState(vf.State):
    notes: list[str] = []


class NotesToolset(vf.Toolset[vf.ToolsetConfig, NotesState]):
    TOOL_PREFIX = "notes"

    @vf.tool
    def write(self, text: str) -> str:
        """Add a line to the notes."""
        self.state.notes.append(text)
        return f"noted ({len(self.state.notes)} lines)"

    @vf.tool
    def count(self) -> int:
        """How many lines the notes hold."""
        return len(self.state.notes)


class CapitalData(vf.TaskData):
    country: str
    answer: str


class CapitalTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class CapitalTask(vf.Task[CapitalData, NotesState, CapitalTaskConfig]):
    @classmethod
    def toolsets(cls, config: CapitalTaskConfig) -> list[vf.Toolset]:
        return [NotesToolset(config.tools)]

    @vf.stop
    async def italy_after_one_reply(self, trace: vf.Trace) -> bool:
        """Italy's rollout stops before its second model call (its tool call has run)."""
        return self.data.country == "Italy" and len(trace.assistant_messages) >= 1

    @vf.stop
    async def no_kyoto(self, response: vf.Response) -> bool:
        """A reply that names Kyoto ends the rollout (Japan's, on its one turn)."""
        return "Kyoto" in (response.message.content or "")

    @vf.reward(weight=0.75)
    async def correct(self, trace: vf.Trace) -> float:
        return float(self.data.answer.lower() in trace.last_reply.lower())

    @vf.reward(weight=0.25)
    async def noted(self, trace: vf.Trace) -> float:
        return float(any(self.data.answer in line for line in trace.state.notes))

    @vf.metric
    async def reply_words(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply.split()))

    @vf.metric
    async def tool_replies(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))


class CapitalsConfig(vf.TasksetConfig):
    num_tasks: int = 3
    task: CapitalTaskConfig = CapitalTaskConfig()


class CapitalsTaskset(vf.Taskset[CapitalTask, CapitalsConfig]):
    def load(self) -> list[CapitalTask]:
        return [CapitalTask(CapitalData(prompt=f"What is the capital of {country}?", system_prompt=SYSTEM,
                                        country=country, answer=answer, id=country.lower()), self.config.task)
                for country, answer in QUESTIONS[: self.config.num_tasks]]


if __name__ == "__main__":
    NotesToolset.run()
