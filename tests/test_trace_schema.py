"""Trace files carry their schema version; a newer rollkit's file loads with
one warning naming what this one does not know; the run monitor's line
reader gives the same answer whatever the order of the fields; a reply is
written once."""

from __future__ import annotations

import json
import re
import warnings

import pytest

import rollkit as rk
from rollkit.core.store import trace_of_line
from rollkit.core.trace import SCHEMA_VERSION
from rollkit.runs.live import finished_from_line


async def _traces() -> list[rk.Trace]:
    class Graded(rk.Task):
        @rk.reward
        def correct(self, trace) -> float:
            return 0.5

    ok = await rk.Agent(model=rk.ScriptedModel(["hello", "bye"])).run(Graded(prompt="hi"), user=rk.ScriptedUser(["more"]))
    failed = await rk.Agent(model=rk.ScriptedModel([], name="broken")).run(Graded(prompt="hi"))
    return [ok, failed]


async def test_each_line_says_its_schema_version_and_a_file_without_it_still_loads(tmp_path):
    traces = await _traces()
    path = rk.save(traces, tmp_path / "t.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert SCHEMA_VERSION == 4 and [line["schema_version"] for line in lines] == [SCHEMA_VERSION] * 2
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "schema_version"}) + "\n" for line in lines))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rk.load(old) == traces


async def test_a_newer_rollkits_fields_load_with_one_warning_naming_them(tmp_path):
    traces = await _traces()
    newer = []
    for trace in traces:
        record = json.loads(trace.model_dump_json())
        record["schema_version"] = SCHEMA_VERSION + 1
        record["cost_usd"] = 0.25
        record["messages"][0]["cache_control"] = {"type": "ephemeral"}
        for call in record["model_calls"]:
            call["provider_request_id"] = "req_1"
        newer.append(json.dumps(record))
    path = tmp_path / "newer.jsonl"
    path.write_text("\n".join(newer) + "\n")
    with pytest.warns(UserWarning) as caught:
        loaded = rk.load(path)
    assert len(caught) == 1
    assert str(caught[0].message) == (
        f"{path}: written by a newer rollkit (trace schema {SCHEMA_VERSION + 1}; this one reads schema "
        f"{SCHEMA_VERSION}): fields it does not know "
        "were left out: cost_usd, messages.user.cache_control, model_calls.provider_request_id; "
        "upgrade rollkit to read them")
    # What was left out is kept in each trace's info by its path (as the importers keep keys they do not know).
    assert loaded[0].info.pop("unmapped") == {
        "cost_usd": 0.25, "messages.0.cache_control": {"type": "ephemeral"},
        **{f"model_calls.{n}.provider_request_id": "req_1" for n in range(len(traces[0].model_calls))}}
    loaded[1].info.pop("unmapped")
    assert loaded == traces and [t.schema_version for t in loaded] == [SCHEMA_VERSION] * 2
    # One line on its own (the monitor's link to a trace) is as tolerant.
    with pytest.warns(UserWarning, match=r"the link: written by a newer rollkit .* cost_usd"):
        linked = trace_of_line(newer[0], where="the link")
    assert linked.info.pop("unmapped")["cost_usd"] == 0.25 and linked == traces[0]


async def test_a_line_with_a_wrong_value_is_still_refused_naming_the_field(tmp_path):
    [trace, _] = await _traces()
    record = json.loads(trace.model_dump_json())
    record["cost_usd"] = 1.0
    record["model_calls"][0]["start"] = "soon"
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    # An unknown field alone would be read (a newer rollkit's): the wrong value is what refuses it.
    with pytest.raises(rk.TraceFileError, match=r"line 1 is not a rollkit trace \(field model_calls\.0\.start: ") as bad:
        rk.load(path)
    assert bad.value.line == 1


@pytest.mark.parametrize("first", ["limits", "model_calls", "task"])
async def test_of_several_wrong_fields_the_error_names_the_one_first_in_the_line(tmp_path, first):
    """Which field is named is rollkit's choice (the order of the line), not
    the order a pydantic release reports its errors in: the same three
    faults, each moved to the front in turn, with an unknown field at the
    very front that is passed over."""
    [trace, _] = await _traces()
    record = json.loads(trace.model_dump_json())
    record["limits"] = [1]
    record["model_calls"][0]["start"] = "soon"
    record["task"] = 7
    record = {"cost_usd": 1.0, first: record[first], **{k: v for k, v in record.items() if k != first}}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    named = {"limits": "limits", "model_calls": "model_calls.0.start", "task": "task"}[first]
    with pytest.raises(rk.TraceFileError, match=rf"line 1 is not a rollkit trace \(field {re.escape(named)}[:.]") as bad:
        rk.load(path, format="rollkit")  # the format named: this is about the fields, not about sniffing
    assert bad.value.field == named


async def test_the_monitor_reads_a_trace_line_the_same_whatever_the_order_of_its_fields():
    traces = await _traces()
    for trace in traces:
        line = trace.model_dump_json()
        record = json.loads(line)
        reordered = json.dumps(dict(reversed(list(record.items()))))
        # "errors" before "rewards": a reader that assumed rollkit's order would miss the failure.
        moved = {"id": record["id"], "errors": record["errors"],
                 **{k: v for k, v in record.items() if k not in ("id", "errors")}}
        expected = finished_from_line(line, None)
        for other in (reordered, json.dumps(moved, separators=(",", ":"))):
            got = finished_from_line(other, None)
            assert (got.outcome, got.error, got.signals, got.duration, got.trace_id) == (
                expected.outcome, expected.error, expected.signals, expected.duration, expected.trace_id)
    assert [finished_from_line(t.model_dump_json(), None).outcome for t in traces] == ["ok", "failed: ProviderError"]


async def test_a_reply_that_follows_its_request_is_written_once_and_comes_back_as_that_message():
    [trace, _] = await _traces()
    line = trace.model_dump_json()
    assert line.count('"content":"hello"') == 1 and line.count('"content":"bye"') == 1
    assert all("reply" not in call for call in json.loads(line)["model_calls"])
    loaded = rk.Trace.model_validate_json(line)
    assert loaded == trace
    assert [loaded.messages.index(c.reply) for c in loaded.model_calls] == loaded.sampled == [1, 3]
    assert all(loaded.messages[i] is c.reply for i, c in zip(loaded.sampled, loaded.model_calls))
    # A reply the conversation no longer holds at that place is written in full.
    trace.messages[1] = rk.AssistantMessage(content="hello, rewritten")
    record = json.loads(trace.model_dump_json())
    assert record["model_calls"][0]["reply"]["content"] == "hello" and "reply" not in record["model_calls"][1]
    assert rk.Trace.model_validate_json(trace.model_dump_json()).model_calls[0].reply.content == "hello"
