"""Trace files with bad input (issue 15, item 8): every damage gets one clear
error naming the file, the line and the field, and `rollkit show` prints it
as one `Error:` line. Other tools' formats are in tests/test_formats.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.fault_report import report

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


# ---- issue 23, item 5: hostile files -------------------------------------------------------

_VERIFIERS_LINE = {"example_id": 0, "prompt": [{"role": "user", "content": "hi"}],
                   "completion": [{"role": "assistant", "content": "hello"}], "reward": 1.0}


def _verifiers(tmp_path, *records) -> "os.PathLike[str]":  # type: ignore[name-defined]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.faults
def test_hostile_json_nested_100000_deep_is_a_trace_file_error_and_skip_skips_it(tmp_path):
    """Before: a bare RecursionError (verifiers, transcripts, trajectories)."""
    deep = dict(_VERIFIERS_LINE, completion=[{"role": "assistant", "content": "x", "extra": json.loads(_deep(500))}])
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_VERIFIERS_LINE) + "\n" + '{"prompt": ' + _deep(100_000) + "}\n")
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path, format="verifiers")
    assert str(caught.value).startswith(f"{path}: line 2: is nested too deep (more than about 1000 arrays or objects")
    assert caught.value.line == 2
    with pytest.warns(UserWarning, match="line 2: is nested too deep.*; skipped"):
        assert len(rk.load(path, format="verifiers", errors="skip")) == 1
    trajectory = tmp_path / "run.traj.json"
    trajectory.write_text('{"trajectory_format": "x", "messages": ' + _deep(100_000) + "}")
    with pytest.raises(rk.TraceFileError, match=r"the trajectory: is nested too deep"):
        rk.load(trajectory, format="trajectory")
    assert deep  # a record 500 deep is no error by itself


@pytest.mark.faults
@pytest.mark.parametrize("count", ["Infinity", "NaN", '"lots"'])
def test_hostile_token_count_names_the_line_and_field(tmp_path, count):
    """Before: OverflowError / ValueError (Infinity, NaN) or a pydantic
    ValidationError ("lots"), none naming the file."""
    record = dict(_VERIFIERS_LINE, token_usage={"input_tokens": 5, "output_tokens": 7})
    bad = json.dumps(record).replace('"output_tokens": 7', f'"output_tokens": {count}')
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(record) + "\n" + bad + "\n")
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path, format="verifiers")
    assert str(caught.value).startswith(f"{path}: line 2: field token_usage.output_tokens should be a ")
    assert (caught.value.line, caught.value.field) == (2, "token_usage.output_tokens")
    with pytest.warns(UserWarning, match="line 2: field token_usage.output_tokens"):
        assert len(rk.load(path, format="verifiers", errors="skip")) == 1
    report(f"hostile token count {count}: a TraceFileError naming line and field; errors='skip' skips it")


@pytest.mark.faults
def test_hostile_trajectory_usage_of_the_wrong_type_names_the_field(tmp_path):
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1", "mini_version": "1", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok", "extra": {"response": {"usage": {"prompt_tokens": "lots"}}}}]}))
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path, format="trajectory")
    assert str(caught.value).startswith(f"{path}: the trajectory: field input_tokens is refused: ")
    assert caught.value.field == "input_tokens"


@pytest.mark.faults
@pytest.mark.parametrize("kind", ["fifo", "device", "symlink to /dev/zero", "folder"])
def test_hostile_special_files_are_refused_before_reading(tmp_path, kind):
    """Before: a FIFO blocked rk.load forever, /dev/zero grew to MemoryError."""
    path = tmp_path / "traces.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
        expected = "is a FIFO (named pipe), not a trace file"
    elif kind == "folder":  # a run folder whose traces.jsonl is a folder
        path.mkdir()
        expected = "is a folder, not a trace file"
    elif kind == "device":
        path = "/dev/zero"
        expected = "is a device, not a trace file"
    else:
        path.symlink_to("/dev/zero")
        expected = "is a device, not a trace file"
    for errors in ("raise", "skip"):
        with pytest.raises(rk.TraceFileError) as caught:
            rk.load(tmp_path if kind == "folder" else path, errors=errors)
        assert str(caught.value) == f"{path}: {expected}: rk.load reads regular files only"
    report(f"hostile file ({kind}): refused before reading, a TraceFileError naming it")


@pytest.mark.faults
def test_hostile_line_longer_than_the_bound_is_refused_unread_and_skip_skips_it(tmp_path, monkeypatch):
    from rollkit.core import safe_read

    monkeypatch.setattr(safe_read, "MAX_LINE", 4096)  # the bound itself is 64 MiB; the file stays small
    path = _verifiers(tmp_path, _VERIFIERS_LINE, dict(_VERIFIERS_LINE, prompt=[{"role": "user", "content": "x" * 10_000}]),
                      _VERIFIERS_LINE)
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path, format="verifiers")
    assert str(caught.value).startswith(f"{path}: line 2 is longer than the 0 MiB a line may be")
    with pytest.warns(UserWarning, match="line 2 is longer than"):
        assert len(rk.load(path, format="verifiers", errors="skip")) == 2


@pytest.mark.parametrize("block", [7, 64, 4096])
def test_lines_read_a_block_at_a_time_are_the_lines_of_the_file(tmp_path, monkeypatch, block):
    """Lines cut by block edges, a byte-order mark, an empty line, lines
    past the bound (inside one block and across several) and a last line
    without its newline: what readline would give, one by one."""
    from rollkit.core import safe_read

    monkeypatch.setattr(safe_read, "MAX_LINE", 40)
    monkeypatch.setattr(safe_read, "_BLOCK", block)
    body = [b"short", b"", b"a" * 40, b"b" * 41, b"c" * 39, b"d" * 200, b"e" * 10, b"f" * 45]
    path = tmp_path / "t.jsonl"
    path.write_bytes(safe_read.BOM + b"\n".join(body))  # "f"*45, the last, has no newline and is too long
    expected = [(1, b"short\n"), (2, b"\n"), (3, b"a" * 40 + b"\n"), (4, None), (5, b"c" * 39 + b"\n"), (6, None),
                (7, b"e" * 10 + b"\n"), (8, None)]
    assert list(safe_read.lines(path)) == expected
    path.write_bytes(b"\n".join(body[:-1]) + b"\ntorn")
    assert list(safe_read.lines(path))[-2:] == [(7, b"e" * 10 + b"\n"), (8, b"torn")]
    # Every batch's bytes hold its lines, so a scan of them finds what is in any line.
    for batch_bytes, batch in safe_read.line_batches(path):
        assert all(line is None or line.rstrip(b"\n") in batch_bytes for _, line in batch)


@pytest.mark.faults
def test_hostile_eval_zip_bomb_is_refused_before_inflating(tmp_path):
    """Before: a 4 MB .eval whose member inflates to 4 GB reached MemoryError."""
    import zipfile

    from rollkit.core import safe_read

    path = tmp_path / "bomb.eval"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", "{}")
        with archive.open("samples/1_epoch_1.json", "w", force_zip64=True) as member:
            chunk = b"0" * (1 << 20)
            for _ in range(safe_read.MAX_MEMBER // len(chunk) + 1):
                member.write(chunk)
    assert path.stat().st_size < 2 * 2**20
    pytest.importorskip("inspect_ai")
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path)
    assert str(caught.value) == (f"{path}: zip member 'samples/1_epoch_1.json' decompresses to 257 MiB, more than the "
                                 "256 MiB a member may be (rollkit.core.safe_read.MAX_MEMBER)")


async def test_hostile_byte_order_mark_is_accepted(tmp_path):
    """Before: a BOM made the file pass for a transcript, and the error named that format."""
    traces = await _traces(2)
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(t.model_dump_json().encode() + b"\n" for t in traces))
    assert [t.id for t in rk.load(path)] == [t.id for t in traces]


@pytest.mark.faults
@pytest.mark.parametrize("where", ["reward", "timing"])
async def test_hostile_nan_or_infinity_in_a_rollkit_trace_is_refused_naming_the_field(tmp_path, where):
    """Before: a NaN reward crashed the summary's interval (AttributeError),
    an Infinity timing the trace's HTML (cannot convert float NaN to integer)."""
    traces = await _traces(2)
    good = traces[0].model_dump_json()
    record = json.loads(good)
    if where == "reward":
        name = next(iter(record["rewards"]))
        bad = good.replace(f'"rewards":{{"{name}":{json.dumps(record["rewards"][name])}', f'"rewards":{{"{name}":NaN', 1)
        field = f"rewards.{name}"
    else:
        start = record["phases"]["agent"]["start"]
        at = good.index('"phases":')
        bad = good[:at] + good[at:].replace(f'"start":{json.dumps(start)}', '"start":Infinity', 1)
        field = "phases.agent.start"
    assert bad != good
    path = tmp_path / "traces.jsonl"
    path.write_text(traces[1].model_dump_json() + "\n" + bad + "\n")
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path)
    assert str(caught.value).startswith(f"{path}: line 2 is not a rollkit trace (field {field}: NaN or Infinity)")
    assert (caught.value.line, caught.value.field) == (2, field)
    with pytest.warns(UserWarning, match="line 2 is not a rollkit trace"):
        assert [t.id for t in rk.load(path, errors="skip")] == [traces[1].id]


