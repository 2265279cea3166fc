"""The field census (rollkit.interop.formats.census): every key path of every
fixture file, and of every public file collected under tests/fixtures/,
is one a census lists (mapped, kept or dropped with a reason); a key no
census lists is kept by rk.load in the trace's info under its source path
and listed by `rollkit show`; the usage shapes, generation times, the
given greeting, unknown latencies and token counts read the same in the
Trace and its frames."""

from __future__ import annotations

import json
import math
import re
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rollkit as rk
from rollkit import frames
from rollkit.cli import cli
from rollkit.interop.formats._usage import usage_of
from rollkit.interop.formats.census import CENSUSES, key_paths, unknown

FIXTURES = Path(__file__).parent / "fixtures"
_TRACE_FILES = ("*.json", "*.jsonl", "*.traj", "*.eval")


def _files() -> list[Path]:
    return sorted(p for pattern in _TRACE_FILES for p in FIXTURES.rglob(pattern) if p.is_file())


def _inspect_records(path: Path) -> Iterator[tuple[str, Any, str, str]]:
    if path.suffix == ".eval":
        import zipfile_zstd  # noqa: F401  (inspect writes zstandard members)

        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                data = json.loads(archive.read(name))
                if name == "header.json":
                    yield "inspect", data, "", ""
                elif name.startswith("samples/"):
                    yield "inspect", data, f"{name}:samples.*", "samples.*"
                else:  # reductions.json, summaries.json, _journal/...
                    yield "inspect", {name.split("/")[0].removesuffix(".json"): data}, "", ""
        return
    yield "inspect", json.loads(path.read_text()), "", ""


def _records(path: Path) -> Iterator[tuple[str, Any, str, str]]:
    """(census, record, concrete prefix, pattern it sits at) of each record in a fixture file."""
    if "inspect" in path.parts:
        yield from _inspect_records(path)
        return
    if path.suffix == ".jsonl":
        name = "verifiers-v1" if path.name == "traces.jsonl" else "verifiers"
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                yield name, json.loads(line), f"line {number}:", ""
        return
    document = json.loads(path.read_text())
    if path.name == "metadata.json":
        yield "verifiers-metadata", document, "", ""
    elif "simulations" in document or "simulations" in path.parts:
        within = "simulations.*" if "simulations" in path.parts else ""
        yield "tau2", document, "", within
    elif "history" in document:
        yield "swe-agent", document, "", ""
    elif "messages" in document:
        yield "mini-swe-agent", document, "", ""
    elif "steps" in document:
        yield "atif", document, "", ""
    else:
        raise AssertionError(f"{path}: a fixture of no format the census test knows")


def test_every_key_path_of_every_fixture_is_in_its_formats_census() -> None:
    """A new field in any fixture or collected public file fails here,
    naming the file, the path and a value: it is mapped, kept or dropped
    with a reason in rollkit/interop/formats/_census_tables.py, never lost silently."""
    unlisted = []
    walked: dict[str, int] = {}
    for path in _files():
        for name, record, prefix, within in _records(path):
            walked[name] = walked.get(name, 0) + 1
            for key, value in unknown(CENSUSES[name], record, prefix.rstrip(":"), within).items():
                unlisted.append(f"{path.relative_to(FIXTURES)}: {name}: {key} = {json.dumps(value)[:80]}")
    assert not unlisted, "key paths no census lists:\n" + "\n".join(unlisted[:40])
    assert set(walked) == set(CENSUSES)  # every census is exercised by a real file


def test_the_walk_names_a_key_the_census_does_not_list() -> None:
    record = json.loads((FIXTURES / "mini-swe-agent/pvlib__pvlib-python-1606.traj.json").read_text())
    record["messages"][2]["extra"]["response"]["usage"]["brand_new_tokens"] = 5
    record["info"]["new_section"] = {"a": 1}
    assert unknown(CENSUSES["mini-swe-agent"], record) == {
        "messages.2.extra.response.usage.brand_new_tokens": 5, "info.new_section": {"a": 1}}
    fates = {path: fate.kind for path, _, fate in key_paths(CENSUSES["mini-swe-agent"], record) if fate}
    assert fates["messages.2.extra.response.usage.completion_tokens_details.reasoning_tokens"] == "mapped"
    assert fates["messages.2.extra.response.usage.total_tokens"] == "dropped"


