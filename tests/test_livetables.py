"""Run tables written as the run goes (rollkit.tables.livetables): a run that
writes traces.jsonl (rk.evaluate, rk.ab_test) leaves its rollouts table
complete (the other five are built when first asked for), so its first
open builds nothing, and they are equal, table for
table and column for column, to a fresh build of the finished file: after
a plain run, a resumed one, one cut short by an exception, an interrupt
or a kill, and one a reader opened while it ran."""

from __future__ import annotations

import collections
import json
import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent, support_agent, support_tasks, toy_customer
from rollkit.examples.bigrun import big_run
from rollkit.tables import columns, livetables
from rollkit.tables.columns import TABLES, TableSet
from rollkit.tables.lazyrun import open_run
from rollkit.core.events import RunSink
from rollkit.tables.livetables import TraceLog


@pytest.fixture
def small_parts(monkeypatch):
    """Parts of 4 lines, and merged past 3 parts: a small run writes many and merges them."""
    monkeypatch.setattr(livetables, "_LINES", 4)
    monkeypatch.setattr(columns, "_MAX_PARTS", 3)


def _markers(source: Path) -> list[dict]:
    columns.settle(source)  # a run returns before its last part is written; a reader here waits for it
    cache = source.parent / columns.CACHE_DIR / source.name
    return [json.loads(p.read_text()) for p in sorted(cache.glob("part-*.json"))]


def _cache_files(source: Path) -> dict[str, int]:
    cache = source.parent / columns.CACHE_DIR / source.name
    return {str(p): p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}


def _read(tables: TableSet, table: str) -> pa.Table:
    parts = [pq.read_table(f).replace_schema_metadata(None) for f in tables.files[table]]
    return pa.concat_tables(parts, promote_options="permissive")


def _same_as_a_fresh_build(source: Path, fresh: Path) -> None:
    """The tables beside `source` equal, row for row and column for column,
    the tables a build of the whole file makes in another folder."""
    fresh.mkdir()
    live, built = TableSet(source, progress=False), TableSet(source, cache=fresh, progress=False)
    for table in TABLES:
        a, b = _read(live, table), _read(built, table)
        assert a.column_names == b.column_names, table
        assert a.num_rows == b.num_rows > 0, table
        for name in a.column_names:
            assert a.column(name).equals(b.column(name)), (table, name, a.column(name).type, b.column(name).type)


def _complete_and_fresh(source: Path, fresh: Path) -> None:
    """The tables the run wrote cover every byte of its file, opening it
    rewrites nothing, and they equal a fresh build."""
    parts = _markers(source)
    assert [p["start"] for p in parts] == [0, *(p["end"] for p in parts[:-1])]
    assert parts[-1]["end"] == source.stat().st_size
    assert sum(p["lines"] for p in parts) == len(source.read_bytes().splitlines())
    written = _cache_files(source)
    open_run(source)
    assert _cache_files(source) == written  # the first open built nothing
    _same_as_a_fresh_build(source, fresh)


def test_a_run_writes_its_tables_as_it_goes_and_its_first_open_builds_nothing(tmp_path, small_parts):
    rk.evaluate(demo_agent(), arithmetic_tasks(9), repeats=2, concurrency=3, out=tmp_path / "run", progress=False)
    source = tmp_path / "run" / "traces.jsonl"
    assert len(_markers(source)) <= 3  # 18 lines in parts of 4, merged past 3 parts
    _complete_and_fresh(source, tmp_path / "fresh")


def test_a_run_with_a_model_as_the_user_writes_the_tables_of_its_traces(tmp_path, small_parts):
    rk.evaluate(support_agent(), support_tasks(5), user=toy_customer(), out=tmp_path / "run", progress=False)
    _complete_and_fresh(tmp_path / "run" / "traces.jsonl", tmp_path / "fresh")


def test_a_resumed_run_continues_its_tables(tmp_path, small_parts):
    tasks = arithmetic_tasks(5)
    rk.evaluate(demo_agent(), tasks, out=tmp_path / "run", progress=False)
    first = _markers(tmp_path / "run" / "traces.jsonl")
    rk.evaluate(demo_agent(), tasks, repeats=3, out=tmp_path / "run", resume=True, progress=False)
    source = tmp_path / "run" / "traces.jsonl"
    assert _markers(source)[0]["start"] == 0 and first[0]["lines"] == 4  # the first run's parts were kept
    _complete_and_fresh(source, tmp_path / "fresh")