def test_rollkit_view_reads_a_trace_file_once_and_its_page_loads_the_copy_handed_over(tmp_path, monkeypatch):
    """Before: the command read the file to refuse a bad one, then the page's
    kernel read it again (a 1 GB file peaked at 4.1 GB in each). Now the
    command reads it once and hands the traces to the kernel as rollkit's
    JSON lines in the view's folder. Voila is not started: `_serve` is
    replaced by what the kernel does with the page's one cell."""
    pytest.importorskip("voila")
    pytest.importorskip("ipywidgets")
    from click.testing import CliRunner

    import rollkit.core.store as store
    import rollkit.cli as cli

    source = tmp_path / "results.jsonl"  # a verifiers file: the page must show the same traces
    source.write_text("".join(json.dumps({"example_id": n, "prompt": [{"role": "user", "content": f"q{n}"}],
                                          "completion": [{"role": "assistant", "content": f"a{n}"}],
                                          "reward": n / 4}) + "\n" for n in range(4)))
    loads: list[str] = []
    real_load = store.load

    def counted(path, **kwargs):  # type: ignore[no-untyped-def]
        loads.append(str(path))
        return real_load(path, **kwargs)

    shown: dict = {}

    def kernel(notebook, home, port):  # type: ignore[no-untyped-def]
        cell = json.loads(notebook.read_text())["cells"][0]["source"]
        page = {}
        exec(cell.replace("rk.notebook.view(", "page['view'] = rk.notebook.view("), {"page": page})
        shown["children"] = page["view"].children
        shown["home"] = home

    monkeypatch.setattr(store, "load", counted)
    monkeypatch.setattr(cli, "_serve", kernel)
    done = CliRunner().invoke(cli.cli, ["view", str(source)])
    assert done.exit_code == 0, done.output
    copy = str(shown["home"] / "read-0.jsonl")
    assert loads == [str(source), copy]  # the file once (the command), the copy once (the kernel)
    assert not shown["home"].exists()  # the copy went with the view's folder
    summary, browser = shown["children"][2].children
    assert "rollouts: 4 over 4 tasks" in summary.value and "0.375" in summary.value
    same = [t.model_dump(exclude={"id"}) for t in real_load(source)]  # a fresh id each time a foreign file is read
    assert [t.model_dump(exclude={"id"}) for t in browser.traces] == same