def test_every_census_entry_says_where_or_why() -> None:
    for census in CENSUSES.values():
        counts = census.counts()
        assert counts["paths"] == counts["mapped"] + counts["kept"] + counts["dropped"] > 0
        assert all(fate.to for fate in census.entries.values()), census.format


def test_rk_load_keeps_an_unknown_key_in_info_and_rollkit_show_lists_it(tmp_path) -> None:
    source = json.loads((FIXTURES / "tau2/airline_results.json").read_text())
    source["simulations"][1]["messages"][2]["latency_breakdown"] = {"ttft": 0.4}
    source["simulations"][1]["new_score"] = 0.5
    path = tmp_path / "results.json"
    path.write_text(json.dumps(source))
    traces = rk.load(path)
    assert traces[1].info["unmapped"] == {"simulations.1.messages.2.latency_breakdown": {"ttft": 0.4},
                                          "simulations.1.new_score": 0.5}
    assert "unmapped" not in traces[0].info and "unmapped" not in traces[2].info
    # What the census keeps under its source path is in info["source"], verbatim.
    assert traces[0].info["source"]["info.git_commit"] == source["info"]["git_commit"]
    result = CliRunner().invoke(cli, ["show", str(path)])
    assert result.exit_code == 0, result.output
    assert "simulations.*.messages.*.latency_breakdown  (1 of 3 traces)" in result.output
    assert "simulations.*.new_score  (1 of 3 traces)" in result.output


def _show_cases() -> list[Path]:
    folders = sorted({p.parent for p in FIXTURES.rglob("results.jsonl")})
    return [*(p for p in _files() if p.name != "metadata.json"), *folders]