class _Breaks(RunSink):
    """A watcher of the run (as a monitor is) that opens the live run after
    `peek` traces, as a monitor or a notebook reading it would, and raises
    after `fail` traces: the run stops with that exception."""

    def __init__(self, folder: Path, peek: int, fail: int) -> None:
        self.folder, self.peek, self.fail = folder, peek, fail
        self.count = 0
        self.seen: int | None = None

    def finished(self, trace: rk.Trace) -> None:
        self.count += 1
        if self.count == self.peek:
            self.seen = len(open_run(self.folder))  # builds the lines the writer holds in memory
        if self.count == self.fail:
            raise RuntimeError("the watcher broke")


async def test_a_run_cut_short_by_an_exception_and_read_while_it_ran_keeps_exact_tables(tmp_path, small_parts):
    folder = tmp_path / "run"
    pending = rk.evaluate_async(demo_agent(), arithmetic_tasks(12), concurrency=1, out=folder, progress=False)
    watcher = _Breaks(folder, peek=6, fail=11)
    pending.attach(watcher)
    with pytest.raises(RuntimeError, match="the watcher broke"):
        await pending
    source = folder / "traces.jsonl"
    assert watcher.seen == 6
    assert sum(p["lines"] for p in _markers(source)) == 11  # the last part was written as the run stopped
    _complete_and_fresh(source, tmp_path / "fresh")
    await rk.evaluate_async(demo_agent(), arithmetic_tasks(12), out=folder, resume=True, progress=False)
    _complete_and_fresh(source, tmp_path / "fresh-after-resume")


def test_lines_handed_over_build_the_parts_a_build_of_the_file_makes(tmp_path, monkeypatch):
    # A single-turn rollout, a part of its own that ends before the file's
    # first 4 KB (a part's head hash is of what it covers: it stays valid as
    # the file grows), then twenty-turn rollouts with tool calls in parts of
    # 3; a reader builds the tail twice while the log holds lines (the log
    # adds only what the reader missed).
    monkeypatch.setattr(livetables, "_LINES", 1)
    lines = [(big_run(1, tmp_path / "small") / "traces.jsonl").read_bytes(),
             *(big_run(9, tmp_path / "big", turns=20, tasks=4, seed=1) / "traces.jsonl").read_bytes()
             .splitlines(keepends=True)]
    assert len(lines[0]) < 4096
    source = tmp_path / "run" / "traces.jsonl"
    source.parent.mkdir()
    with TraceLog(source) as log:
        log.write(lines[0])
        monkeypatch.setattr(livetables, "_LINES", 3)
        for i, line in enumerate(lines[1:], start=1):
            log.write(line)
            if i in (4, 7):
                log.wait()  # the batches handed over are built (by the log's thread) before the reader looks
                assert len(open_run(source)) == i + 1
    # Parts: the first line; 3 lines; the reader's line 4; the log's 5-6 (not
    # 4 again); the reader's line 7; the log's 8-9.
    assert [p["lines"] for p in _markers(source)] == [1, 3, 1, 2, 1, 2]
    _complete_and_fresh(source, tmp_path / "fresh")


def test_a_slow_run_writes_a_part_when_its_oldest_line_has_waited_long_enough(tmp_path, monkeypatch):
    monkeypatch.setattr(livetables, "_SECONDS", 0.0)  # every line has waited long enough by the next check
    lines = (big_run(5, tmp_path / "big", tasks=2) / "traces.jsonl").read_bytes().splitlines(keepends=True)
    source = tmp_path / "run" / "traces.jsonl"
    source.parent.mkdir()
    with TraceLog(source) as log:
        for done, line in enumerate(lines, start=1):
            log.write(line)
            log.wait()
            assert sum(p["lines"] for p in _markers(source)) == done  # handed over before the next line
    _complete_and_fresh(source, tmp_path / "fresh")


