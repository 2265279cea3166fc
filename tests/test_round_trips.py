"""Round trips lose nothing, proven over generated traces (hypothesis): one
file for every format rollkit both writes and reads.

ATIF (issue 33): for generated traces covering every field a trace has,
rollkit -> ATIF -> rollkit and rollkit -> rollkit JSON lines give equal
traces, outcome included. Traces are generated the way rollkit makes them,
through the recorder (`rollkit.core.trace`): conversations with tool calls,
reasoning and a rewritten history, committed and failed model calls with
every usage count, rewrites, signals, segments, user turns, phases, errors,
warnings, and each of the five outcomes written by `record_outcome`; a test
checks the generator reaches every field of `Trace`.

inspect: rollkit -> inspect (`.eval` and `.json`) -> rollkit, and rollkit ->
rollkit JSON lines -> rollkit, give equal traces, outcome included; the
inspect logs rollkit writes are read whole by inspect's own reader and agree
with it field by field (tests/helpers/oracle_inspect.py). These traces are built
through the importers' builder and the trace's recorder, with every field
an inspect log has a place for: messages of every role with content parts
(text, reasoning with its summary, signature and redaction, images, a part
of another kind), tool calls and results and tool errors, model calls that
answered and failed attempts with their error, usage with cache reads and
writes and reasoning tokens (or none reported), times, stop reasons, one
reward or several scorers' values, other metrics, a stop condition or an
error. What inspect cannot hold is not generated, and said here: a usage
that reports the prompt but not the reply (inspect's output_tokens is a
number), an empty assistant text as "" rather than None (inspect's content
is text), a stop reason inspect does not know; the segments, rewrites and
phases other than the agent's have no place in an inspect log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rollkit as rk
from rollkit.core.messages import AssistantMessage, Response, SystemMessage, ToolCall, ToolMessage, Usage, UserMessage, split_parts
from rollkit.core.trace import ErrorInfo, Rewrite, Segment, TaskRef, Trace, UserTurn
from rollkit.interop.formats._build import Call, Where, build


# ---- ATIF and rollkit JSON lines, over traces made by the recorder ----------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_count = st.one_of(st.none(), st.integers(0, 10_000))
_signal = st.one_of(st.none(), st.floats(-5, 5, allow_nan=False))
_names = st.sampled_from(["a", "b", "c"])

_OUTCOMES = [rk.Outcome.ok(), rk.Outcome.stopped("max_turns"), rk.Outcome.incomplete(),
             rk.Outcome.failed("ProviderError", "provider", message="down", phase="agent"),
             rk.Outcome.aborted("finalize"), rk.Outcome.aborted(None)]


@st.composite
def traces(draw: Any) -> Trace:
    trace = Trace(task=TaskRef(type="Task", key=draw(_text), data={"prompt": draw(_text)}, module="m"),
                  agent={"name": draw(_text), "model": "m1"}, limits={"max_turns": draw(_count)},
                  timeouts={"agent": draw(st.one_of(st.none(), st.floats(0, 100)))})
    clock = 1_000.0
    ledger: list[Any] = [SystemMessage(content=draw(_text)), UserMessage(content=draw(_text))]
    trace.record_messages(list(ledger))
    trace.record_segment(Segment(index=0, start=clock, turns_before=0, user_messages=1))
    for n in range(draw(st.integers(0, 4))):
        calls = [ToolCall(id=f"c{n}_{j}", name=draw(_names), arguments=json.dumps({"x": draw(_text)}))
                 for j in range(draw(st.integers(0, 2)))]
        reply = AssistantMessage(content=draw(st.one_of(st.none(), _text)), tool_calls=calls,
                                 reasoning=draw(st.one_of(st.none(), _text.filter(bool))))
        usage = Usage(input_tokens=draw(_count), output_tokens=draw(_count), cache_read_tokens=draw(_count),
                      cache_write_tokens=draw(_count))
        if draw(st.booleans()):  # a call that failed before it was answered
            trace.record_call(index=len(trace.model_calls), segment=0, start=clock, end=clock + 0.5, response=None,
                              error=ErrorInfo(type="ProviderError", boundary="provider", message=draw(_text), time=clock),
                              agent_time=clock, request_messages=len(trace.messages),
                              timing_issue=draw(st.one_of(st.none(), _text)))
        sent = list(trace.messages)
        if n and draw(st.booleans()):  # the harness rewrote its history
            sent = [sent[0], UserMessage(content="summary: " + draw(_text))]
        trace.record_conversation(sent, reply)
        trace.record_call(index=len(trace.model_calls), segment=len(trace.segments) - 1, start=clock + 0.5,
                          end=clock + 1.0, response=Response(message=reply, usage=usage,
                                                             finish_reason=draw(st.sampled_from(["stop", "length"]))),
                          error=None, agent_time=clock, request_messages=len(sent),
                          dialect=draw(st.sampled_from([None, "chat", "responses"])),
                          sampling=draw(st.one_of(st.none(), st.fixed_dictionaries(
                              {"temperature": st.floats(0, 2)},
                              optional={"top_p": st.floats(0, 1), "max_tokens": st.integers(1, 4096),
                                        "seed": st.integers(0, 2**31)}))))
        for call in calls:
            trace.record_messages([ToolMessage(tool_call_id=call.id, content=draw(_text), name=call.name)])
        if draw(st.booleans()):
            trace.record_rewrite(Rewrite(hook="h", boundary=draw(st.sampled_from(["request", "response"])), call=n))
        if draw(st.booleans()):
            turn = [UserMessage(content=draw(_text))]
            trace.record_user_turn(UserTurn(index=len(trace.user_turns), segment=len(trace.segments), by="caller",
                                            messages=turn, replying_to=trace.last_reply,
                                            similarity=draw(st.one_of(st.none(), st.floats(0, 1)))))
            trace.record_messages(turn)
            trace.record_segment(Segment(index=len(trace.segments), start=clock, turns_before=trace.num_turns,
                                         user_messages=1, charged=draw(st.floats(0, 5)), remaining=None))
        clock += 2
    trace.record_span("setup", 999.0, 1_000.0)
    trace.record_span("agent", 1_000.0, clock)
    for name in draw(st.lists(_names, max_size=3)):
        trace.record_signal("reward", name, draw(_signal), draw(st.floats(0.5, 2)))
        trace.record_signal("metric", name + "_m", draw(_signal))
    if draw(st.booleans()):
        trace.record_signal_error("a", "ValueError: x")
    trace.record_info({"k": draw(_text), "n": draw(st.integers())})
    if draw(st.booleans()):
        trace.record_warning(draw(_text))
    outcome = draw(st.sampled_from(_OUTCOMES))
    if outcome.kind == "failed":
        trace.record_error(ErrorInfo(type="ProviderError", boundary="provider", message="down", phase="agent",
                                     status=draw(st.one_of(st.none(), st.integers(400, 599))), time=clock))
        if draw(st.booleans()):
            trace.record_cut("agent")
    if outcome.kind in ("ok", "stopped") and draw(st.booleans()):
        trace.record_span("scoring", clock, clock + 1)
    trace.record_outcome(outcome)
    return trace


def _comparable(trace: Trace) -> dict[str, Any]:
    record = json.loads(trace.model_dump_json())
    record["info"] = {k: v for k, v in record["info"].items() if k not in ("format", "file")}
    return record


def _round_trip(trace: Trace, fmt: str, name: str, folder: Path) -> Trace:
    (back,) = rk.load(rk.save([trace], folder / name, format=fmt))
    return back


_SETTINGS = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(trace=traces())
def test_rollkit_to_rollkit_json_lines_to_rollkit_loses_nothing(trace: Trace, tmp_path_factory) -> None:
    back = _round_trip(trace, "rollkit", "t.jsonl", tmp_path_factory.mktemp("round-trip"))
    assert _comparable(back) == _comparable(trace)
    assert back.outcome == trace.outcome


@_SETTINGS
@given(trace=traces())
def test_rollkit_to_atif_to_rollkit_loses_nothing(trace: Trace, tmp_path_factory) -> None:
    back = _round_trip(trace, "atif", "t.json", tmp_path_factory.mktemp("round-trip"))
    assert _comparable(back) == _comparable(trace)
    assert back.outcome == trace.outcome and back.info["format"] == "atif"


@_SETTINGS
@given(trace=traces())
def test_a_traces_json_line_is_its_model_dump_json_byte_for_byte(trace: Trace) -> None:
    # A run's lines are made by json_line, every other writer's by model_dump_json: one format.
    assert trace.json_line() == trace.model_dump_json().encode() + b"\n"


def test_the_json_line_of_every_fixtures_traces_is_their_model_dump_json() -> None:
    fixtures = Path(__file__).resolve().parent / "fixtures"
    files = [p for p in sorted(fixtures.rglob("*")) if p.is_file() and p.suffix != ".md" and p.name != "metadata.json"]
    traces = [t for path in files for t in rk.load(path, errors="skip")]
    assert len(files) >= 90 and len(traces) >= 90, (len(files), len(traces))
    assert [t.json_line() for t in traces] == [t.model_dump_json().encode() + b"\n" for t in traces]


def test_the_json_line_of_a_trace_whose_calls_share_prompt_ids_is_its_model_dump_json() -> None:
    from rollkit.core.messages import TokenLogprobs
    from rollkit.examples import arithmetic_tasks, demo_agent
    from rollkit.examples.arithmetic import toy_calculator_model

    toy = toy_calculator_model()

    async def reply(request: Any) -> Response:
        answer = (await toy.complete(request)).message
        prompt = 10 * len(request.messages)  # each call's prompt ids start with the previous call's
        tokens = TokenLogprobs(prompt_ids=list(range(prompt)), ids=[1, 2], logprobs=[-0.5, -0.25], text=["a", "b"])
        return Response(message=answer, usage=Usage(input_tokens=prompt, output_tokens=2), tokens=tokens)

    (trace,) = rk.evaluate(demo_agent(model=rk.ScriptedModel(reply, name="toy")), arithmetic_tasks(1), progress=False).traces
    line = trace.json_line()
    assert b'"prompt_shared":' in line and line == trace.model_dump_json().encode() + b"\n"


def test_the_generator_reaches_every_field_of_a_trace() -> None:
    """A field added to `Trace` fails this until the generator above (and so
    the round trips) covers it."""
    defaults = json.loads(Trace(task=TaskRef(type="T", key="k")).model_dump_json())
    reached: set[str] = set()

    @settings(max_examples=300, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(traces())
    def collect(trace: Trace) -> None:
        reached.update(name for name, value in json.loads(trace.model_dump_json()).items()
                       if value != defaults.get(name))

    collect()
    assert set(Trace.model_fields) - reached - {"schema_version"} == set()


# ---- inspect and rollkit JSON lines, over traces made by the importers' builder ---

_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)
_WORDS = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd")), min_size=1, max_size=12)
_NAME = st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True)


def _maybe(strategy: Any) -> Any:
    return st.one_of(st.none(), strategy)


_PARTS = {
    "text": st.builds(lambda t: {"type": "text", "text": t}, _TEXT),
    "reasoning": st.builds(lambda r, s, g, d: {"type": "reasoning", "reasoning": r, "summary": s, "signature": g,
                                               "redacted": d}, _TEXT, _maybe(_WORDS), _maybe(_WORDS), st.booleans()),
    "image": st.builds(lambda u, d: {"type": "image", "image": f"https://example.invalid/{u}.png", "detail": d},
                       _WORDS, st.sampled_from([None, "low", "high"])),
    "data": st.builds(lambda k, v: {"type": "data", "data": {k: v}}, _NAME, st.integers(-5, 5)),
}


def _content(kinds: list[str]) -> Any:
    """Plain text, or a list of parts of these kinds."""
    return st.one_of(_TEXT.filter(bool), st.lists(st.one_of(*[_PARTS[k] for k in kinds]), min_size=1, max_size=4))


def _message(role: str, content: Any, **fields: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **fields}


@st.composite
def _conversations(draw: Any) -> list[dict[str, Any]]:
    out = []
    if draw(st.booleans()):
        out.append(_message("system", draw(st.one_of(_TEXT.filter(bool), st.lists(_PARTS["text"], min_size=2,
                                                                                   max_size=3)))))
    out.append(_message("user", draw(_content(["text", "image"]))))
    ids = iter(range(10_000))
    for _ in range(draw(st.integers(1, 4))):
        calls = [{"id": f"call_{next(ids)}", "function": draw(_NAME), "arguments": {draw(_NAME): draw(st.integers())}}
                 for _ in range(draw(st.integers(0, 2)))]
        out.append(_message("assistant", draw(_content(["text", "reasoning", "image", "data"])), tool_calls=calls))
        for call in calls:
            out.append(_message("tool", draw(_content(["text", "image"])), tool_call_id=call["id"],
                                function=call["function"]))
        if draw(st.booleans()):
            out.append(_message("user", draw(_TEXT.filter(bool))))
    return out


_USAGE = st.one_of(
    st.just(None),
    st.builds(lambda uncached, read, write, reply, reasoning: rk.Usage(
        input_tokens=uncached + (read or 0) + (write or 0), output_tokens=reply + (reasoning or 0),
        cache_read_tokens=read, cache_write_tokens=write, reasoning_tokens=reasoning),
        st.integers(0, 5000), _maybe(st.integers(0, 3000)), _maybe(st.integers(0, 3000)), st.integers(0, 900),
        _maybe(st.integers(0, 900))),
)


@st.composite
def _traces(draw: Any) -> rk.Trace:
    raw = draw(_conversations())
    where = Where(Path("generated"), "generated")
    from rollkit.interop.formats._build import messages

    conversation = messages(raw, where, "messages")
    clock = 1_700_000_000 + draw(st.integers(0, 10**6))
    calls = []
    for message in conversation:
        if message.role != "assistant":
            continue
        for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0):
            start = clock + draw(st.integers(0, 10**6)) / 1e6
            calls.append(Call(start=start, end=start + draw(st.integers(0, 10**6)) / 1e6, error=ErrorInfo(
                type=draw(st.sampled_from(["RateLimitError", "APITimeoutError", "_Transient"])), boundary="provider",
                message=draw(_TEXT), phase="agent", traceback=draw(_TEXT), time=start)))
        start = clock + draw(st.integers(0, 10**6)) / 1e6
        clock = int(start) + 2
        calls.append(Call(usage=draw(_USAGE), start=start, end=start + draw(st.integers(0, 10**6)) / 1e6,
                          finish_reason="tool_calls" if message.tool_calls else draw(
                              st.sampled_from(["stop", "max_tokens", "content_filter"]))))
    ending = draw(st.sampled_from(["ok", "stopped", "failed"]))
    scoring = draw(st.sampled_from(["reward", "scorers", "none"]))
    score = st.floats(-10, 10, allow_nan=False).map(lambda v: round(v, 6))
    scorers = draw(st.lists(_NAME, min_size=2, max_size=3, unique=True)) if scoring == "scorers" else []
    tool_ids = [m.tool_call_id for m in conversation if m.role == "tool"]
    failed_tools = [i for i in tool_ids if draw(st.booleans())]
    trace = build(
        fmt="generated", where=where, conversation=conversation, calls=calls,
        task=TaskRef(type=draw(_NAME), key=draw(_WORDS), data={"target": draw(_WORDS)}),
        agent={"name": "generated", "model": draw(st.sampled_from(["openai/gpt-5", "anthropic/claude", "google/g"]))},
        rewards={"score": draw(score)} if scoring == "reward" else None,
        metrics={**{name: draw(score) for name in scorers},
                 **{f"m_{name}": draw(score) for name in draw(st.lists(_NAME, max_size=2, unique=True))}},
        errors=[ErrorInfo(type=draw(st.sampled_from(["ValueError", "ProviderError", "SandboxError"])),
                          boundary=draw(st.sampled_from(["harness", "provider", "sandbox"])), message=draw(_TEXT),
                          phase="agent", traceback=draw(_TEXT), time=float(clock))] if ending == "failed" else [],
        stop_condition=draw(st.sampled_from(["max_turns", "max_tokens", "timeout", "message limit", "token limit"]))
        if ending == "stopped" else None,
        phases={"agent": (calls[0].start, clock + 1.0)} if calls else None,
        info={**({"scorers": scorers} if scorers else {}),
              **({"tool_errors": [{"tool_call_id": i, "error": {"type": "timeout", "message": draw(_WORDS)}}
                                  for i in failed_tools]} if failed_tools else {})},
    )
    return trace


def _held(trace: rk.Trace) -> dict[str, Any]:
    """Every field of a trace an inspect log has a place for."""
    return {
        "id": trace.id, "task": (trace.task.type, trace.task.key), "model": trace.agent.get("model"),
        "messages": [m.model_dump() for m in trace.messages],
        "calls": [(c.committed, c.usage.model_dump(), round(c.start, 6), round(c.end, 6),
                   c.finish_reason if c.committed else None,
                   c.error.model_dump() if c.error is not None else None) for c in trace.model_calls],
        "rewards": trace.rewards, "metrics": trace.metrics, "stop_condition": trace.stop_condition,
        "errors": [e.model_dump(exclude={"traceback"}) | {"traceback": e.traceback} for e in trace.errors],
        "outcome": trace.outcome, "tool_errors": trace.info.get("tool_errors"), "scored": trace.scored,
    }


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# unique_by: a trace's id is a digest of the record and its place in the
# file, and every generated one is "generated": two equal draws are one trace.
@given(traces=st.lists(_traces(), min_size=1, max_size=3, unique_by=lambda t: t.id))
def test_rollkit_to_inspect_to_rollkit_gives_the_traces_back(traces, tmp_path_factory):
    pytest.importorskip("inspect_ai")
    from helpers.oracle_inspect import differences

    for n, trace in enumerate(traces):
        trace.task.key = f"{trace.task.key}-{n}"  # one sample per trace
    folder = tmp_path_factory.mktemp("round-trip")  # one per example (tmp_path is one per test)
    for suffix in (".eval", ".json"):
        path = rk.save(traces, folder / f"log{suffix}", format="inspect")
        back = {t.id: t for t in rk.load(path)}
        assert [_held(back[t.id]) for t in traces] == [_held(t) for t in traces]
        assert differences(path) == []  # inspect's own reader reads the whole log, as rollkit does


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(traces=st.lists(_traces(), min_size=1, max_size=3, unique_by=lambda t: t.id))
def test_rollkit_to_json_lines_to_rollkit_gives_equal_traces(traces, tmp_path_factory):
    assert rk.load(rk.save(traces, tmp_path_factory.mktemp("round-trip") / "t.jsonl")) == traces


def test_split_parts_keeps_reasoning_and_empty_parts_apart_from_the_text():
    text, reasoning, parts = split_parts([
        {"type": "reasoning", "reasoning": "gAAAAAB" + "x" * 50, "summary": "thought about it", "redacted": True},
        {"type": "text", "text": ""}, {"type": "reasoning", "reasoning": ""}, {"type": "text", "text": "the answer"}])
    assert (text, reasoning) == ("\nthe answer", "thought about it")
    assert [p.type for p in parts] == ["reasoning", "text", "reasoning", "text"] and parts[0].redacted
    assert split_parts([{"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "yes"}]) == (
        "yes", "hmm", None)  # no more than the text and the reasoning say: no parts kept
    with pytest.raises(ValueError, match="1: should be a content part"):
        split_parts([{"type": "text", "text": "a"}, 3])


def test_every_field_left_out_when_it_holds_nothing_is_judged_in_c_and_by_its_rule():
    """A field written only when it holds something (`exclude_if`) is judged
    for every record a run writes: each such field of every record class in
    rollkit.core has a C predicate (a Python function's call would cost
    every trace line; see messages.is_absent), its default is left out, and
    is_absent leaves out None and [] and nothing else."""
    import importlib
    import pkgutil
    import types

    from pydantic import BaseModel

    import rollkit.core
    from rollkit.core.messages import is_absent

    assert [is_absent(v) for v in (None, [], 0, 0.0, "", {}, False, [0], [[]])] == [True, True] + [False] * 7
    judged = []
    for module in pkgutil.iter_modules(rollkit.core.__path__):
        for record in vars(importlib.import_module(f"rollkit.core.{module.name}")).values():
            if not (isinstance(record, type) and issubclass(record, BaseModel) and record.__module__.startswith("rollkit.")):
                continue
            for name, field in record.model_fields.items():
                if field.exclude_if is None:
                    continue
                judged.append(f"{record.__name__}.{name}")
                assert not isinstance(field.exclude_if, (types.FunctionType, types.MethodType)), judged[-1]
                assert field.exclude_if(field.get_default(call_default_factory=True)) is True, judged[-1]
    assert {"ModelCall.tokens", "Usage.reasoning_tokens", "ReasoningPart.redacted", "RolloutLimits.cost_cap"} <= set(judged)
