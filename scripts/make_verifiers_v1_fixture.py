"""Write tests/fixtures/verifiers/v1-run/traces.jsonl with verifiers 0.4's own
trace models and writer (`verifiers.v1.utils.trace_store.write_episode`),
offline: two episodes of a tool-using agent (one with a cached prompt and a
failing tool, one that errored at the provider). Run with a Python that has
`verifiers==0.4.0` installed (a separate virtualenv: it is not a rollkit
dependency):

    /path/to/venv/bin/python scripts/make_verifiers_v1_fixture.py tests/fixtures/verifiers/v1-run
"""

from __future__ import annotations

import sys
from pathlib import Path

from verifiers.v1.configs.agent import AgentConfig
from verifiers.v1.episode import EnvInfo, Episode
from verifiers.v1.graph import MessageNode
from verifiers.v1.trace import (AgentInfo, AgentSpan, Error, ModelCall, Reward, TimeSpan, Timing, Trace,
                                TraceTask)
from verifiers.v1.types import AssistantMessage, ToolCall, ToolMessage, Usage, UserMessage
from verifiers.v1.utils.trace_store import write_episode

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def _trace(n: int, question: str, failed: bool) -> Trace:
    t = T0 + 100 * n
    nodes = [
        MessageNode(message=UserMessage(content=question), timestamp=t),
        MessageNode(parent=0, sampled=True, timestamp=t + 1.5, message=AssistantMessage(
            content="", reasoning_content="I should use the calculator.",
            tool_calls=[ToolCall(id=f"call_{n}_1", name="add", arguments='{"a": 2, "b": 3}')])),
        MessageNode(parent=1, timestamp=t + 1.6, message=ToolMessage(
            tool_call_id=f"call_{n}_1", content="5" if not failed else "error: the tool timed out")),
    ]
    calls = [ModelCall(node=1, model="gpt-test", finish_reason="tool_calls", endpoint="/chat/completions",
                       usage=Usage(prompt_tokens=120, completion_tokens=30, cached_input_tokens=64),
                       time=TimeSpan(start=t + 0.2, end=t + 1.5))]
    errors = []
    if failed:
        calls.append(ModelCall(model="gpt-test", time=TimeSpan(start=t + 1.7, end=t + 2.0),
                               error=Error(type="ProviderError", message="503 from the provider", status_code=503)))
        errors.append(Error(type="ProviderError", message="503 from the provider", status_code=503))
    else:
        nodes.append(MessageNode(parent=2, sampled=True, timestamp=t + 2.4,
                                 message=AssistantMessage(content="2 + 3 = 5")))
        calls.append(ModelCall(node=3, model="gpt-test", finish_reason="stop",
                               usage=Usage(prompt_tokens=40, completion_tokens=8, cached_input_tokens=150),
                               time=TimeSpan(start=t + 1.7, end=t + 2.4)))
    return Trace(
        task=TraceTask(type="AddTask", data={"question": question, "answer": "5"}, key=f"q{n}"),
        agent=AgentInfo(config=AgentConfig(model="gpt-test"), name="solver"),
        nodes=nodes, calls=calls,
        rewards={} if failed else {"correct": Reward(score=1.0), "brevity": Reward(score=0.5, weight=0.2)},
        metrics={} if failed else {"num_tool_calls": 1.0},
        is_completed=not failed, ok=not failed, stop_condition=None, errors=errors,
        timing=Timing(start=t, setup=TimeSpan(start=t, end=t + 0.2),
                      agent=AgentSpan(start=t + 0.2, end=t + 2.4), scoring=TimeSpan(start=t + 2.4, end=t + 2.5)),
    )


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "traces.jsonl").write_text("")
    for n, (question, failed) in enumerate([("What is 2 + 3?", False), ("What is 2 + 3, again?", True)]):
        trace = _trace(n, question, failed)
        write_episode(folder, Episode(env=EnvInfo(id="add-env"), task=trace.task, traces=[trace], ok=trace.ok,
                                      errors=trace.errors))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