def test_an_ab_test_writes_the_tables_of_both_arms(tmp_path, small_parts):
    rk.ab_test(demo_agent(), demo_agent(), arithmetic_tasks(6), out=tmp_path / "ab", stop=False)
    for arm in ("a", "b"):
        _complete_and_fresh(tmp_path / "ab" / f"{arm}.jsonl", tmp_path / f"fresh-{arm}")


def test_tables_that_cannot_be_written_leave_the_run_whole_and_are_built_on_open(tmp_path, small_parts, monkeypatch,
                                                                                   caplog):
    def disk_full(self, data: bytes, start: int, engine: object = None) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TableSet, "add", disk_full)
    with caplog.at_level(logging.WARNING, logger="rollkit"):
        rk.evaluate(demo_agent(), arithmetic_tasks(6), out=tmp_path / "run", progress=False)
        columns.settle()  # the last part fails after the run returned
    source = tmp_path / "run" / "traces.jsonl"
    warned = [r.getMessage() for r in caplog.records if "not written as the run goes" in r.getMessage()]
    assert warned == [f"the tables of {source} are not written as the run goes (OSError: [Errno 28] No space left "
                      "on device); opening the run builds them"]
    assert len(source.read_bytes().splitlines()) == 6 and _markers(source) == []
    monkeypatch.undo()
    assert len(open_run(tmp_path / "run")) == 6
    _same_as_a_fresh_build(source, tmp_path / "fresh")


def test_a_run_writes_its_rollouts_table_and_the_others_are_built_when_first_asked_for(tmp_path, small_parts):
    # The writer's share of a rollout's time is its rollouts rows only; the
    # other five tables of its parts wait for the first frame, SQL or search
    # that needs them, and then equal a fresh build.
    source = big_run(10, tmp_path / "src", turns=2, tasks=3) / "traces.jsonl"
    target = tmp_path / "run" / "traces.jsonl"
    target.parent.mkdir()
    with TraceLog(target) as log:
        for line in source.read_bytes().splitlines(keepends=True):
            log.write(line)
    assert {tuple(p["tables"]) for p in _markers(target)} == {("rollouts",)}
    assert len(open_run(target).turns()) == 20  # each alone
    assert {tuple(p["tables"]) for p in _markers(target)} == {("rollouts", "turns")}
    assert len(open_run(target).calls()) == 20
    assert {tuple(p["tables"]) for p in _markers(target)} == {("rollouts", "turns", "calls")}
    assert len(open_run(target).phases()) == 50 and len(open_run(target).signals()) == 30
    assert {tuple(p["tables"]) for p in _markers(target)} == {("rollouts", "turns", "calls", "phases", "signals")}
    assert len(open_run(target).messages()) > 20
    assert {tuple(p["tables"]) for p in _markers(target)} == {TABLES}
    _same_as_a_fresh_build(target, tmp_path / "fresh")


