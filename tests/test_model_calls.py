"""What each model call keeps on the trace: its reply (content, tool calls,
reasoning), usage with cache tokens, latency, and the request it answered,
stored as references into the trace's ledger of messages, through a
program that rewrites its history the way smolagents does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import rollkit as rk
from rollkit.core.trace import TaskRef, mended_times


class Adding(rk.Task):
    """Add numbers with a tool."""

    @rk.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)


class RewritingHarness(rk.Harness):
    """Like smolagents' ToolCallingAgent: it keeps its own memory of steps
    and rebuilds the prompt from it each call, re-sending every tool call as
    assistant text and every result as a user "Observation:". It records
    each request it sent, to compare with what the trace rebuilds.
    `keep_last` forgets all but the last steps (memory compaction)."""

    name = "rewriting"

    def __init__(self, keep_last: int | None = None) -> None:
        self.sent: list[list[rk.Message]] = []
        self.keep_last = keep_last

    async def segment(self, ctx, messages):  # type: ignore[no-untyped-def]
        steps: list[tuple[str, str]] = []
        while True:
            prompt = [*messages]
            for call_text, observation in steps[-self.keep_last if self.keep_last else 0:]:
                prompt.append(rk.AssistantMessage(content=call_text))
                prompt.append(rk.UserMessage(content=f"Observation: {observation}"))
            self.sent.append(list(prompt))
            reply = (await ctx.complete(rk.Request(messages=prompt, tools=ctx.tool_specs))).message
            if not reply.tool_calls:
                return
            call = reply.tool_calls[0]
            result = await ctx.run_tool(call)
            steps.append((f"Calling tools:\n[{{'name': '{call.name}', 'arguments': {call.arguments}}}]", result.content))


def _adding_model() -> rk.ScriptedModel:
    """Adds 2 + 3, then 5 + 4, then answers, by the last result it sees (a
    tool message, or an observation the program wrote as user text)."""

    def reply(request: rk.Request) -> rk.AssistantMessage | str:
        last = request.messages[-1].content
        if last.endswith("5"):
            return rk.ScriptedModel.call("add", a=5, b=4)
        if last.endswith("9"):
            return "The sum is 9."
        return rk.ScriptedModel.call("add", a=2, b=3)

    return rk.ScriptedModel(reply)


async def test_a_program_that_rewrites_its_history_keeps_every_structured_reply():
    harness = RewritingHarness()
    trace = await rk.Agent(model=_adding_model(), harness=harness).run(Adding(prompt="Add 2, 3 and 4."))
    assert trace.ok is True and len(trace.model_calls) == 3
    # The model's structured calls are in no message the program sent later,
    # but every call keeps its reply.
    assert [[(c.name, json.loads(c.arguments)) for c in call.reply.tool_calls] for call in trace.model_calls] == [
        [("add", {"a": 2, "b": 3})], [("add", {"a": 5, "b": 4})], []]
    assert trace.model_calls[2].reply.content == "The sum is 9."
    assert [call.finish_reason for call in trace.model_calls] == ["tool_calls", "tool_calls", "stop"]
    # The conversation is what the model last saw, plus its reply.
    assert trace.messages == [*harness.sent[-1], trace.model_calls[2].reply]
    assert trace.messages[-1] is trace.model_calls[2].reply
    assert [m.content for m in trace.messages[1:3]] == [
        "Calling tools:\n[{'name': 'add', 'arguments': {\"a\": 2, \"b\": 3}}]", "Observation: 5"]
    # Each request is the start of the last one: a count, nothing copied.
    assert [call.request_messages for call in trace.model_calls] == [1, 3, 5]
    assert [call.request for call in trace.model_calls] == [None, None, None] and trace.replaced_messages == []
    assert [trace.request_of(call) for call in trace.model_calls] == harness.sent
    # Lossless through a file.
    again = rk.Trace.model_validate_json(trace.model_dump_json())
    assert again == trace
    assert [again.request_of(c) for c in again.model_calls] == harness.sent


async def test_a_program_that_forgets_old_steps_keeps_each_request_rebuildable():
    harness = RewritingHarness(keep_last=1)
    trace = await rk.Agent(model=_adding_model(), harness=harness).run(Adding(prompt="Add 2, 3 and 4."))
    assert [m.content for m in harness.sent[2]] == [
        "Add 2, 3 and 4.", "Calling tools:\n[{'name': 'add', 'arguments': {\"a\": 5, \"b\": 4}}]", "Observation: 9"]
    # The second request's step 1 is in no later request: it moved out of
    # the conversation into replaced_messages, and that request points there.
    assert [m.content for m in trace.replaced_messages] == [
        "Calling tools:\n[{'name': 'add', 'arguments': {\"a\": 2, \"b\": 3}}]", "Observation: 5"]
    assert [call.request for call in trace.model_calls] == [None, [0, 1, -1, 2], None]
    assert [trace.request_of(call) for call in trace.model_calls] == harness.sent
    assert [c.reply.tool_calls[0].arguments for c in trace.model_calls[:2]] == ['{"a": 2, "b": 3}', '{"a": 5, "b": 4}']
    again = rk.Trace.model_validate_json(trace.model_dump_json())
    assert again == trace and [again.request_of(c) for c in again.model_calls] == harness.sent


async def test_a_program_that_only_appends_stores_each_request_as_a_count():
    trace = await rk.Agent(model=_adding_model()).run(Adding(prompt="Add 2, 3 and 4."))
    calls = trace.model_calls
    assert [c.request for c in calls] == [None, None, None] and trace.replaced_messages == []
    assert [c.request_messages for c in calls] == [1, 3, 5]
    assert [trace.messages.index(c.reply) for c in calls] == [1, 3, 5] == trace.sampled
    assert all(trace.messages[i] is c.reply for i, c in zip(trace.sampled, calls))
    assert trace.request_of(calls[1]) == trace.messages[:3]
    assert all(c.latency >= 0 for c in calls)
    assert [c.usage.input_tokens for c in calls] == [6, 15, 24]
    assert [c.usage.cache_read_tokens for c in calls] == [None, None, None]


def test_a_trace_written_before_replies_were_kept_loads_with_them_missing():
    line = json.dumps({
        "id": "old1", "task": {"type": "Task", "key": "k", "data": {}},
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello", "tool_calls": []}],
        "sampled": [1],
        "model_calls": [{"index": 0, "segment": 0, "start": 1.0, "end": 1.5, "committed": True,
                         "usage": {"input_tokens": 3, "output_tokens": 2}, "cum_turns": 1,
                         "cum_input_tokens": 3, "cum_output_tokens": 2, "cum_total_tokens": 5}],
    })
    trace = rk.Trace.model_validate_json(line)
    call = trace.model_calls[0]
    assert (call.reply, call.request_messages, call.request, trace.request_of(call)) == (None, None, None, None)
    assert (call.usage.input_tokens, call.usage.cache_read_tokens, call.usage.total_tokens) == (3, None, 5)
    assert trace.messages[1].reasoning is None and trace.replaced_messages == []


def test_usage_not_reported_is_none_not_zero():
    usage = rk.Usage()
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens, usage.reported) == (None, None, None, False)
    assert rk.Usage(output_tokens=4).total_tokens == 4


def test_recording_refuses_a_call_that_ends_before_it_starts_and_importers_mend_it():
    trace = rk.Trace(task=TaskRef(type="Task", key="k"))
    with pytest.raises(ValueError, match=r"model call 0 ends before it starts \(9.0 < 10.0\)"):
        trace.record_call(index=0, segment=0, start=10.0, end=9.0, response=None, error=None, agent_time=0.0)
    assert trace.model_calls == []
    assert mended_times(10.0, 9.969) == (10.0, 10.0, "the source ends this call 0.031 s before it starts; latency set to 0")
    assert mended_times(10.0, 11.0) == (10.0, 11.0, None)


# ---- a real program that rewrites its history: smolagents -------------------

SMOL = [sys.executable, str(Path(__file__).parent / "programs" / "smol.py")]


def _smol_model(request: rk.Request) -> rk.AssistantMessage:
    """Calls add(2, 3), then final_answer with the observation it reads back."""
    last = request.messages[-1]
    if last.role == "user" and "Observation" in last.content:
        return rk.ScriptedModel.call("final_answer", answer="5")
    return rk.ScriptedModel.call("add", a=2, b=3)


async def test_smolagents_rewrites_its_history_and_the_trace_keeps_the_models_tool_calls():
    harness = rk.ProgramHarness(SMOL)
    agent = rk.Agent(model=rk.ScriptedModel(_smol_model), harness=harness, runtime=rk.SubprocessRuntime)
    trace = await agent.run(rk.Task(prompt="What is 2 + 3? Use the add tool."))
    assert trace.ok is True, trace.errors
    assert len(trace.model_calls) == 2
    first, second = trace.model_calls
    # The model's structured call, exactly as it made it...
    assert [(c.name, json.loads(c.arguments)) for c in first.reply.tool_calls] == [("add", {"a": 2, "b": 3})]
    assert [(c.name, json.loads(c.arguments)) for c in second.reply.tool_calls] == [("final_answer", {"answer": "5"})]
    assert (first.dialect, first.finish_reason, first.committed) == ("chat", "tool_calls", True)
    # ...is in no message of the conversation: smolagents sent it back as text.
    assert not any(m.role == "assistant" and any(c.name == "add" for c in m.tool_calls) for m in trace.messages)
    resent = trace.request_of(second)
    assert any(m.role == "user" and "Observation" in m.content and "5" in m.content for m in resent)
    assert trace.messages[-1] is second.reply
    # The frame of calls and the saved file keep it too.
    frame = rk.frames.calls([trace])
    assert list(frame["tool_calls"]) == ["add", "final_answer"]
    again = rk.Trace.model_validate_json(trace.model_dump_json())
    assert again.model_calls[0].reply == first.reply and again.request_of(again.model_calls[1]) == resent


async def test_the_trace_html_shows_every_reply_the_transcript_does_not_hold_escaped():
    def model(request: rk.Request) -> rk.AssistantMessage | str:
        if request.messages[-1].content.endswith("5"):
            return rk.AssistantMessage(content="<b>done</b>: 5", reasoning="<script>alert('thought')</script>")
        return rk.ScriptedModel.call("add", "<script>alert(1)</script>", a=2, b=3)

    trace = await rk.Agent(model=rk.ScriptedModel(model), harness=RewritingHarness()).run(Adding(prompt="Add 2 and 3."))
    page = rk.notebook.display.trace_html(trace)
    section = page.split('class="rk-other-replies"', 1)[1].split("</details>", 1)[0]
    # The structured call the program rewrote as text, under its call, escaped.
    assert "(1: the program rewrote its history or made side calls)" in section
    assert "call 0 · segment 0 · finish tool_calls" in section
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section and "→ calls <b>add</b>" in section
    # The last reply is in the transcript, with its reasoning, escaped.
    assert "<b>done</b>" not in page and "&lt;b&gt;done&lt;/b&gt;: 5" in page
    assert "thinking: &lt;script&gt;alert(&#x27;thought&#x27;)&lt;/script&gt;" in page
    assert "<script>" not in page
    # A program that only appends has nothing outside its transcript.
    plain = await rk.Agent(model=rk.ScriptedModel(model)).run(Adding(prompt="Add 2 and 3."))
    assert "rk-other-replies" not in rk.notebook.display.trace_html(plain)


async def test_a_fork_keeps_each_reply_as_the_message_of_its_conversation():
    task = Adding(prompt="Add 2, 3 and 4.")
    trace = await rk.Agent(model=_adding_model()).run(task)
    rollout = await rk.fork(trace, 2, agent=rk.Agent(model=_adding_model()), task=task)
    prefix = rollout.trace
    assert [c.reply.tool_calls[0].arguments for c in prefix.model_calls] == ['{"a": 2, "b": 3}', '{"a": 5, "b": 4}']
    assert all(prefix.messages[i] is c.reply for i, c in zip(prefix.sampled, prefix.model_calls))
    assert all(c.reply is not o.reply for c, o in zip(prefix.model_calls, trace.model_calls))  # copies, not shared
    line = prefix.model_dump_json()
    assert all("reply" not in call for call in json.loads(line)["model_calls"])
    await rollout.close()


async def test_the_calls_frame_has_a_row_per_call_answered_or_not():
    answered = await rk.Agent(model=_adding_model()).run(Adding(prompt="Add 2, 3 and 4."))
    failed = await rk.Agent(model=rk.ScriptedModel([], name="broken")).run(Adding(prompt="Add."))
    frame = rk.frames.calls([answered, failed])
    assert list(frame.columns) == list(rk.frames.CALL_COLUMNS)
    assert list(frame["call"]) == [0, 1, 2, 0] and list(frame["committed"]) == [True, True, True, False]
    missing = rk.frames.pd.isna
    assert list(frame["tool_calls"][:3]) == ["add", "add", ""] and missing(frame["tool_calls"][3])
    assert [missing(v) for v in frame["reply"]] == [True, True, False, True] and frame["reply"][2] == "The sum is 9."
    assert list(frame["finish_reason"][:3]) == ["tool_calls", "tool_calls", "stop"]
    assert list(frame["input_tokens"][:3]) == [6, 15, 24] and frame["input_tokens"][3] is rk.frames.pd.NA
    assert frame["cache_read_tokens"].isna().all() and str(frame["input_tokens"].dtype) == "Int64"
    assert list(frame["request_messages"][:3]) == [1, 3, 5]
    assert frame["error_type"][3] == "ProviderError" and "has no reply #1" in frame["error_message"][3]
    assert (frame["latency"] >= 0).all() and frame["timing_issue"].isna().all()
    assert rk.frames.calls([]).shape == (0, len(rk.frames.CALL_COLUMNS))