@pytest.mark.parametrize("path", _show_cases(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_rollkit_show_opens_everything_rk_load_opens(path: Path) -> None:
    """`rollkit show` on every fixture and every verifiers run folder: the
    traces rk.load reads, summarized (issue 46, class 6)."""
    try:
        traces = rk.load(path)
    except rk.TraceFileError as refused:  # a log its own tool refuses too: show says the same, no crash
        result = CliRunner().invoke(cli, ["show", str(path)])
        assert result.exit_code == 1 and str(refused).split(":")[0] in result.output
        return
    result = CliRunner().invoke(cli, ["show", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: {len(traces)} traces" in result.output


@pytest.mark.parametrize("usage, expected", [
    ({"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 64},
      "completion_tokens_details": {"reasoning_tokens": 12}}, (100, 20, 64, None, 12)),
    ({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 80, "cache_creation_input_tokens": 30},
     (120, 5, 80, 30, None)),
    ({"prompt_tokens": 50, "completion_tokens": 9, "prompt_cache_hit_tokens": 32, "prompt_cache_miss_tokens": 18},
     (50, 9, 32, None, None)),
    ({"prompt_tokens": 50, "completion_tokens": 9, "reasoning_tokens": 7}, (50, 9, None, None, 7)),
    ({"promptTokenCount": 40, "candidatesTokenCount": 8, "cachedContentTokenCount": 16, "thoughtsTokenCount": 30},
     (40, 38, 16, None, 30)),
    ({"input_tokens": 30, "output_tokens": 6, "input_tokens_details": {"cached_tokens": 8},
      "output_tokens_details": {"reasoning_tokens": 2}}, (30, 6, 8, None, 2)),
])
def test_one_usage_reader_reads_every_spelling(usage, expected) -> None:
    read = usage_of(usage)
    assert (read.input_tokens, read.output_tokens, read.cache_read_tokens, read.cache_write_tokens,
            read.reasoning_tokens) == expected
    assert usage_of({}) is None and usage_of(None) is None


def test_mini_swe_agent_reasoning_and_cached_tokens_are_read() -> None:
    [trace] = rk.load(FIXTURES / "mini-swe-agent/pvlib__pvlib-python-1606.traj.json")
    raw = [m for m in json.loads((FIXTURES / "mini-swe-agent/pvlib__pvlib-python-1606.traj.json").read_text())
           ["messages"] if m.get("role") == "assistant"]
    for call, message in zip(trace.turns, raw, strict=True):
        usage = message["extra"]["response"]["usage"]
        assert call.usage.reasoning_tokens == usage["completion_tokens_details"]["reasoning_tokens"]
        assert call.usage.cache_read_tokens == usage["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("name", ["airline_results.json", "whissle_airline_run1.json"])
def test_tau2_generation_time_cached_tokens_and_the_given_greeting(name) -> None:
    path = FIXTURES / "tau2" / name
    traces = rk.load(path)
    document = json.loads(path.read_text())
    for trace, sim in zip(traces, document["simulations"], strict=True):
        given = sim["messages"][0]["role"] == "assistant" and not sim["messages"][0].get("usage")
        produced = [m for i, m in enumerate(sim["messages"]) if m["role"] == "assistant" and (i or not given)]
        assert len(trace.turns) == len(produced)  # the fixed greeting is no model call
        assert trace.info.get("given_messages") == ([0] if given else None)
        if produced and all(m.get("usage") for m in produced):  # every call reported: a known total
            assert trace.num_input_tokens is not None and trace.num_input_tokens > 0
        elif produced:
            assert trace.num_input_tokens is None
        for call, message in zip(trace.turns, produced, strict=True):
            if message.get("generation_time_seconds") is not None:  # tau2's own time of the call, where it kept one
                assert call.latency == pytest.approx(message["generation_time_seconds"])
            usage = (message.get("raw_data") or {}).get("usage") or {}
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", usage.get("cache_read_input_tokens"))
            assert call.usage.cache_read_tokens == cached


def test_an_untimed_call_reads_unknown_in_the_trace_and_every_frame() -> None:
    [trace] = rk.load(FIXTURES / "mini-swe-agent/pvlib__pvlib-python-1606.traj.json")
    first = trace.model_calls[0]
    assert math.isnan(first.latency) and math.isnan(trace.model_time) and math.isnan(trace.harness_time)
    assert not math.isnan(trace.model_calls[1].latency)
    assert math.isnan(frames.calls([trace])["latency"].iloc[0])
    assert math.isnan(frames.turns([trace])["latency"].iloc[0])
    assert math.isnan(frames.rollouts([trace])["model_time"].iloc[0])


def test_unreported_tokens_read_unknown_in_the_trace_and_the_frames() -> None:
    [trace] = rk.load(FIXTURES / "swe-agent/function_calling_simple.traj")
    row = frames.rollouts([trace]).iloc[0]
    assert trace.num_input_tokens is None and trace.num_output_tokens is None and trace.num_total_tokens is None
    assert row["input_tokens"] is None or str(row["input_tokens"]) == "<NA>"


def test_census_counts_are_printed_for_the_closing_note(capsys) -> None:
    for name, census in sorted(CENSUSES.items()):
        print(name, census.versions, census.counts())
    assert re.search(r"tau2 .*'paths': \d+", capsys.readouterr().out)


def test_inspect_keeps_unknown_keys_through_either_reader(tmp_path, monkeypatch) -> None:
    """A log rollkit reads directly and one left to inspect-ai's own reader
    (whose models drop keys they do not know) keep the same unknown keys."""
    pytest.importorskip("inspect_ai")
    from rollkit.interop.formats import inspect_log

    log = json.loads((FIXTURES / "inspect/adding.json").read_text())
    log["new_header_field"] = "h"
    log["samples"][1]["new_sample_field"] = {"seconds": 1.5}
    path = tmp_path / "log.json"
    path.write_text(json.dumps(log))
    direct = rk.load(path)

    def refuse(*args):
        raise inspect_log._NotPlain("left to inspect's reader")

    monkeypatch.setattr(inspect_log, "_read_directly", refuse)
    through_inspect = rk.load(path)
    for traces in (direct, through_inspect):
        assert traces[1].info["unmapped"] == {"new_header_field": "h", "samples.1.new_sample_field": {"seconds": 1.5}}
        assert traces[0].info["unmapped"] == {"new_header_field": "h"}


def test_tau2_keeps_the_reasoning_its_provider_returned() -> None:
    """Claude's thinking, which tau2 keeps only in raw_data.thinking_blocks, is the reply's reasoning."""
    path = FIXTURES / "tau2/airline_results.json"
    traces = rk.load(path)
    document = json.loads(path.read_text())
    found = 0
    for trace, sim in zip(traces, document["simulations"], strict=True):
        replies = [m for m in trace.messages if m.role == "assistant"]
        raw = [m for m in sim["messages"] if m["role"] == "assistant"]
        for reply, message in zip(replies, raw, strict=True):
            blocks = (message.get("raw_data") or {}).get("thinking_blocks") or []
            thinking = "\n\n".join(b["thinking"] for b in blocks if b.get("thinking"))
            assert reply.reasoning == (thinking or None)
            found += bool(thinking)
    assert found == 18
