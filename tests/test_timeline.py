"""A rollout's timeline beside its transcript (rollkit.notebook.timeline,
issue 53): the bars' times are the trace's own (phases, segments, model
calls, the tool rounds between calls, user turns, a fork), their places on
the axis follow from them, every bar links to a message the transcript
holds, tool calls are followed by their results, reasoning is folded, a
reply with logprobs gets its heat strip, and what a model wrote is escaped
everywhere. The page in Chromium: tests/test_view_export.py."""

from __future__ import annotations

import json
import math
import re

import pytest

import rollkit as rk
from rollkit.examples import support_agent, support_tasks, toy_customer
from rollkit.core.trace import UNTIMED, TaskRef
from rollkit.notebook.timeline import LANES, anchor, rollout_html, timeline_bars, transcript_html

MARKUP = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def forked() -> rk.Trace:
    """A support conversation (two user turns, a tool call) forked after turn 2 and run on."""
    async def run() -> rk.Trace:
        original = await support_agent().run(support_tasks(3)[2], user=toy_customer())
        fork = await rk.fork(original, 2, agent=support_agent())
        await rk.converse(fork, toy_customer())
        return await fork.close()

    import asyncio

    return asyncio.run(run())


def _t0(trace: rk.Trace) -> float:
    return min([s.start for s in trace.phases.values()] + [s.start for s in trace.segments]
               + [c.start for c in trace.model_calls])


def test_every_bar_is_at_the_traces_own_times(forked):
    trace, bars = forked, timeline_bars(forked)
    t0 = _t0(trace)
    by = {(b.kind, b.label): b for b in bars}
    for name, span in trace.phases.items():
        bar = by[("phase", name)]
        assert (bar.start, bar.end) == (span.start - t0, span.end - t0)
    for segment in trace.segments:
        bar = by[("segment", f"segment {segment.index}")]
        assert (bar.start, bar.end) == (segment.start - t0, segment.end - t0)
    for call in trace.model_calls:
        bar = by[("model", f"model call {call.index}")]
        assert (bar.start, bar.end, bar.tokens, bar.cost) == (call.start - t0, call.end - t0,
                                                               call.usage.total_tokens, call.cost_usd)
        assert trace.messages[bar.target] is call.reply
    # a tool round: from the end of the call that asked to the start of the next call of its segment, or its end
    tools = [b for b in bars if b.kind == "tool"]
    asked = [c for c in trace.model_calls if c.reply is not None and c.reply.tool_calls]
    assert len(tools) == len(asked) >= 1
    for bar, call in zip(tools, asked):
        after = next((c for c in trace.model_calls if c.index > call.index and c.segment == call.segment), None)
        end = after.start if after is not None else trace.segments[call.segment].end
        assert (bar.start, bar.end) == (call.end - t0, end - t0)
        assert trace.messages[bar.target].role == "tool"
    users = [b for b in bars if b.kind == "user"]
    assert [(b.start, trace.messages[b.target].content) for b in users] == [
        (trace.segments[u.segment].start - t0, u.messages[0].content) for u in trace.user_turns]
    assert len(users) == 2
    (fork,) = [b for b in bars if b.kind == "fork"]
    assert fork.label == f"forked from {trace.info['forked_from'][0]} after turn 2"
    assert fork.start == min(s.start for s in trace.phases.values()) - t0
    assert trace.messages[fork.target] is trace.turns[1].reply


def test_places_on_the_axis_follow_from_the_times_and_the_lanes_come_in_order(forked):
    bars = timeline_bars(forked)
    axis = max(b.end for b in bars)
    assert min(b.start for b in bars) == 0.0
    for bar in bars:
        assert bar.left == pytest.approx(bar.start / axis * 100) and bar.width == pytest.approx(bar.latency / axis * 100)
        assert 0 <= bar.left <= 100 and bar.left + bar.width <= 100 + 1e-9
    lanes = [LANES.index(b.lane) for b in bars]
    assert lanes == sorted(lanes) and {b.lane for b in bars} == set(LANES)


