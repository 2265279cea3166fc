"""Trace files with bad input (issue 15, item 8): every damage gets one clear
error naming the file, the line and the field, and `rollkit show` prints it
as one `Error:` line. Other tools' formats are in tests/test_formats.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent


async def _traces(n: int = 3) -> list[rk.Trace]:
    agent = demo_agent()
    return [await agent.run(task) for task in arithmetic_tasks(n)]


def _show(folder) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run([sys.executable, "-m", "rollkit", "show", str(folder)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


async def test_bad_input_invalid_utf8_names_file_and_line_and_skip_skips_it(tmp_path):
    traces = await _traces(3)
    lines = [t.model_dump_json().encode() for t in traces]
    # One byte that is no UTF-8 inside the second trace's prompt.
    lines[1] = lines[1].replace(b"How many", b"How \xff many", 1)
    assert b"\xff" in lines[1]
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path)
    assert str(caught.value).startswith(f"{path}: line 2 is not a rollkit trace (invalid UTF-8: byte 0xff at column ")
    assert caught.value.line == 2 and caught.value.path == path
    with pytest.warns(UserWarning, match=r"line 2 is not a rollkit trace \(invalid UTF-8.*; skipped"):
        loaded = rk.load(path, errors="skip")
    assert [t.id for t in loaded] == [traces[0].id, traces[2].id]


async def test_bad_input_error_names_the_bad_field(tmp_path):
    traces = await _traces(2)
    record = json.loads(traces[1].model_dump_json())
    record["model_calls"][0]["usage"]["input_tokens"] = "many"
    path = tmp_path / "run.jsonl"
    path.write_text(traces[0].model_dump_json() + "\n" + json.dumps(record) + "\n")
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path)
    assert caught.value.field == "model_calls.0.usage.input_tokens"
    assert caught.value.line == 2
    assert "line 2 is not a rollkit trace (field model_calls.0.usage.input_tokens: Input should be a valid integer" \
        in str(caught.value)


async def test_bad_input_json_syntax_error_has_no_field(tmp_path):
    traces = await _traces(1)
    path = tmp_path / "run.jsonl"
    path.write_text("{not json\n" + traces[0].model_dump_json() + "\n")
    with pytest.raises(rk.TraceFileError, match=r"line 1 is not a rollkit trace \(Invalid JSON") as caught:
        rk.load(path)
    assert caught.value.field is None and caught.value.line == 1


async def test_bad_input_save_of_a_non_trace_is_a_type_error_before_writing(tmp_path):
    traces = await _traces(1)
    with pytest.raises(TypeError, match=r"^item 0 is int, not a rollkit Trace; pass rk.Trace objects"):
        rk.save([1], tmp_path / "new.jsonl")
    assert not (tmp_path / "new.jsonl").exists()
    assert list(tmp_path.iterdir()) == []
    # An existing file is left as it was, not truncated, by a bad item anywhere in the list.
    path = rk.save(traces, tmp_path / "kept.jsonl")
    before = path.read_bytes()
    with pytest.raises(TypeError, match=r"^item 1 is dict, not a rollkit Trace"):
        rk.save([traces[0], {"id": "x"}], path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsonl"]
    with pytest.raises(TypeError, match="rk.save takes a rk.Trace or a list of them, got str"):
        rk.save("traces", tmp_path / "x.jsonl")


async def test_bad_input_rollkit_show_prints_one_error_line_for_a_bad_file(tmp_path):
    traces = await _traces(2)
    folder = tmp_path / "run"
    path = rk.save(traces, folder / "traces.jsonl")
    data = path.read_bytes().replace(b"How many", b"How \xfe many", 1)
    path.write_bytes(data)
    done = _show(folder)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    error_lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1, done.stderr
    assert error_lines[0].startswith(f"Error: {path}: line 1 is not a rollkit trace (invalid UTF-8: byte 0xfe")
