"""A verifiers v1 taskset for the proofs in tests/test_verifiers_tasks.py.

An installed-style taskset package (the id "byo_verifiers_taskset" imports
this module, which exports its Taskset in `__all__`): three capital-city
questions under a system prompt, each with a stateful notes toolset (its
state is the rollout's, synced by verifiers' state channel), a weighted
reward that reads the reply, a second reward that reads the toolset's state,
and a metric. `reply(messages)` is the scripted model both runs are answered
by (tests/scripted_provider.py): it writes the answer into the notes, then
answers, except on the third task, where it answers wrong without notes.
Run as a module, it serves the toolset (verifiers starts tool servers with
`python -m <the toolset class's module>`).
"""

from __future__ import annotations

import json
from typing import Any

import verifiers.v1 as vf

__all__ = ["CapitalsTaskset", "reply"]

QUESTIONS = [("France", "Paris"), ("Italy", "Rome"), ("Japan", "Tokyo")]
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


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def reply(messages: list[dict[str, Any]]) -> Any:
    """The scripted model: note the capital, then answer (Japan: a wrong answer, no notes)."""
    question = next(_text(m.get("content")) for m in messages if m["role"] == "user")
    country = question.rsplit(" ", 1)[-1].rstrip("?")
    capital = dict(QUESTIONS)[country]
    if country == "Japan":
        return "I think it is Kyoto."
    if not any(m["role"] == "tool" for m in messages):
        return {"tool": "notes_write", "arguments": {"text": f"capital of {country}: {capital}"}}
    noted = [_text(m.get("content")) for m in messages if m["role"] == "tool"]
    return f"The capital is {capital}. ({json.dumps(noted[-1])})"


if __name__ == "__main__":
    NotesToolset.run()