async def test_loading_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    """rk.load pauses the cyclic collector while it builds (rollkit.core.gcpause)
    and puts it back as it was: on stays on, off stays off, also after a
    bad line raised, and a pause nested in another ends with the outer one."""
    import gc
    import threading

    from rollkit.core.gcpause import paused

    path = rk.save(await _traces(2), tmp_path / "t.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text() + "{not json}\n")
    was = gc.isenabled()
    try:
        gc.enable()
        seen = []
        with paused():
            seen.append(gc.isenabled())
            assert len(rk.load(path)) == 2
            seen.append(gc.isenabled())  # the load's own pause ended inside this one: still paused
        seen.append(gc.isenabled())
        with pytest.raises(rk.TraceFileError, match="line 3"):
            rk.load(bad)
        seen.append(gc.isenabled())
        gc.disable()
        rk.load(path)
        seen.append(gc.isenabled())  # a caller that turned it off keeps it off
        assert seen == [False, False, True, True, False]
        # Two threads pausing at once: on again only when both have ended.
        gc.enable()
        inside, release = threading.Event(), threading.Event()

        def hold() -> None:
            with paused():
                inside.set()
                release.wait(10)

        other = threading.Thread(target=hold)
        other.start()
        inside.wait(10)
        with paused():
            pass
        assert not gc.isenabled()  # the other thread's pause still runs
        release.set()
        other.join(10)
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


async def test_loaded_traces_are_made_old_unless_something_is_frozen(tmp_path):
    """What rk.load made is moved to the oldest generation when its pause
    ends (not walked as young), and nothing is unfrozen that a caller froze."""
    import gc

    path = rk.save(await _traces(2), tmp_path / "t.jsonl")
    was = gc.isenabled()
    try:
        gc.enable()
        traces = rk.load(path)
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert all(id(t) in oldest and id(t.messages) in oldest for t in traces)
        marker = [[]]
        gc.freeze()  # a caller's, e.g. before forking workers
        traces = rk.load(path)
        assert not any(o is marker for o in gc.get_objects())  # still frozen: in no generation
        assert not any(t is o for o in gc.get_objects(generation=2) for t in traces)
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()


async def test_loaded_records_share_one_set_of_given_fields(tmp_path):
    """rk.load keeps one set of given fields per record type
    (rollkit.core.store._Shared.share_given writes pydantic 2's
    __pydantic_fields_set__; pyproject pins pydantic < 3 for it): if pydantic
    moved that set, the records would hold their own again and this fails."""
    first, second = rk.load(rk.save(await _traces(2), tmp_path / "t.jsonl"))
    assert first.model_fields_set is second.model_fields_set
    assert first.model_fields_set == set(rk.Trace.model_fields)
    assert first.messages[0].model_fields_set is second.messages[0].model_fields_set
    assert first.model_calls[0].usage.model_fields_set is second.model_calls[0].usage.model_fields_set
    assert first.agent is second.agent  # one agent record for the file


# ---- issue 31, item 4: bounded sniffing ------------------------------------------------------
# Each shape a hostile (or careless) file takes, written in 1 MiB chunks:
# (what it opens with, the unit repeated, what closes it, size in MiB, unit
# repeats per line or None for one line). Before, recognising the format
# parsed whole lines and documents unbounded: 100 MB of `[],` took rk.load
# to 5 GB, a 1 GB document to 1 GB, a 20 MB line to 1.1 GB.
HOSTILE_SHAPES = {
    "verifiers-looking, 100 MB of [], on one line": ('{"prompt": [], "completion": [', "[],", "[]]}\n", 100, None),
    "verifiers-looking, 100 MB of [], in 10 MB lines": ('{"prompt": [], "completion": [', "[],", "[]]}\n", 100, 10),
    "JSON document of 1 GB on one line": ('{"history": [', "[],", "[]]}", 1024, None),
    "JSON document of 1 GB, pretty-printed": ('{\n  "history": [\n', "    [],\n", "    []\n  ]\n}\n", 1024, None),
    "20 MB single line of [], (ATIF-looking)": ('{"schema_version": "ATIF-v1.4", "steps": [', "[],", "[]]}", 20, None),
    "20 MB single line of small objects (messages)": ('{"messages": [', '{"a":1},', "{}]}\n", 20, None),
    "20 MB single line of floats (trajectory-looking)": ('{"history": [', "1.5,", "1.5]}", 20, None),
    "20 MB single line of a rollkit trace": ('{"id": "x", "task": {"type": "T", "key": [', "[],", "[]]}}\n", 20, None),
    "8 MB document of nested objects (tau2-looking)": ('{"simulations": [', '{"a":{"b":{}}},', "{}]}", 8, None),
    "20 MB inspect-looking log of [],": ('{"version": 2, "status": "success", "samples": [', "[],", "[]]}", 20, None),
}


def _write_shape(path, opening: str, unit: str, closing: str, mib: int, per_line: int | None) -> None:
    chunk = (unit * (2**20 // len(unit))).encode()
    with open(path, "wb") as f:
        if per_line is None:
            f.write(opening.encode())
            for _ in range(mib):
                f.write(chunk)
            f.write(closing.encode())
            return
        for _ in range(mib // per_line):
            f.write(opening.encode())
            for _ in range(per_line):
                f.write(chunk)
            f.write(closing.encode())


# The peak is VmHWM, this process's own high-water mark: ru_maxrss would
# count the parent's size too (the kernel keeps the larger of the two over
# the exec that follows a vfork).
_LOAD_AND_MEASURE = """
import json, re, sys
import rollkit as rk
try:
    rk.load(sys.argv[1])
    said = None
except rk.TraceFileError as exc:
    said = str(exc)
peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
print(json.dumps({"said": said, "peak_mib": peak / 1024}))
"""


@pytest.mark.faults
@pytest.mark.parametrize("shape", list(HOSTILE_SHAPES))
def test_hostile_shape_is_refused_naming_the_file_under_300_mb(tmp_path, shape):
    """Issue 31, item 4: every sniffer reads through safe_read's bounds; the
    peak is the loading process's own, a fresh interpreter's."""
    path = tmp_path / "hostile.json"
    _write_shape(path, *HOSTILE_SHAPES[shape])
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_MEASURE, str(path)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    report(f"hostile shape {shape} ({path.stat().st_size / 2**20:.0f} MiB): refused, peak {result['peak_mib']:.0f} MB")
    assert result["said"] is not None and result["said"].startswith(f"{path}: "), result
    assert any(bound in result["said"] for bound in (
        "more than the 64 MiB a JSON document may be", "is longer than the 64 MiB a line may be",
        "more than the 192 MiB one record or document may (rollkit.core.safe_read.MAX_PARSED)")), result
    assert result["peak_mib"] < 300, result


def test_a_memory_error_while_recognising_a_file_is_not_swallowed(tmp_path, monkeypatch):
    """Before: store.sniff_format caught every exception, MemoryError included, and went on to the next format."""
    from rollkit.interop.formats import docparse

    def exhausted(path):
        raise MemoryError("no memory left")

    monkeypatch.setattr(docparse, "document", exhausted)
    path = tmp_path / "doc.json"
    path.write_text('{"history": []}')
    with pytest.raises(MemoryError, match="no memory left"):
        rk.load(path)


def test_a_fifo_beside_a_verifiers_file_as_its_metadata_is_not_read(tmp_path):
    """Before: metadata.json beside results.jsonl was read unbounded: a FIFO there hung rk.load."""
    path = _verifiers(tmp_path, _VERIFIERS_LINE)
    os.mkfifo(os.path.join(os.path.dirname(path), "metadata.json"))
    assert [t.info.get("format") for t in rk.load(path)] == ["verifiers"]


def test_a_json_lines_file_larger_than_a_document_may_be_is_still_recognised(tmp_path, monkeypatch):
    from rollkit.core import safe_read

    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(_VERIFIERS_LINE) + "\n" for _ in range(20)))
    monkeypatch.setattr(safe_read, "MAX_DOCUMENT", path.stat().st_size // 4)
    assert [t.info.get("format") for t in rk.load(path)] == ["verifiers"] * 20


@pytest.mark.parametrize("module", ["inspect_log", "atif", "trajectory", "tau2", "verifiers", "messages"])
def test_a_format_reader_that_cannot_import_is_an_error_not_a_file_it_does_not_claim(tmp_path, monkeypatch, module):
    """Format readers are imported on first use: one whose module cannot load
    (a broken install) must say so, not pass the file on to the next format
    (which would read an ATIF file as a plain transcript, or refuse it).
    Every format module the sniffers import, in their order."""
    import sys

    path = tmp_path / "doc.json"
    path.write_text('{"unrelated": []}')  # claimed by none of them: every sniffer is asked
    monkeypatch.setitem(sys.modules, f"rollkit.interop.formats.{module}", None)  # importing it raises ImportError
    with pytest.raises(ImportError, match=f"rollkit.interop.formats.{module}"):
        rk.load(path)