def test_each_bar_links_to_a_message_of_the_transcript_and_tool_results_follow_their_calls(forked):
    page = rollout_html(forked)
    ids = set(re.findall(r'<div class="rk-anchor" id="([^"]+)"', page))
    assert len(ids) == len(forked.messages)  # every message once: a paired tool result is not drawn twice
    targets = set(re.findall(r'class="rk-tl-bar [^"]*" href="#([^"]+)"', page))
    assert targets and targets <= ids
    call = next(c for c in forked.model_calls if c.reply is not None and c.reply.tool_calls)
    at = forked.messages.index(call.reply)
    drawn = transcript_html(forked)
    pair = drawn.index(f'<div class="rk-pair"><div class="rk-anchor" id="{anchor(forked, at)}">')
    following = re.findall(r'class="rk-anchor" id="([^"]+)"', drawn[pair + 30:])
    assert following[0] == anchor(forked, at + 1)
    assert forked.messages[at + 1].role == "tool"


def _hostile(trace: rk.Trace) -> rk.Trace:
    """`trace` with markup wherever a model, a tool, a user or a task writes, reasoning and logprobs added."""
    data = json.loads(trace.model_dump_json())
    data["id"] = f'x" onmouseover="alert(1)'
    data["task"]["key"] = MARKUP
    for message in data["messages"]:
        message["content"] = f"{message.get('content') or ''} {MARKUP}"
        for call in message.get("tool_calls") or ():
            call["name"], call["arguments"] = MARKUP, '{"q": "</script><script>alert(1)</script>"}'
        if message["role"] == "assistant":
            message["reasoning"] = f"let me think {MARKUP}"
    text = ["Sure", MARKUP, "</div>", "\u2028"]
    data["model_calls"][0]["tokens"] = {"text": text, "logprobs": [-0.01, -2.5, -0.3, -9.0]}
    data["info"]["forked_from"] = [MARKUP, 2]
    return rk.Trace.model_validate_json(json.dumps(data))


def test_what_a_model_wrote_is_escaped_and_reasoning_folded_and_logprobs_strip_drawn(forked):
    trace = _hostile(forked)
    page = rollout_html(trace)
    assert "<img" not in page and "<script>" not in page and 'onmouseover="' not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= len(trace.messages)
    assert '<details class="rk-reasoning"><summary>thinking (' in page and "let me think &lt;img" in page
    strip = re.search(r'<div class="rk-heat" data-tokens="4"[^>]*>(.*?)</div>', page).group(1)
    shades = [float(x) for x in re.findall(r"rgba\(220,40,40,([0-9.]+)\)", strip)]
    assert shades == [round(0.85 * (1 - math.exp(lp)), 2) for lp in (-0.01, -2.5, -0.3, -9.0)]
    assert "&#x27;&lt;img src=x onerror=alert(1)&gt;&#x27;: logprob -2.500" in strip
    # the anchors are made of safe characters only, whatever the trace's id
    assert anchor(trace, 3) == "rk-x__onmouseover__alert_1_-m3"


def test_a_trace_with_no_times_has_no_bars_and_still_draws():
    trace = rk.Trace(task=TaskRef(type="T", key="k"))
    assert timeline_bars(trace) == []
    assert 'class="rk-timeline"' in rollout_html(trace)


def test_a_call_its_source_did_not_time_has_an_unknown_latency_never_0(forked):
    data = json.loads(forked.model_dump_json())
    call = data["model_calls"][1]
    call["end"], call["timing_issue"] = call["start"], UNTIMED
    trace = rk.Trace.model_validate_json(json.dumps(data))
    bar = next(b for b in timeline_bars(trace) if b.label == "model call 1")
    assert math.isnan(bar.latency) and bar.width == 0.0 and bar.note.startswith("latency unknown")
    assert not any(b.kind == "tool" and b.start == bar.start for b in timeline_bars(trace))  # no tool round from it
    assert "model call 1 · at " in rollout_html(trace) and "takes unknown" in rollout_html(trace)