def test_a_run_builds_its_parts_off_the_event_loop_and_never_imports_pandas(tmp_path):
    # A fresh interpreter, so what is imported is the run's own doing: parts
    # of 50 lines, every one built by the log's thread (never the loop's),
    # and pandas never imported (pyarrow imports it on any pa.array, and its
    # objects slow every later collection of the run's heap).
    code = (
        "import sys, threading, rollkit as rk\n"
        "from rollkit.examples import arithmetic_tasks, demo_agent\n"
        "from rollkit.tables import columns, livetables\n"
        "livetables._LINES = 50\n"
        "threads, add = [], columns.TableSet.add\n"
        "def spy(self, *args):\n"
        "    threads.append(threading.current_thread().name)\n"
        "    return add(self, *args)\n"
        "columns.TableSet.add = spy\n"
        f"rk.evaluate(demo_agent(), arithmetic_tasks(120), out={str(tmp_path / 'run')!r}, progress=False)\n"
        "columns.settle()\n"  # the last part is built after the run returned
        "print(sorted(set(threads)), len(threads), 'pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "['rollkit-tables traces.jsonl'] 3 False"
    assert sum(p["lines"] for p in _markers(tmp_path / "run" / "traces.jsonl")) == 120
    assert {p["build"] for p in _markers(tmp_path / "run" / "traces.jsonl")} == {"native"}


def test_a_run_returns_before_its_last_part_is_built_and_an_open_here_waits_for_it(tmp_path, monkeypatch):
    # The run's end hands its last part to the log's thread and returns: the
    # part is held back here until the open, so a run whose end waited for
    # it would find it written (after the hold times out) and fail below.
    release, threads = threading.Event(), []
    add, settle = TableSet.add, columns.settle

    def held(self, *args):
        threads.append(threading.current_thread().name)
        release.wait(60)
        return add(self, *args)

    def release_then_settle(source=None):
        release.set()
        settle(source)

    monkeypatch.setattr(TableSet, "add", held)
    monkeypatch.setattr(columns, "settle", release_then_settle)
    rk.evaluate(demo_agent(), arithmetic_tasks(7), out=tmp_path / "run", progress=False)
    source = tmp_path / "run" / "traces.jsonl"
    assert not release.is_set() and not list((tmp_path / "run" / columns.CACHE_DIR).rglob("part-*"))
    assert len(open_run(tmp_path / "run")) == 7  # waited for the thread, which wrote the part
    assert threads == ["rollkit-tables traces.jsonl"]
    _complete_and_fresh(source, tmp_path / "fresh")


def test_a_folder_removed_right_after_its_run_is_left_removed_without_a_warning(tmp_path, monkeypatch, caplog):
    # A temporary folder removed as soon as rk.evaluate returns: its last part,
    # still being built, finds the folder gone; it neither warns nor makes it again.
    release = threading.Event()
    add = TableSet.add

    def held(self, *args):
        release.wait(60)
        return add(self, *args)

    monkeypatch.setattr(TableSet, "add", held)
    with caplog.at_level(logging.WARNING, logger="rollkit"):
        rk.evaluate(demo_agent(), arithmetic_tasks(5), out=tmp_path / "run", progress=False)
        shutil.rmtree(tmp_path / "run")
        release.set()
        columns.settle()
    assert [r.getMessage() for r in caplog.records] == []
    assert list(tmp_path.iterdir()) == []


def test_an_interpreter_that_exits_right_after_a_run_writes_its_last_part_first(tmp_path):
    # The last part is held back until the interpreter is exiting (an exit
    # hook registered after the run's runs first): it is built then, whole.
    code = (
        "import atexit, threading, rollkit as rk\n"
        "from rollkit.examples import arithmetic_tasks, demo_agent\n"
        "from rollkit.tables.columns import TableSet\n"
        "release, add = threading.Event(), TableSet.add\n"
        "TableSet.add = lambda self, *args: (release.wait(60), add(self, *args))[1]\n"
        f"rk.evaluate(demo_agent(), arithmetic_tasks(30), out={str(tmp_path / 'run')!r}, progress=False)\n"
        "atexit.register(release.set)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    source = tmp_path / "run" / "traces.jsonl"
    assert [(p["start"], p["end"], p["lines"]) for p in _markers(source)] == [(0, source.stat().st_size, 30)]


def test_a_folder_run_serializes_each_trace_once(tmp_path, monkeypatch):
    # A trace's JSON is its largest cost in a run with a folder: made once,
    # for its line, and never again for the live file, the tables or a watcher.
    made = collections.Counter()
    dump_json, dump, json_line = rk.Trace.model_dump_json, rk.Trace.model_dump, rk.Trace.json_line

    def counted_json(self, **options):
        made["json", self.id] += 1
        return dump_json(self, **options)

    def counted_line(self):
        made["json", self.id] += 1
        return json_line(self)

    def counted(self, **options):
        made["dict", self.id] += 1
        return dump(self, **options)

    monkeypatch.setattr(rk.Trace, "model_dump_json", counted_json)
    monkeypatch.setattr(rk.Trace, "model_dump", counted)
    monkeypatch.setattr(rk.Trace, "json_line", counted_line)
    result = rk.evaluate(demo_agent(), arithmetic_tasks(6), repeats=2, out=tmp_path / "run", progress=False)
    assert len(result.traces) == 12
    assert made == collections.Counter({("json", t.id): 1 for t in result.traces})
    lines = (tmp_path / "run" / "traces.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [t.id for t in result.traces]
