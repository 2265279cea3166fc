"""The trace as data, events, the embedded model, the example set, trace files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import prompt_task

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.core.models import count_tokens


async def _example_traces(n: int = 6) -> list[rk.Trace]:
    agent = demo_agent()
    return [await agent.run(task) for task in arithmetic_tasks(n)]


async def test_trace_json_round_trip_is_lossless():
    traces = await _example_traces(3)
    for trace in traces:
        again = rk.Trace.model_validate_json(trace.model_dump_json())
        assert again == trace
        assert (again.num_turns, again.num_input_tokens, again.num_output_tokens, again.num_total_tokens) == (
            trace.num_turns, trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens,
        )
        assert again.reward == trace.reward and again.transcript == trace.transcript


async def test_token_aggregates_count_new_input_once():
    """echo replies 'You said: X'. Turn 1 sends 2 tokens and gets 4; turn 2 sends
    the 6 already held plus 2 new ones. Input counts 2 + 2, total is 8 + 4."""
    async with rk.Agent(model="echo").interaction(rk.Task()) as it:
        await it.turn("hi")
        await it.turn("again")
    trace = it.trace
    assert [c.usage.input_tokens for c in trace.turns] == [2, 8]
    assert [c.new_input_tokens for c in trace.turns] == [2, 2]
    assert (trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens) == (4, 8, 12)


def test_scripted_model_token_count_is_as_documented():
    assert count_tokens(rk.UserMessage(content="three short words")) == 4
    call = rk.ScriptedModel.call("calculator", expression="2 + 3")
    # 1 for the message, then 1 + 1 (name) + 4 words of '{"expression": "2 + 3"}'
    assert count_tokens(call) == 1 + 1 + 1 + 4


async def test_scripted_model_serves_many_conversations_by_position():
    agent = rk.Agent(model=rk.ScriptedModel(["first", "second"]))
    one, two = agent.rollout(rk.Task(), user=True), agent.rollout(rk.Task(), user=True)
    await one.open(), await two.open()
    await one.step("a"), await two.step("a"), await one.step("b")
    assert one.trace.last_reply == "second" and two.trace.last_reply == "first"
    await one.close(), await two.close()


async def test_events_arrive_in_order_and_a_raising_subscriber_breaks_nothing(caplog):
    agent = rk.Agent(model="echo")
    rollout = agent.rollout(prompt_task())
    kinds: list[str] = []
    rollout.subscribe(lambda e: kinds.append(e.kind))
    rollout.subscribe(lambda e: 1 / 0)
    await rollout.open()
    await rollout.step()
    trace = await rollout.close()
    assert trace.ok is True
    assert kinds == [
        "phase_start", "phase_end",  # boot
        "phase_start", "phase_end",  # setup
        "phase_start", "segment_start", "call_start", "call_end", "turn", "phase_end", "segment_end",
        "phase_start", "phase_end",  # finalize
        "phase_start", "phase_end", "scored",  # scoring
        "closed",
    ]
    assert "event subscriber" in caplog.text and "ZeroDivisionError" in caplog.text


async def test_agent_subscription_sees_stop_and_failure_events():
    agent = rk.Agent(model="echo", limits=rk.RolloutLimits(max_turns=0))
    events: list[tuple[str, dict]] = []
    unsubscribe = agent.subscribe(lambda e: events.append((e.kind, e.data)))
    await agent.run(prompt_task())
    assert ("stop", {"condition": "max_turns"}) in events
    unsubscribe()
    await agent.run(prompt_task())
    assert sum(1 for kind, _ in events if kind == "closed") == 1


async def test_example_task_set_rewards_vary_across_tasks():
    traces = await _example_traces(6)
    rewards = [t.reward for t in traces]
    assert rewards == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]  # subtraction problems fool the toy
    assert all(t.metrics["used_calculator"] == 1.0 for t in traces)
    assert len({t.task.key for t in traces}) == 6


async def test_save_and_load_round_trip(tmp_path):
    traces = await _example_traces(3)
    path = rk.save(traces, tmp_path / "run.jsonl")
    assert rk.load(path) == traces


async def test_load_names_a_corrupt_line_and_can_skip_it(tmp_path):
    traces = await _example_traces(2)
    path = tmp_path / "run.jsonl"
    lines = [t.model_dump_json() for t in traces]
    path.write_text(lines[0] + "\n{not json\n" + lines[1] + "\n")
    with pytest.raises(rk.TraceFileError, match=r"line 2 is not a rollkit trace .*errors='skip'"):
        rk.load(path)
    with pytest.warns(UserWarning, match="line 2 is not a rollkit trace"):
        assert [t.id for t in rk.load(path, errors="skip")] == [t.id for t in traces]


async def test_load_skips_a_torn_last_line_with_a_warning(tmp_path):
    traces = await _example_traces(2)
    path = tmp_path / "run.jsonl"
    path.write_text(traces[0].model_dump_json() + "\n" + traces[1].model_dump_json()[:50])
    with pytest.warns(UserWarning, match="line 2 is torn"):
        assert [t.id for t in rk.load(path)] == [traces[0].id]


def test_load_refuses_a_file_that_is_not_a_trace_file(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"hello": "world"}) + "\n")
    with pytest.raises(rk.TraceFileError, match="line 1 is not a rollkit trace"):
        rk.load(path)


def test_import_loads_no_heavy_dependency():
    code = (
        "import sys, rollkit; heavy = [m for m in ('pandas', 'plotly', 'ipywidgets', 'anywidget', 'nest_asyncio', "
        "'ipykernel', 'openai', 'anthropic', 'aiohttp', 'mcp', 'tqdm', 'click', 'ray', 'opentelemetry', 'pyarrow', "
        "'duckdb', 'genai_prices', 'rollkit.interop.formats.inspect_log', 'rollkit.interop.formats.inspect_write', "
        "'rollkit.interop.formats.atif', "
        "'rollkit.interop.formats.verifiers', 'rollkit.analysis.frames', 'rollkit.tables.rows')"
        " if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_rollout_secret_never_shows_in_the_context_repr():
    rollout = rk.Agent().rollout(prompt_task())
    assert rollout.ctx.secret not in repr(rollout.ctx)
    assert len(rollout.ctx.secret) >= 32


def test_scripted_token_count_of_a_message_follows_its_content_after_it_was_counted():
    """ScriptedModel counts each message object once (a conversation resends
    the same objects); a message given new content is counted anew."""
    from rollkit.core.models import count_tokens

    message = rk.UserMessage(content="two words")
    assert count_tokens(message) == 3 and count_tokens(message) == 3
    message.content = "now four words here"
    assert count_tokens(message) == 5
    reply = rk.AssistantMessage(content=None, tool_calls=[rk.ToolCall(id="c", name="add", arguments='{"a": 1}')])
    assert count_tokens(reply) == 1 + 1 + 1 + 2
    reply.tool_calls = []
    assert count_tokens(reply) == 1
