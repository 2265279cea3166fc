"""The columnar store and the lazy run: every frame equal row for row to
rk.frames on the same traces (example runs and imported files), tables
rebuilt after a torn write, a changed source and a resumed run, search and
SQL against a brute-force scan, and escaped highlights."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest

import rollkit as rk
from rollkit import frames
from rollkit.core.trace import SCHEMA_VERSION
from rollkit.examples import arithmetic_tasks, demo_agent, support_agent, support_tasks, toy_customer
from rollkit.examples.bigrun import big_run, cached_big_run
from rollkit.notebook.runbrowser import RunBrowser
from rollkit.tables.lazyrun import highlight, open_run

from helpers.sample_traces import assorted_traces

FRAMES = ("rollouts", "turns", "calls", "phases", "signals")


def _same_frames(path: Path, traces: list[rk.Trace]) -> None:
    run = open_run(path)
    assert len(run) == len(traces)
    for kind in FRAMES:
        pd.testing.assert_frame_equal(getattr(run, kind)(), getattr(frames, kind)(traces), obj=kind)
        pd.testing.assert_frame_equal(getattr(frames, kind)(path), getattr(frames, kind)(traces), obj=kind)


async def test_frames_of_assorted_and_example_runs_equal_the_trace_frames(tmp_path):
    kinds = await assorted_traces()  # ok, wrong, stopped, failed, raised, timed out, aborted
    arithmetic = await rk.evaluate_async(demo_agent(), arithmetic_tasks(4), repeats=2, progress=False)
    support = await rk.evaluate_async(support_agent(), support_tasks(3), user=toy_customer(), progress=False)
    traces = [*kinds.values(), *arithmetic.traces, *support.traces]
    path = rk.save(traces, tmp_path / "mixed.jsonl")
    _same_frames(path, rk.load(path))


async def test_a_failed_run_alone_keeps_its_nameless_signal_row(tmp_path):
    kinds = await assorted_traces()
    path = rk.save([kinds["failed"], kinds["aborted"]], tmp_path / "t.jsonl")
    _same_frames(path, rk.load(path))
    assert list(open_run(path).signals()["why_missing"]) == ["run failed", "run aborted"]


def test_imported_files_give_the_same_frames(tmp_path):
    from rollkit.examples import peers

    inspect_path = peers.inspect_log(tmp_path / "inspect")
    verifiers_path = peers.verifiers_run(tmp_path / "verifiers")
    for path in (inspect_path, verifiers_path):
        run = open_run(path)
        # The rollkit copy and the tables live in .rollkit/ beside the file.
        copy = path.parent / ".rollkit" / path.name / "traces.jsonl"
        _same_frames(copy, rk.load(copy))
        fresh = rk.load(path)  # an import names its traces anew on each read: all but the ids agree
        assert len(run) == len(fresh) > 0
        for kind in FRAMES:
            pd.testing.assert_frame_equal(getattr(run, kind)().drop(columns="id"),
                                          getattr(frames, kind)(fresh).drop(columns="id"), obj=kind)


def test_a_cached_big_run_is_written_once_into_its_cache_folder_never_the_temp_folder(tmp_path, monkeypatch):
    given = tmp_path / "given"
    first = cached_big_run(20, turns=2, seed=1, cache=given)
    assert first == given / "20-2-1" and len(rk.load(first)) == 20
    written = (first / "traces.jsonl").stat()
    again = cached_big_run(20, turns=2, seed=1, cache=given)
    reread = (again / "traces.jsonl").stat()
    assert again == first and (reread.st_ino, reread.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)  # reused
    # Without cache=: $ROLLKIT_BIG_RUN_CACHE, else big-run in rollkit's user cache folder.
    monkeypatch.setenv("ROLLKIT_BIG_RUN_CACHE", str(tmp_path / "env"))
    assert cached_big_run(3) == tmp_path / "env" / "3-1-0"
    monkeypatch.delenv("ROLLKIT_BIG_RUN_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cached_big_run(3) == tmp_path / "xdg" / "rollkit" / "big-run" / "3-1-0"
    assert len(rk.load(tmp_path / "xdg" / "rollkit" / "big-run" / "3-1-0")) == 3


def test_frames_keep_no_arrow_table_beside_them(tmp_path):
    # A frame is read for itself and its Arrow table released (a million
    # rollouts' phases would otherwise sit in memory twice); a table asked
    # for with run.arrow is kept, and the frames read from it are the same.
    folder = big_run(30, tmp_path / "run", turns=2, tasks=3)
    run = open_run(folder)
    first = {kind: getattr(run, kind)() for kind in FRAMES}
    assert run._cache == {}
    assert run.arrow("phases").num_rows == len(first["phases"]) == 150
    for kind in FRAMES:
        run.arrow(kind)
        pd.testing.assert_frame_equal(getattr(run, kind)(), first[kind], obj=kind)


@pytest.mark.parametrize("group_bytes", [1, 64 << 20])
async def test_runs_with_different_columns_read_together_give_the_frames_of_all_their_traces(tmp_path, monkeypatch,
                                                                                            group_bytes):
    # Two files whose signals differ (the support run has rewards the
    # arithmetic one has not, and the reverse), read a column at a time
    # (group_bytes=1) or many at once: a column one file lacks is missing
    # in its rows, and the caller's Arrow memory pool is put back.
    import pyarrow as pa

    from rollkit.tables import lazyrun

    monkeypatch.setattr(lazyrun, "_GROUP_BYTES", group_bytes)
    arithmetic = await rk.evaluate_async(demo_agent(), arithmetic_tasks(3), repeats=2, progress=False)
    support = await rk.evaluate_async(support_agent(), support_tasks(2), user=toy_customer(), progress=False)
    a = rk.save(arithmetic.traces, tmp_path / "a.jsonl")
    b = rk.save(support.traces, tmp_path / "b.jsonl")
    assert set(open_run(a).arrow_schema("rollouts")) != set(open_run(b).arrow_schema("rollouts"))
    pool = pa.default_memory_pool().backend_name
    run = open_run([a, b])
    for kind in FRAMES:
        pd.testing.assert_frame_equal(getattr(run, kind)(), getattr(frames, kind)([*rk.load(a), *rk.load(b)]),
                                      obj=kind)
    assert pa.default_memory_pool().backend_name == pool


def test_a_footer_is_read_once_per_version_of_its_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rollkit.tables.columns import footer

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), path)
    first = footer(path)
    assert footer(path) is first and first.num_rows == 2
    pq.write_table(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}), path)  # rewritten in place
    assert footer(path).num_rows == 3 and footer(path).schema.to_arrow_schema().names == ["a", "b"]


def test_one_trace_by_index_and_id_is_the_trace_in_the_file(tmp_path):
    folder = big_run(50, tmp_path / "run", turns=3, tasks=5)
    traces = rk.load(folder)
    run = open_run(folder)
    assert run[7] == traces[7] and run[-1] == traces[-1]
    assert run.trace(traces[20].id) == traces[20]
    with pytest.raises(KeyError, match="no trace with id 'nope' in this run \\(50 traces\\)"):
        run.trace("nope")
    with pytest.raises(IndexError, match="trace 50 is out of range: the run holds 50 traces"):
        run[50]


def test_traces_by_row_and_id_across_parts_and_files_are_the_traces_in_them(tmp_path, monkeypatch):
    # Many parts per file (a part every 7 lines), two files: each row and
    # each id finds its own trace, before and after the whole index loads.
    from rollkit.tables import columns

    monkeypatch.setattr(columns, "_BATCH", 7)
    a = big_run(30, tmp_path / "a", tasks=4)
    b = big_run(12, tmp_path / "b", tasks=4, seed=5)
    traces = [*rk.load(a), *rk.load(b)]
    (tmp_path / "b" / "traces.jsonl").write_bytes(
        (tmp_path / "b" / "traces.jsonl").read_bytes().replace(b'"id":"0000000', b'"id":"bbb0000'))
    traces[30:] = rk.load(b)
    for fresh in (True, False):
        run = open_run([a, b])
        if not fresh:
            run._offsets()  # the whole index, as a search's ordering loads it
        assert [run[i] for i in (0, 6, 7, 29, 30, 41, -1)] == [traces[i] for i in (0, 6, 7, 29, 30, 41, -1)]
        assert [run.trace(t.id) for t in (traces[13], traces[35])] == [traces[13], traces[35]]
        assert [t.id for t in run] == [t.id for t in traces]


def _tables_mtimes(path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in (path.parent / ".rollkit").rglob("*.parquet")}


def test_tables_are_reused_until_the_source_changes(tmp_path):
    folder = big_run(30, tmp_path / "run", tasks=4)
    source = folder / "traces.jsonl"
    open_run(folder)
    first = _tables_mtimes(source)
    open_run(folder)
    assert _tables_mtimes(source) == first  # reused: nothing rewritten
    # A rewritten source (same size, other rewards) is noticed and rebuilt.
    lines = source.read_bytes().splitlines(keepends=True)
    lines[-1] = lines[-1].replace(b'"correct":1.0', b'"correct":0.0') if b'"correct":1.0' in lines[-1] \
        else lines[-1].replace(b'"correct":0.0', b'"correct":1.0')
    source.write_bytes(b"".join(lines))
    _same_frames(folder, rk.load(folder))


def test_a_torn_table_is_rebuilt_never_trusted(tmp_path):
    folder = big_run(30, tmp_path / "run", tasks=4)
    open_run(folder)
    parquet = next((folder / ".rollkit" / "traces.jsonl" / "rollouts").glob("*.parquet"))
    parquet.write_bytes(parquet.read_bytes()[: parquet.stat().st_size // 2])  # cut short
    _same_frames(folder, rk.load(folder))


def test_a_torn_last_line_waits_and_an_appended_tail_gets_its_own_part(tmp_path):
    folder = big_run(20, tmp_path / "run", tasks=4)
    source = folder / "traces.jsonl"
    more = big_run(5, tmp_path / "more", tasks=4, seed=1) / "traces.jsonl"
    extra = more.read_bytes().replace(b'"id":"0000000', b'"id":"fff0000')
    with open(source, "ab") as f:
        f.write(extra[:100])  # a write cut short: not a trace yet
    assert len(open_run(folder)) == 20
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rk.load warns about the torn line
        _same_frames(folder, rk.load(folder))
    with open(source, "ab") as f:
        f.write(extra[100:])
    run = open_run(folder)
    assert len(run) == 25
    assert len(list((folder / ".rollkit" / "traces.jsonl").glob("part-*.json"))) == 2
    _same_frames(folder, rk.load(folder))


def test_parts_are_bounded_by_bytes_and_only_small_neighbours_are_merged(tmp_path, monkeypatch):
    # A build cuts a part at _BATCH lines or _PART_BYTES of source bytes
    # (long rollouts: bytes first); a run that grew often gets its small
    # parts merged on open, never past those bounds, and reads the same.
    from rollkit.tables import columns

    folder = big_run(12, tmp_path / "run", turns=3, tasks=3)
    source = folder / "traces.jsonl"
    line = len(source.read_bytes().splitlines(keepends=True)[0])
    monkeypatch.setattr(columns, "_PART_BYTES", 3 * line)  # about three of these rollouts a part
    cache = folder / ".rollkit" / "traces.jsonl"

    def parts() -> list[int]:
        return sorted(json.loads(p.read_text())["lines"] for p in cache.glob("part-*.json"))

    run = open_run(folder)
    assert len(run) == 12 and len(parts()) >= 4 and max(parts()) <= 4
    _same_frames(folder, rk.load(folder))
    more = big_run(6, tmp_path / "more", turns=1, tasks=3, seed=2) / "traces.jsonl"
    monkeypatch.setattr(columns, "_PART_BYTES", 1 << 30)
    for i, tail in enumerate(more.read_bytes().splitlines(keepends=True)):  # six appends: six one-line parts
        with open(source, "ab") as f:
            f.write(tail.replace(b'"id":"0000000', f'"id":"fff{i:04d}'.encode()))
        open_run(folder)
    before = parts()
    monkeypatch.setattr(columns, "_MAX_PARTS", 5)
    monkeypatch.setattr(columns, "_BATCH", 4)
    assert len(open_run(folder)) == 18
    after = parts()
    assert before.count(1) == 6 and len(after) < len(before) and max(after) <= 4 and sum(after) == 18
    _same_frames(folder, rk.load(folder))


def test_a_resumed_run_brings_its_tables_up_to_date(tmp_path):
    tasks = arithmetic_tasks(3)
    rk.evaluate(demo_agent(), tasks, out=tmp_path, progress=False)
    assert len(rk.load_run(tmp_path).rollouts()) == 3
    rk.evaluate(demo_agent(), tasks, repeats=2, out=tmp_path, resume=True, progress=False)
    loaded = rk.load_run(tmp_path)
    assert loaded.traces is not None and len(loaded) == 6
    pd.testing.assert_frame_equal(loaded.rollouts(), frames.rollouts(rk.load(tmp_path)))
    _same_frames(tmp_path, rk.load(tmp_path))


def test_sql_agrees_with_a_scan_across_two_runs(tmp_path):
    a = big_run(200, tmp_path / "a", tasks=7)
    b = big_run(100, tmp_path / "b", tasks=7, seed=3)
    traces = rk.load(a) + rk.load(b)
    run = open_run([a, b])
    got = run.sql("select task_key, avg(reward) as mean, count(*) as n from rollouts group by 1 order by 1")
    expected: dict[str, list[float]] = {}
    for trace in traces:
        expected.setdefault(trace.task.key, []).append(trace.reward)
    assert list(got["task_key"]) == sorted(expected)
    assert list(got["n"]) == [len(expected[k]) for k in sorted(expected)]
    assert list(got["mean"]) == pytest.approx([sum(expected[k]) / len(expected[k]) for k in sorted(expected)])
    assert run.sql("select count(*) as n from messages where role = 'tool'")["n"][0] == 0
    with pytest.raises(ValueError, match="sql takes a query as text"):
        run.sql("  ")


def test_search_agrees_with_a_scan_of_every_message(tmp_path):
    folder = big_run(300, tmp_path / "run", turns=3, tasks=40)
    traces = rk.load(folder)
    run = open_run(folder)

    def texts(trace: rk.Trace) -> list[str]:
        out = []
        for m in trace.messages:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in getattr(m, "tool_calls", None) or [])
            out += [m.content or "", calls]
        return out

    for phrase in ("cleo HAS", "Fay has", '"expression": "1'):
        hits = run.search(phrase)
        assert hits.ids == [t.id for t in traces if any(phrase.lower() in x.lower() for x in texts(t))], phrase
        assert len(hits) > 0
    pattern = r"has \d+ (pens|coins)"
    hits = run.search(re=pattern)
    assert hits.ids == [t.id for t in traces if any(re.search(pattern, x, re.I) for x in texts(t))]
    tool_hits = run.search("calculator(")  # a tool call's name and arguments are searched
    assert len(tool_hits) == len(traces)
    with pytest.raises(ValueError, match="search takes a phrase or re=..., one of the two"):
        run.search()
    with pytest.raises(ValueError, match="is not a regular expression"):
        run.search(re="(")


def test_highlighted_hits_are_escaped():
    pattern = re.compile(r"<b>|x", re.I)
    assert highlight("a <b> & X <script>", pattern) == \
        "a <mark>&lt;b&gt;</mark> &amp; <mark>X</mark> &lt;script&gt;"


async def test_the_browser_pages_filters_and_highlights_escaped(tmp_path):
    task = arithmetic_tasks(1)[0]
    trace = await demo_agent().run(task)
    trace.messages[1].content = "<img src=x onerror=alert(1)> needle"
    path = rk.save([trace, *rk.load(big_run(120, tmp_path / "run", tasks=9))], tmp_path / "t.jsonl")
    run = open_run(path)
    browser = rk.notebook.TraceBrowser(path, page_size=25)
    assert isinstance(browser, RunBrowser)
    assert "<b>121</b> of 121 rollouts · page 1 of 5" in browser.status.value
    browser.where("reward = 0")
    zero = run.sql("select count(*) as n from rollouts where reward = 0")["n"][0]
    assert f"<b>{zero}</b> of 121" in browser.status.value
    browser.where("")
    browser.sort("total_tokens", descending=True)
    assert browser.table.options[0][1] == 0  # the real trace has the most tokens
    hits = run.search("needle")
    assert hits.ids == [trace.id]
    found = rk.notebook.TraceBrowser(hits)
    assert isinstance(found, RunBrowser)
    found.select(0)
    assert "<mark>needle</mark>" in found.matches.value
    assert "&lt;img src=x onerror=alert(1)&gt;" in found.matches.value and "<img" not in found.matches.value


def test_bad_input_names_what_to_pass(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace file at"):
        open_run(tmp_path / "missing.jsonl")
    with pytest.raises(TypeError, match="open_run takes a trace file or run folder path"):
        open_run(42)  # type: ignore[arg-type]
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "x", "task": {"type": "T", "key": "k"}}) + "\n" + '{"not": "a trace"}\n')
    with pytest.raises(rk.TraceFileError, match="line 2 is not a rollkit trace"):
        open_run(path)


def test_rollkit_sql_answers_from_a_shell_and_names_a_bad_query(tmp_path):
    import os
    import subprocess
    import sys

    folder = big_run(40, tmp_path / "run", tasks=3)
    env = {**os.environ, "PYTHONPATH": str(Path(rk.__file__).parent.parent)}
    done = subprocess.run([sys.executable, "-m", "rollkit", "sql", str(folder), "--csv",
                           "select task_key, count(*) as n from rollouts group by 1 order by 1"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    counts: dict[str, int] = {}
    for trace in rk.load(folder):
        counts[trace.task.key] = counts.get(trace.task.key, 0) + 1
    assert done.stdout.strip().splitlines() == ["task_key,n", *(f"{k},{counts[k]}" for k in sorted(counts))]
    bad = subprocess.run([sys.executable, "-m", "rollkit", "sql", str(folder), "select nope from rollouts"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1 and "the query failed" in bad.stderr and '"nope" not found' in bad.stderr


def _rewritten_trace() -> rk.Trace:
    """A schema 2 trace with what a program's run may leave: a reply written
    out (its request was rewritten, so the reply is not the next message),
    one left out (the next message), reasoning, cache tokens, a failed call
    with a mended time, and a turn whose provider reported no input tokens."""
    from rollkit.core.messages import ToolCall
    from rollkit.core.trace import ErrorInfo, ModelCall, Span, TaskRef

    first = rk.AssistantMessage(content="let me add", tool_calls=[ToolCall(id="c1", name="calc", arguments='{"x": 1}')],
                                reasoning="add them")
    final = rk.AssistantMessage(content="3", reasoning="sum done")
    messages = [rk.SystemMessage(content="be brief"), rk.UserMessage(content="1+2?"),
                rk.AssistantMessage(content="calc(x=1)"), rk.UserMessage(content="go on"), final]
    calls = [
        ModelCall(index=0, segment=0, start=10.0, end=11.5, committed=True, reply=first, request_messages=2,
                  request=[0, 2], usage=rk.Usage(input_tokens=30, output_tokens=5, cache_read_tokens=20,
                                                 cache_write_tokens=4),
                  new_input_tokens=30, finish_reason="tool_calls", cum_turns=1, cum_input_tokens=30,
                  cum_output_tokens=5, cum_total_tokens=35, cum_agent_time=1.5),
        ModelCall(index=1, segment=0, start=12.0, end=12.0, request_messages=4,
                  error=ErrorInfo(type="ProviderError", boundary="provider", message="503 busy"),
                  timing_issue="the source ends this call 0.500 s before it starts; latency set to 0"),
        ModelCall(index=2, segment=0, start=13.0, end=14.0, committed=True, reply=final, request_messages=4,
                  usage=rk.Usage(output_tokens=2), finish_reason="stop", cum_turns=2, cum_input_tokens=30,
                  cum_output_tokens=7, cum_total_tokens=37, cum_agent_time=2.5),
    ]
    return rk.Trace(task=TaskRef(type="Sum", key="sum-1"), messages=messages, model_calls=calls,
                    replaced_messages=[rk.AssistantMessage(content="let me add")], rewards={"correct": 1.0},
                    completed=True, ok=True, stop_condition="max_turns",
                    phases={"agent": Span(name="agent", start=10.0, end=14.0),
                            "scoring": Span(name="scoring", start=14.0, end=14.5)})


def test_schema_2_lines_and_an_old_schema_1_line_give_the_frames_of_their_traces(tmp_path):
    trace = _rewritten_trace()
    path = rk.save([trace], tmp_path / "t.jsonl")
    written = json.loads(path.read_text())
    assert written["schema_version"] == SCHEMA_VERSION and "replaced_messages" in written
    assert ["reply" in c for c in written["model_calls"]] == [True, True, False]  # the last is the next message
    # A line of a rollkit before schema 2: no version, no replies, every count reported.
    old = json.loads(trace.model_dump_json())
    del old["schema_version"], old["replaced_messages"]
    old["id"] = "old"
    for call in old["model_calls"]:
        for field in ("reply", "request_messages", "request", "timing_issue"):
            call.pop(field, None)
        call["usage"] = {"input_tokens": 9, "output_tokens": 1}
    with open(path, "a") as f:
        f.write(json.dumps(old) + "\n")
    _same_frames(path, rk.load(path))
    run = open_run(path)
    calls = run.calls()
    assert _values(calls["reply"]) == ["let me add", None, "3", None, None, None]
    assert _values(calls["reasoning"]) == ["add them", None, "sum done", None, None, None]
    assert _values(calls["tool_calls"]) == ["calc", None, "", None, None, None]
    assert _values(calls["cache_read_tokens"]) == [20, None, None, None, None, None]
    assert str(calls["input_tokens"].dtype) == "Int64"
    assert _values(calls["input_tokens"]) == [30, None, None, 9, 9, 9]
    assert _values(calls["request_messages"]) == [2, 4, 4, None, None, None]
    assert calls["timing_issue"][1].startswith("the source ends this call")
    rollouts = run.rollouts()
    assert list(rollouts["outcome"]) == ["stopped: max_turns"] * 2
    assert _values(rollouts["input_tokens"]) == [None, 30]  # NA: a turn did not report it; the old line's totals
    assert _values(rollouts["output_tokens"]) == [7, 7]


def _values(column: pd.Series) -> list[object]:
    """A column's values, missing (NaN, NA, None) as None."""
    return [None if pd.isna(v) else v for v in column]


def test_tables_of_an_older_layout_are_rebuilt(tmp_path):
    import pyarrow.parquet as pq

    folder = big_run(10, tmp_path / "run", tasks=2)
    open_run(folder)
    # What the first layout wrote: no outcome column, version "1".
    parquet = next((folder / ".rollkit" / "traces.jsonl" / "rollouts").glob("*.parquet"))
    table = pq.read_table(parquet)
    old = table.drop_columns(["outcome"]).replace_schema_metadata({**{k.decode(): v.decode() for k, v in
                                                                     table.schema.metadata.items()}, "rollkit.v": "1"})
    pq.write_table(old, parquet)
    _same_frames(folder, rk.load(folder))
    assert "outcome" in pq.read_table(parquet).column_names
