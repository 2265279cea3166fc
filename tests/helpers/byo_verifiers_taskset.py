"""A verifiers v1 taskset for the proofs in tests/test_verifiers_tasks.py.

An installed-style taskset package (the id "byo_verifiers_taskset" imports
this module, which exports its Taskset in `__all__`; the tests put
tests/helpers/ on their subprocesses' PYTHONPATH, since verifiers takes an
id as a top-level module name): five capital-city
questions under a system prompt, each with a stateful notes toolset (its
state is the rollout's, synced by verifiers' state channel), a weighted
reward that reads the reply, a second reward that reads the toolset's state,
a third that builds its own judge from the judge config in the task's config,
three metrics (one reads tool calls, token counts and timing), a trace, a
response and two request stops (one at verifiers' tool gate);
tests/helpers/byo_verifiers_replies.py is the scripted model both runs are answered by.
Run as a module, it serves the toolset (verifiers starts tool servers with
`python -m <the toolset class's module>`).
"""

from __future__ import annotations

import json
import zlib

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


class CapitalJudge(vf.Judge[bool]):
    """A judge the task's own reward builds, from the judge config in the task's config."""

    prompt = "Reference answer:\n```\n{answer}\n```\nResponse:\n```\n{response}\n```\nIs the response right?"

    def parse(self, response: vf.JudgeResponse[bool]) -> bool:
        return response.text.strip().lower() == "yes"


class CapitalTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()
    judge: vf.JudgeConfig = vf.JudgeConfig()


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

    @vf.stop
    async def spain_noted(self, request: vf.Request) -> bool:
        """Spain's rollout stops before the model sees its tool's result (the tool has run)."""
        return self.data.country == "Spain" and any(
            isinstance(m, vf.ToolMessage) and m.content for m in request.messages)

    @vf.stop
    async def germany_no_tools(self, request: vf.Request, trace: vf.Trace) -> bool:
        """Germany's rollout stops at verifiers' tool gate (where the trace holds the reply
        with the call): its tool call never runs."""
        return self.data.country == "Germany" and len(trace.assistant_messages) == 1 and any(
            isinstance(m, vf.ToolMessage) for m in request.messages)

    @vf.reward(weight=0.75)
    async def correct(self, trace: vf.Trace) -> float:
        return float(self.data.answer.lower() in trace.last_reply.lower())

    @vf.reward(weight=0.25)
    async def noted(self, trace: vf.Trace) -> float:
        return float(any(self.data.answer in line for line in trace.state.notes))

    @vf.reward(weight=0.1)
    async def self_judged(self, trace: vf.Trace) -> float:
        if not trace.last_reply:
            return 0.0  # nothing to grade, as verifiers' reference judge skips it
        verdict = await CapitalJudge(self.config.judge).evaluate(trace=trace, answer=self.data.answer,
                                                                 response=trace.last_reply)
        return float(verdict.parsed)

    @vf.metric
    async def reply_words(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply.split()))

    @vf.metric
    async def tool_replies(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))

    @vf.metric
    async def trace_facts(self, trace: vf.Trace) -> dict[str, float]:
        """What else a signal may read of the trace: tool calls and the tools offered,
        token counts, the calls, timing (as present or ordered: times differ between runs)."""
        timing, calls = trace.timing, trace.calls
        stamps = [node.timestamp for node in trace.nodes]
        return {
            "tool_calls": float(sum(len(m.tool_calls or []) for m in trace.assistant_messages)),
            "tools_crc": float(zlib.crc32(json.dumps([t.model_dump() for t in trace.tools], sort_keys=True).encode())),
            "root_tools": float(len(trace.nodes[0].tools) if trace.nodes else -1),
            "input_tokens": float(trace.num_input_tokens), "output_tokens": float(trace.num_output_tokens),
            "total_tokens": float(trace.num_total_tokens),
            "prompt_tokens": float(trace.usage.prompt_tokens if trace.usage else -1),
            "calls": float(len(calls)), "turns": float(trace.num_turns), "nodes": float(len(trace.nodes)),
            "calls_named": float(all(c.model == "scripted" for c in calls)),
            "agent_named": float(trace.agent.config.model == "scripted"),
            "max_turns": float(trace.agent.config.max_turns or -1),
            "calls_finished": float(sum(c.finish_reason == "tool_calls" for c in calls)),
            "calls_timed": float(all(0 < c.time.start <= c.time.end for c in calls)),
            "nodes_stamped": float(all(0 < a <= b for a, b in zip(stamps, stamps[1:]))),
            "agent_timed": float(0 < timing.agent.start <= timing.agent.end),
            "setup_before_agent": float(0 < timing.setup.start <= timing.setup.end <= timing.agent.start),
            "start_first": float(0 < timing.start <= timing.setup.start),
            "scoring_started": float(timing.scoring.start >= timing.agent.end > 0),
            "scoring_ended": float(timing.scoring.end > 0),
            "model_split": float(timing.agent.model.duration > 0),
            "completed": float(trace.is_completed), "ok": float(trace.ok),
            "truncated": float(trace.is_truncated),
        }


class CapitalsConfig(vf.TasksetConfig):
    num_tasks: int = 5
    task: CapitalTaskConfig = CapitalTaskConfig()


class CapitalsTaskset(vf.Taskset[CapitalTask, CapitalsConfig]):
    def load(self) -> list[CapitalTask]:
        return [CapitalTask(CapitalData(prompt=f"What is the capital of {country}?", system_prompt=SYSTEM,
                                        country=country, answer=answer, id=country.lower()), self.config.task)
                for country, answer in QUESTIONS[: self.config.num_tasks]]


if __name__ == "__main__":
    NotesToolset.run()
