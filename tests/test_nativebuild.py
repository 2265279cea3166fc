"""The native build (DuckDB parses the JSON lines) against the Python build
(the reference): the same six tables, column types and values, row for row,
for every example run and every imported fixture; a part DuckDB must not
build (mixed-type values, a line that is not a trace) is built in Python and
still reads the same, or names the bad line; the first open's progress bar."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from contextlib import suppress
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import rollkit as rk
from rollkit.examples import (arithmetic_tasks, chain_agent, chain_tasks, demo_agent, support_agent, support_tasks,
                              toy_customer)
from rollkit.examples.bigrun import big_run
from rollkit.tables import columns
from rollkit.tables.columns import TABLES, TableSet, json_source
from rollkit.tables.lazyrun import open_run

from helpers.sample_traces import assorted_traces
from test_columns import _rewritten_trace

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _native_at_any_size(monkeypatch):
    monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", 0)  # these files are small: built natively all the same


def _build(source: Path, cache: Path, native: bool, monkeypatch: pytest.MonkeyPatch,
           order: tuple[str, ...] = TABLES) -> tuple[dict, list[str]]:
    """The tables of `source`, asked for in `order` (each built alone when
    first asked for, from the fields it reads)."""
    monkeypatch.setattr(columns, "_NATIVE", native)
    cache.mkdir(parents=True)
    tables = TableSet(source, cache=cache, progress=False)
    read = {table: [pq.read_table(f) for f in tables.files[table]] for table in order}
    builds = [json.loads((cache / f"{p['name']}.json").read_text())["build"] for p in tables.parts]
    return read, builds


def _same_tables(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build: str = "native",
                 orders: tuple[tuple[str, ...], ...] = (TABLES,)) -> None:
    """Both builds of `source`, part by part: the same schema (names, order,
    Arrow types, the store's metadata) and the same values; the native
    build's parts say which built them (`build`); the native tables asked
    for in each of `orders`."""
    python, python_builds = _build(source, tmp_path / "python", False, monkeypatch)
    assert set(python_builds) == {"python"}
    for k, order in enumerate(orders):
        native, native_builds = _build(source, tmp_path / f"native-{k}", True, monkeypatch, order)
        assert set(native_builds) == {build}, source
        for table in TABLES:
            assert len(python[table]) == len(native[table]) > 0
            for a, b in zip(python[table], native[table]):
                assert a.schema == b.schema, (source.name, table, a.schema, b.schema)
                assert a.schema.metadata == b.schema.metadata
                for name in a.column_names:
                    assert a.column(name).equals(b.column(name)), (source.name, table, name, order)


async def test_example_runs_build_the_same_tables_natively(tmp_path, monkeypatch):
    kinds = await assorted_traces()  # ok, wrong, stopped, failed, raised, timed out, aborted
    arithmetic = await rk.evaluate_async(demo_agent(), arithmetic_tasks(4), repeats=2, progress=False)
    support = await rk.evaluate_async(support_agent(), support_tasks(3), user=toy_customer(), progress=False)
    chain = await rk.evaluate_async(chain_agent(slip=0.3), chain_tasks(4, steps=4), progress=False)
    runs = {
        "assorted": list(kinds.values()), "arithmetic": arithmetic.traces, "support": support.traces,
        "chain": chain.traces, "rewritten": [_rewritten_trace()],
        "failed-alone": [kinds["failed"], kinds["aborted"]],  # no segments, no scoring: int times, marker rows
        "mixed": [*kinds.values(), *arithmetic.traces, *support.traces, *chain.traces, _rewritten_trace()],
    }
    calls_first = ("rollouts", "calls", "turns", "phases", "signals", "messages")
    messages_first = ("rollouts", "messages", "turns", "phases", "signals", "calls")
    for name, traces in runs.items():
        _same_tables(rk.save(traces, tmp_path / name / "t.jsonl"), tmp_path / name, monkeypatch,
                     orders=(TABLES, calls_first, messages_first))
    for turns in (1, 3):
        folder = big_run(60, tmp_path / f"big{turns}" / "run", turns=turns, tasks=7)
        _same_tables(folder / "traces.jsonl", tmp_path / f"big{turns}", monkeypatch)


def test_imported_runs_and_every_fixture_build_the_same_tables_natively(tmp_path, monkeypatch):
    from rollkit.examples import peers

    sources = [peers.inspect_log(tmp_path / "inspect"), peers.verifiers_run(tmp_path / "verifiers")]
    copied = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, copied)  # the rollkit copy is written beside the file: not into the repository
    sources += [p for p in sorted(copied.rglob("*")) if p.is_file() and p.suffix != ".md"
                and p.name != "metadata.json" and ".rollkit" not in p.parts]
    assert len(sources) >= 10, sources  # the two made here and every fixture (the corpus grows)
    built = 0
    for k, path in enumerate(sources):
        try:
            source = json_source(path)
        except rk.TraceFileError:  # a log its own tool refuses (test_fidelity checks that rollkit does too)
            continue
        if source.stat().st_size == 0:  # a log of no samples: no tables to compare
            continue
        _same_tables(source, tmp_path / f"built-{k}", monkeypatch)
        built += 1
    assert built >= 10, built


def test_values_whose_type_python_infers_per_column_are_read_alike_or_built_in_python(tmp_path, monkeypatch):
    # The batch ids, limits and `ok` take the type Python infers from a
    # part's values: ints and floats mixed read as floats, all missing as a
    # null (or number) column; a str here and an int there only Python
    # reads (as text), so that part is built in Python, the others natively.
    monkeypatch.setattr(columns, "_BATCH", 4)
    lines = (tmp_path / "src.jsonl")
    big_run(12, tmp_path / "run", turns=2, tasks=3)
    raw = [json.loads(x) for x in (tmp_path / "run" / "traces.jsonl").read_text().splitlines()]
    for i, t in enumerate(raw[:4]):  # part 1: repeat an int or a float, limits all missing, ok missing
        t["info"]["repeat"] = float(i) + 0.5 if i % 2 else i
        t["limits"] = {}
        t["ok"] = None
    for i, t in enumerate(raw[4:8]):  # part 2: example_id a str or an int: Python's text fallback
        t["info"]["example_id"] = i if i % 2 else str(i)
    for t in raw[8:]:  # part 3: no info at all, a float limit beside ints
        t["info"] = {}
        t["limits"]["max_input_tokens"] = 100.0
    lines.write_text("".join(json.dumps(t) + "\n" for t in raw))
    monkeypatch.setattr(columns, "_NATIVE", True)
    TableSet(lines, cache=tmp_path / "probe", progress=False)
    builds = [json.loads(p.read_text())["build"] for p in sorted((tmp_path / "probe").glob("part-*.json"))]
    assert builds == ["native", "python", "native"]
    python, _ = _build(lines, tmp_path / "python", False, monkeypatch)
    native, _ = _build(lines, tmp_path / "native", True, monkeypatch)
    for table in TABLES:
        for a, b in zip(python[table], native[table]):
            assert a.equals(b), table
    assert str(native["turns"][0].schema.field("max_turns").type) == "double"
    assert str(native["rollouts"][0].schema.field("repeat").type) == "double"
    assert str(native["rollouts"][0].schema.field("ok").type) == "null"
    assert str(native["rollouts"][1].schema.field("example_id").type) == "large_string"


# `info.source` per line (None: left out): rk.tasks_from's provenance (an
# inspect sample id an int or text, reasoning-gym's dataset), what a census
# keeps (no framework), and values the columns leave missing.
_SOURCES = [
    {"framework": "inspect-ai", "version": "0.3.1", "task": "qa", "sample_id": 3, "source": "/x.py@qa"},
    {"framework": "inspect-ai", "version": "0.3.1", "task": "qa", "sample_id": "tool-add"},
    {"framework": "reasoning-gym", "version": "0.1", "dataset": "leg_counting", "seed": 5, "index": 2,
     "sample_id": "5:2"},
    {"eval.task_version": 2, "task": "kept by a census"}, None, {},
    {"framework": 7, "task": "t"}, {"framework": "f", "task": None, "dataset": 12, "version": 2},
    {"framework": "f", "sample_id": True, "version": 1.5, "task": {"name": "t"}},
    {"framework": "f", "sample_id": 2**63}, {"framework": "f", "sample_id": -2**63, "task": ["t"]},
]


def test_where_a_task_came_from_builds_the_same_source_columns_natively(tmp_path, monkeypatch):
    folder = big_run(len(_SOURCES), tmp_path / "run", tasks=3)
    source = folder / "traces.jsonl"
    traces = [json.loads(x) for x in source.read_text().splitlines()]
    for t, provenance in zip(traces, _SOURCES):
        if provenance is not None:
            t["info"]["source"] = provenance
    source.write_text("".join(json.dumps(t) + "\n" for t in traces))
    _same_tables(source, tmp_path, monkeypatch)
    rollouts = open_run(source).rollouts()
    got = list(zip(rollouts["source_framework"], rollouts["source_version"], rollouts["source_task"],
                   rollouts["source_sample"]))
    assert [tuple(None if v is None or v != v else v for v in row) for row in got] == [
        ("inspect-ai", "0.3.1", "qa", "3"), ("inspect-ai", "0.3.1", "qa", "tool-add"),
        ("reasoning-gym", "0.1", "leg_counting", "5:2"), *[(None,) * 4] * 4, ("f", "2", "12", None),
        ("f", None, None, None), ("f", None, None, None), ("f", None, None, str(-2**63))]


@pytest.mark.parametrize("written", ['"source": "a web page"', '"source": ["a", "b"]'])
def test_a_source_that_is_no_object_is_read_by_the_python_build(tmp_path, monkeypatch, written):
    folder = big_run(4, tmp_path / "run", tasks=2)
    source = folder / "traces.jsonl"
    lines = source.read_text().splitlines()
    lines[1] = lines[1].replace('"info":{', '"info":{' + written + ",", 1)
    assert written in lines[1]
    source.write_text("\n".join(lines) + "\n")
    python, _ = _build(source, tmp_path / "python", False, monkeypatch)
    native, builds = _build(source, tmp_path / "native", True, monkeypatch)
    # The tables that read info.source are the Python build's; the calls, which do not, may be DuckDB's.
    assert builds in (["python"], ["native+python"])
    for table in TABLES:
        assert python[table][0].equals(native[table][0]), table
    assert python["rollouts"][0].column("source_framework").null_count == 4


# Rewards, weights and metrics per line (None: the field left out), each
# shape a part. A first open types them per part (nativebuild._Signals):
# structs of the part's names, or MAPs where a struct would read them
# otherwise; both as rows.signal_values reads them.
_SIGNAL_SHAPES = {
    # Up to two rewards a line, in either order, some valueless or unweighted: structs.
    "structs": [({"a": 0.1, "b": 0.2}, {"a": 0.5}, {"m": 1.0}), ({"b": 0.7, "a": -0.0}, {}, {"n": 2.0, "m": None}),
                ({"b": None}, None, None), ({}, {"b": 3.0}, {})],
    # Three rewards whose sum depends on the order: (0.1 + 0.2) + 0.3 is not (0.3 + 0.2) + 0.1.
    "three in either order": [({"a": 0.1, "b": 0.2, "c": 0.3}, {}, {}), ({"c": 0.3, "b": 0.2, "a": 0.1}, {}, {})],
    # Names a struct's fields cannot hold, or only quoted: equal but for case, empty, a quote, a dot.
    "names": [({"Correct": 1.0, "correct": 0.0}, {"Correct": 2.0}, {"": 1.0}),
              ({'say "hi"': 0.5}, {'say "hi"': 3.0}, {"a.b": 4.0, "A.b": 5.0})],
    # More names in a part than a struct's sum should add (nativebuild._STRUCT_NAMES).
    "many names": [({f"r{i}": i / 7, f"r{i + 1}": 0.25}, {f"r{i}": 0.5}, {f"m{i}": float(i)}) for i in range(0, 140, 2)],
}


@pytest.mark.parametrize("shape", sorted(_SIGNAL_SHAPES))
def test_rewards_weights_and_metrics_of_every_shape_build_the_same_tables_natively(tmp_path, monkeypatch, shape):
    folder = big_run(4 * len(_SIGNAL_SHAPES[shape]), tmp_path / "run", tasks=3)
    source = folder / "traces.jsonl"
    traces = [json.loads(x) for x in source.read_text().splitlines()]
    for t, (rewards, weights, metrics) in zip(traces, _SIGNAL_SHAPES[shape] * 4):
        for field, value in (("rewards", rewards), ("reward_weights", weights), ("metrics", metrics)):
            t.pop(field)
            if value is not None:
                t[field] = value
    source.write_text("".join(json.dumps(t) + "\n" for t in traces))
    _same_tables(source, tmp_path, monkeypatch)


@pytest.mark.parametrize("signals", ['"rewards": {"a": 1.0, "a": 0.0}', '"metrics": {"m": 1.0, "m": 2.0}',
                                     '"reward_weights": {"a": 2.0, "a": 3.0}', '"rewards": []', '"metrics": ""'])
def test_a_key_twice_or_a_map_that_is_no_object_is_read_by_the_python_build(tmp_path, monkeypatch, signals):
    # Python's dict keeps a key's last value, DuckDB's struct its first and
    # its MAP none (DuckDB 2) or fails (1.3); a map that is not an object
    # Python reads as empty, or names its line: the first open leaves
    # either to the Python build, whose rollouts it then holds.
    folder = big_run(6, tmp_path / "run", tasks=2)
    source = folder / "traces.jsonl"
    lines = source.read_text().splitlines()
    field = signals.split(":")[0]
    written = json.dumps(json.loads(lines[3])[json.loads(field)], separators=(",", ":"))  # as big_run writes it
    lines[3] = lines[3].replace(f"{field}:{written}", signals)
    assert signals in lines[3]
    source.write_text("\n".join(lines) + "\n")
    python, _ = _build(source, tmp_path / "python", False, monkeypatch)
    monkeypatch.setattr(columns, "_NATIVE", True)
    tables = TableSet(source, cache=tmp_path / "native", progress=False)
    assert [json.loads((tmp_path / "native" / f"{p['name']}.json").read_text())["build"] for p in tables.parts] \
        == ["python"]
    assert pq.read_table(tables.files["rollouts"][0]).equals(python["rollouts"][0])


def test_a_value_types_from_its_first_characters_as_json_type_does():
    # The free-typed values' types are read from their text where its first
    # characters tell, json_type (which parses each again) where they do
    # not: the same bit for every kind of JSON value, whatever the spacing.
    import random

    import duckdb

    from rollkit.tables import nativebuild

    values = [0, -0, 1, -1, 10**17, 10**18 - 1, 10**18, -10**17, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30, -2**63,
              -2**63 - 1, 0.0, -0.0, 1.0, 0.1, 1e30, -1e-7, 5e-324, 1.7976931348623157e308, 123456789012345680000.0,
              float("nan"), float("inf"), -float("inf"), True, False, None, "", "1.5", "-1", "true", "null", [], [1],
              {}, {"a": 1}, [None]]
    chance = random.Random(7)
    values += [chance.choice((chance.randint(-10**21, 10**21), chance.random() * 10 ** chance.randint(-30, 30),
                              float(chance.randint(-10**6, 10**6)))) for _ in range(2000)]
    lines = [json.dumps({"x": v}) for v in values]
    lines += ['{"x": -0}', '{"x":-5 }', '{"x" :  1E5}', '{"x": 2e-3}', '{"x":\t[ 1 ]}', '{"x": "\\"a"}', "{}",
              '{"x": nan}', '{"x": nAn}', '{"x": inf}', '{"x": -INF}', '{"x": 1E400}']  # DuckDB reads these too
    con = duckdb.connect()
    try:
        con.execute("create table lines as select unnest(?) as line", [lines])
        x = "t.x"
        rows = con.execute(f"select line, {nativebuild._JSON_BITS.format(x=x)}, {nativebuild._FAST_JSON_BITS.format(x=x)} "
                           "from (select line, json_transform(line, '{\"x\": \"JSON\"}') as t from lines)").fetchall()
    finally:
        con.close()
    assert len(rows) == len(lines)
    assert [(line, fast) for line, exact, fast in rows if fast != exact] == []
    assert {exact for _, exact, _ in rows} == {0, 1, 2, 4, 8, 16}


# The whole parse reads the source through /proc, a part's own bytes go
# through a memfd: elsewhere (macOS, Windows) neither is there to count.
_IN_MEMORY_FILES = pytest.mark.skipif(not os.path.isdir("/proc/self/fd") or not hasattr(os, "memfd_create"),
                                      reason="no /proc or memfd here: parts are temporary files, none parsed whole")


def _made(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list:
    """What owner.name returns from now on, each call's result in a list."""
    made: list = []
    real = getattr(owner, name)

    def counted(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(owner, name, counted)
    return made


def _databases_opened(monkeypatch: pytest.MonkeyPatch) -> list:
    """The DuckDB databases opened from now on (duckdb.connect counted)."""
    import duckdb

    return _made(monkeypatch, duckdb, "connect")


def test_the_parts_of_a_build_share_one_database_closed_when_it_ends(tmp_path, monkeypatch):
    # Opening a DuckDB database costs ~30 ms, a part's connection to an open
    # one nothing: a build of five parts (two side by side) opens one, and
    # nothing of it is left open.
    import duckdb

    monkeypatch.setattr(columns, "_BATCH", 4)
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    opened = _databases_opened(monkeypatch)
    run = open_run(folder, progress=False)
    assert len(run.rollouts()) == 18
    assert len(opened) == 1
    assert len(run.turns()) == 18 * 2  # a table the first open did not build
    assert len(opened) == 2
    builds = {json.loads(p.read_text())["build"] for p in (folder / ".rollkit").rglob("part-*.json")}
    assert builds == {"native"}
    for database in opened:
        with pytest.raises(duckdb.ConnectionException, match="(?i)closed"):
            database.execute("select 1")


def test_the_parts_of_a_build_write_over_the_memory_files_earlier_parts_gave_back(tmp_path, monkeypatch):
    # A part's lines go to DuckDB through a file in memory; a new one's pages
    # cost twice what writing over given-back ones does: five parts, two at
    # a time, make two such files, and none is open once the build is over.
    from rollkit.tables import nativebuild

    if not nativebuild._MEMFD:
        pytest.skip("no memfd here: a temporary file per part")
    made = _made(monkeypatch, os, "memfd_create")
    monkeypatch.setattr(columns, "_BATCH", 4)
    monkeypatch.setattr(columns, "_whole_source", lambda f, tables=(): None)  # a run too big to parse whole
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    run = open_run(folder, progress=False)
    assert len(run.rollouts()) == 18
    assert len({json.loads(p.read_text())["start"] for p in (folder / ".rollkit").rglob("part-*.json")}) == 5
    assert 1 <= len(made) <= columns._IN_FLIGHT  # 5 without the reuse
    # The build's own files are closed (the live tables' engine, which lives
    # as long as the process, may hold one of its own from an earlier test).
    still_open = [fd for fd in made if os.path.exists(f"/proc/self/fd/{fd}")
                  and "rollkit-part" in os.readlink(f"/proc/self/fd/{fd}")]
    assert still_open == []


@_IN_MEMORY_FILES
def test_a_first_open_has_duckdb_parse_the_source_whole_and_copies_no_part(tmp_path, monkeypatch):
    # A part's bytes copied into a file in memory cost the kernel new pages;
    # the source, in the page cache, is parsed once for all the parts instead.
    monkeypatch.setattr(columns, "_BATCH", 4)
    monkeypatch.setattr(columns, "_IN_FLIGHT", 5)  # (the whole parse holds the lines of the parts built at once)
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    source = folder / "traces.jsonl"
    python, _ = _build(source, tmp_path / "python", False, monkeypatch)
    made = _made(monkeypatch, os, "memfd_create")
    native, builds = _build(source, tmp_path / "native", True, monkeypatch, ("rollouts",))
    assert builds == ["native"] * 5
    assert made == []
    for a, b in zip(python["rollouts"], native["rollouts"]):
        assert a.equals(b)


@_IN_MEMORY_FILES
def test_the_whole_parse_has_no_limit_and_begins_beside_the_search_for_the_first_part_s_lines(tmp_path, monkeypatch):
    # A LIMIT on DuckDB's reader parses on one thread (the 100k first open
    # took 37% longer than before the whole parse); the parse starts on the
    # thread that imports DuckDB, not when the first part has its lines.
    from rollkit.tables import nativebuild

    monkeypatch.setattr(columns, "_BATCH", 4)
    monkeypatch.setattr(columns, "_IN_FLIGHT", 5)
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    queries: list[tuple[str, str]] = []
    parsed = nativebuild._parsed

    def seen(source, fields):
        queries.append((threading.current_thread().name, parsed(source, fields)))
        parse_began.set()
        return queries[-1][1]

    line_ends = columns._line_ends

    def after_the_parse_began(*args, **kwargs):  # the first part's lines are found once DuckDB parses the source
        assert queries or parse_began.wait(60)
        return line_ends(*args, **kwargs)

    parse_began = threading.Event()
    monkeypatch.setattr(nativebuild, "_parsed", seen)
    monkeypatch.setattr(columns, "_line_ends", after_the_parse_began)
    made = _made(monkeypatch, os, "memfd_create")
    held = _made(monkeypatch, nativebuild.Engine, "whole_rows")
    assert len(open_run(folder, progress=False).rollouts()) == 18
    assert held == [True] * 5 and made == []
    assert [name for name, _ in queries] == ["rollkit-import-duckdb"]
    assert " limit " not in queries[0][1].lower()


@_IN_MEMORY_FILES
def test_the_parsed_lines_are_let_go_once_the_parts_reading_them_are_done(tmp_path, monkeypatch):
    # One part at a time: the whole parse holds the first part's lines only
    # (a file that had only those when it was parsed); the parts after it
    # read their own bytes, and find the parsed lines gone.
    from rollkit.tables import nativebuild

    monkeypatch.setattr(columns, "_BATCH", 4)
    monkeypatch.setattr(columns, "_IN_FLIGHT", 1)
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    first = tmp_path / "first.jsonl"
    first.write_text("".join((folder / "traces.jsonl").read_text().splitlines(keepends=True)[:4]))
    # (the build closes it)
    monkeypatch.setattr(columns, "_whole_source", lambda f, tables=(): os.open(first, os.O_RDONLY))
    held = _made(monkeypatch, nativebuild.Engine, "whole_rows")
    read_alone = nativebuild._read_part
    whole_there: list[int] = []

    def reading_alone(con, *args):
        whole_there.append(con.execute("select count(*) from duckdb_tables() where table_name = 'whole'")
                           .fetchall()[0][0])
        return read_alone(con, *args)

    monkeypatch.setattr(nativebuild, "_read_part", reading_alone)
    native, builds = _build(folder / "traces.jsonl", tmp_path / "native", True, monkeypatch, ("rollouts",))
    assert builds == ["native"] * 5
    assert held == [True, False, False, False, False]
    assert whole_there == [0, 0, 0, 0]  # 1 each without the drop


def test_a_line_the_whole_parse_refuses_sends_its_own_part_alone_to_python(tmp_path, monkeypatch):
    # DuckDB refuses a key written twice (Python keeps the last): the whole
    # parse fails, each part parses its own bytes, and only the part holding
    # the line is built in Python, with the value rk.load reads.
    monkeypatch.setattr(columns, "_BATCH", 4)
    monkeypatch.setattr(columns, "_IN_FLIGHT", 5)  # (the whole parse reaches the third part)
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    source = folder / "traces.jsonl"
    lines = source.read_text().splitlines(keepends=True)
    lines[9] = lines[9].replace('{"id":', '{"id":"first","id":', 1)  # line 10, in the third of five parts
    assert '"first"' in lines[9]
    source.write_text("".join(lines))
    python, _ = _build(source, tmp_path / "python", False, monkeypatch)
    native, builds = _build(source, tmp_path / "native", True, monkeypatch, ("rollouts",))
    assert builds == ["native", "native", "python", "native", "native"]
    for a, b in zip(python["rollouts"], native["rollouts"]):
        assert a.equals(b)
    assert native["rollouts"][2].column("id").to_pylist()[1] == json.loads(lines[9])["id"]


@_IN_MEMORY_FILES
def test_a_part_reads_its_own_bytes_where_the_whole_parse_is_not_of_its_lines(tmp_path, monkeypatch):
    # The parts and DuckDB read the source through two openings of it: a
    # part whose first or last line's id is not the parsed row's (a file
    # changed between them; here another run's file) parses its own bytes.
    monkeypatch.setattr(columns, "_BATCH", 4)
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    text = (folder / "traces.jsonl").read_text()
    other = tmp_path / "other.jsonl"
    other.write_text(text.replace('{"id":"0', '{"id":"x'))
    ids = [json.loads(line)["id"] for line in text.splitlines()]
    assert ids != [json.loads(line)["id"] for line in other.read_text().splitlines()]
    # (the build closes it)
    monkeypatch.setattr(columns, "_whole_source", lambda f, tables=(): os.open(other, os.O_RDONLY))
    made = _made(monkeypatch, os, "memfd_create")
    assert open_run(folder, progress=False).rollouts()["id"].tolist() == ids
    assert made


@_IN_MEMORY_FILES
@pytest.mark.parametrize("tail, part_bytes, batch, native_parts, whole", [
    ("", None, None, True, True), ('{"id": "torn', None, None, True, False), ("", 1000, None, True, False),
    ("", None, 3, True, True), ("", None, 1, True, False), ("", None, 2, True, True), ("", None, 2, False, False)])
def test_a_first_open_parses_the_source_whole_only_when_it_is_complete_and_two_parts_at_most(
        tmp_path, monkeypatch, tail, part_bytes, batch, native_parts, whole):
    # A torn last line (a run still writing) DuckDB's reader would refuse;
    # past the parts a first open holds at once (their bytes, or by far
    # their lines: six lines, parts of one line), the parsed lines held to
    # the end would be more than the build holds now; parts of lines so
    # short that each is built in Python (two lines of six, under the bytes
    # a native part needs) would not read it.
    folder = big_run(6, tmp_path / "run", tasks=2)
    source = folder / "traces.jsonl"
    with open(source, "a") as f:
        f.write(tail)
    if part_bytes:
        monkeypatch.setattr(columns, "_PART_BYTES", part_bytes)
    if batch:
        monkeypatch.setattr(columns, "_BATCH", batch)
    if not native_parts:
        monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", source.stat().st_size)
    with open(source, "rb") as f:
        assert _whole_source_given(f, source) == whole



@_IN_MEMORY_FILES
@pytest.mark.parametrize("table", ["turns", "phases", "signals", "calls", "messages"])
def test_the_first_ask_of_a_table_without_text_parses_the_source_whole_and_copies_no_part(tmp_path, monkeypatch,
                                                                                          table):
    # After a first open (the rollouts alone), a table without text has
    # DuckDB parse the file once for all its parts, as the first open did,
    # not each part's bytes copied into a file in memory (item 4 of issue
    # 44: those copies were a fifth of a 1M run's first ask of the phases);
    # the calls and the messages, whose fields hold the text, still copy
    # (a parse of the whole file would hold most of it).
    from rollkit.tables import nativebuild

    monkeypatch.setattr(columns, "_BATCH", 4)
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    source = folder / "traces.jsonl"
    python, _ = _build(source, tmp_path / "python", False, monkeypatch, (table,))
    monkeypatch.setattr(columns, "_NATIVE", True)
    (tmp_path / "native").mkdir()
    tables = TableSet(source, cache=tmp_path / "native", progress=False)
    assert len(tables.files["rollouts"]) == 5
    made = _made(monkeypatch, os, "memfd_create")
    held = _made(monkeypatch, nativebuild.Engine, "whole_rows")
    side_by_side = _made(monkeypatch, columns, "_side_by_side")
    native = [pq.read_table(f) for f in tables.files[table]]
    whole = table in ("turns", "phases", "signals")
    assert (held, made == []) == ([whole] * 5, whole)
    assert len(side_by_side) == 1  # two parts at once, as a first open builds them
    assert [json.loads((tmp_path / "native" / f"{p['name']}.json").read_text())["build"] for p in tables.parts] \
        == ["native"] * 5
    for a, b in zip(python[table], native):
        assert a.equals(b)


@_IN_MEMORY_FILES
@pytest.mark.parametrize("table, tail, size, whole", [
    ("phases", "", None, True), ("turns", "", None, True), ("signals", "", None, True), ("calls", "", None, False),
    ("messages", "", None, False), ("phases", '{"id": "torn', None, False), ("phases", "", 1000, False)])
def test_a_first_ask_parses_the_source_whole_past_a_first_open_s_bounds_up_to_its_own(tmp_path, monkeypatch, table,
                                                                                      tail, size, whole):
    # Parts of one line, each built natively (a first ask builds every part
    # so when they are worth it together): a first open would read each
    # part's bytes; a first ask of a table without text parses the file
    # whole unless its last line is torn or it is bigger than
    # _WHOLE_ASK_BYTES (here set below the file's size).
    folder = big_run(6, tmp_path / "run", tasks=2)
    source = folder / "traces.jsonl"
    with open(source, "a") as f:
        f.write(tail)
    monkeypatch.setattr(columns, "_BATCH", 1)
    if size:
        monkeypatch.setattr(columns, "_WHOLE_ASK_BYTES", size)
    with open(source, "rb") as f:
        assert not _whole_source_given(f, source, ("rollouts",))
        assert _whole_source_given(f, source, (table,)) == whole


def _whole_source_given(f, source: Path, tables: tuple[str, ...] = ()) -> bool:
    """Whether columns._whole_source gives a build of `tables` a copy of the
    descriptor of open file `f` (of `source`); the copy closed here."""
    fd = columns._whole_source(f, tables)
    if fd is None:
        return False
    try:
        assert fd != f.fileno() and os.path.samefile(f"/proc/self/fd/{fd}", source)
    finally:
        os.close(fd)
    return True

# threads None: one part at a time gets DuckDB's own default (every core this machine has).
@pytest.mark.parametrize("cores, in_flight, threads", [(8, 2, "7"), (2, 2, "1"), (1, 2, "1"), (8, 1, None)])
def test_the_build_database_runs_a_thread_a_core_counting_each_part_as_one(tmp_path, monkeypatch, cores, in_flight,
                                                                           threads):
    # DuckDB's `threads` is the whole database's, and each part side by side
    # asks from a thread of its own: the cores less the other parts' threads
    # (cores // 2 per part, as it was per database, left cores idle past 2).
    # One part at a time: every core. Measured only on 2 cores here.
    from rollkit.tables import nativebuild

    monkeypatch.setattr(columns, "_BATCH", 4)
    monkeypatch.setattr(columns, "_IN_FLIGHT", in_flight)
    monkeypatch.setattr(columns, "_cores", lambda: cores)
    threads = threads or str(_default_threads())
    folder = big_run(8, tmp_path / "run", turns=2, tasks=3)
    opened = _databases_opened(monkeypatch)
    settings = []
    free_types = nativebuild._free_types

    def seen(con, tables):
        settings.append(con.execute("select current_setting('threads')").fetchall()[0][0])
        return free_types(con, tables)

    monkeypatch.setattr(nativebuild, "_free_types", seen)
    assert len(open_run(folder, progress=False).rollouts()) == 8
    assert len(opened) == 1
    assert settings and {str(s) for s in settings} == {threads}


def _default_threads() -> int:
    import duckdb

    with duckdb.connect() as database:
        return database.execute("select current_setting('threads')").fetchall()[0][0]


def test_a_part_still_building_when_ctrl_c_ends_the_build_keeps_its_database_and_ends(tmp_path, monkeypatch):
    # Ctrl-C returns from a first open at once, while the part beside it is
    # still building: the build's database must stay open under that part
    # (closed under a running query, DuckDB 1.3 leaves it hanging; 2.0
    # fails it, and the part would go on in Python), and close when it ends.
    import threading

    import duckdb

    from rollkit.tables import nativebuild

    monkeypatch.setattr(columns, "_BATCH", 4)
    folder = big_run(8, tmp_path / "run", turns=2, tasks=3)
    opened = _databases_opened(monkeypatch)
    holding, go = threading.Event(), threading.Event()
    free_types = nativebuild._free_types

    def second_part_waits(con, tables):  # inside the second part's query work: its connection is open
        if threading.current_thread().name.endswith("_1"):
            holding.set()
            assert go.wait(60)
        return free_types(con, tables)

    build_part = TableSet._part

    def first_part_interrupted(self, data, starts, ends, lengths, part_start, *rest, **options):
        if part_start == 0:
            assert holding.wait(60)
            raise KeyboardInterrupt
        return build_part(self, data, starts, ends, lengths, part_start, *rest, **options)

    monkeypatch.setattr(nativebuild, "_free_types", second_part_waits)
    monkeypatch.setattr(TableSet, "_part", first_part_interrupted)
    builders = lambda: [t for t in threading.enumerate() if t.name.startswith("rollkit-build")]  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        TableSet(folder / "traces.jsonl", cache=tmp_path / "cache", progress=False)
    assert len(opened) == 1
    assert opened[0].execute("select 42").fetchall() == [(42,)]  # still open under the second part
    go.set()
    for thread in builders():
        thread.join(60)
    assert builders() == []
    markers = [json.loads(p.read_text()) for p in (tmp_path / "cache").glob("part-*.json")]
    assert [(m["lines"], m["build"]) for m in markers] == [(4, "native")]  # built natively, to the end
    with pytest.raises(duckdb.ConnectionException, match="(?i)closed"):
        opened[0].execute("select 1")


@_IN_MEMORY_FILES
@pytest.mark.parametrize("parser", ["read-ahead", "a part"])
def test_a_build_ending_while_duckdb_parses_the_source_whole_interrupts_it_and_closes_all(tmp_path, monkeypatch,
                                                                                            parser):
    # Ctrl-C (or a failed part) ends a first open while the source is still
    # parsed (by the read-ahead, or by a part that asked first): that query
    # is interrupted, not waited for, nothing is raised on its thread, and
    # the database and descriptor are closed once it is given back.
    import duckdb

    from rollkit.tables import nativebuild

    folder = big_run(6, tmp_path / "run", tasks=2)
    running = threading.Event()

    def endless(source, fields):  # a parse that ends only when interrupted (its first row says it runs)
        return "select null as t, 0 as _doubt from range(1000000000000) where parse_started(range)"

    def started(value: int) -> bool:
        running.set()
        return False

    connection = nativebuild.Engine.connection

    def with_udf(self):
        con = connection(self)
        with suppress(duckdb.Error):
            con.create_function("parse_started", started, ["BIGINT"], "BOOLEAN")
        return con

    monkeypatch.setattr(nativebuild, "_parsed", endless)
    monkeypatch.setattr(nativebuild.Engine, "connection", with_udf)
    opened = _databases_opened(monkeypatch)
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: raised.append(hook.exc_value))
    with open(folder / "traces.jsonl", "rb") as f:
        fd = columns._whole_source(f)
    engine = nativebuild.Engine(threads=1, source=nativebuild.WholeSource(fd, 2, ("rollouts",)))
    read: list[bool] = []

    def part() -> None:
        con = engine.connection()
        try:
            read.append(engine.whole_rows(con, nativebuild._fields(("rollouts",)), 0, 1))
        finally:
            engine.give_back(con)

    ahead = threading.Thread(target=engine.read_ahead if parser == "read-ahead" else part)
    ahead.start()
    assert running.wait(60)
    engine.close()
    ahead.join(60)
    assert not ahead.is_alive() and raised == []
    assert read == ([] if parser == "read-ahead" else [False])  # (the part reads its own bytes)
    assert not os.path.exists(f"/proc/self/fd/{fd}") or not os.path.samefile(f"/proc/self/fd/{fd}",
                                                                              folder / "traces.jsonl")
    with pytest.raises(duckdb.ConnectionException, match="(?i)closed"):
        opened[0].execute("select 1")


def test_a_fresh_process_imports_duckdb_beside_the_first_part_and_leaves_no_thread(tmp_path):
    # In a process that has not imported DuckDB, a first open imports it on
    # a thread of its own while the first part's lines are found; the
    # build is native all the same, and the thread is over when it returns.
    # Both DuckDB and pandas (for the frame) are imported within rollkit's
    # stand-ins' imports, with the collector paused (rollkit.core.dependencies),
    # not by pyarrow's to_pandas on its own (pyarrow 19's parquet module
    # imports pandas: it comes with that stand-in's import).
    import subprocess
    import sys

    folder = big_run(30, tmp_path / "run", tasks=3)
    code = (
        "import json, sys, threading\n"
        "from rollkit.core import dependencies\n"
        "from rollkit.tables import columns\n"
        "from rollkit.tables.lazyrun import open_run\n"
        "columns._NATIVE_MIN_BYTES = 0\n"
        "came, load = set(), dependencies._Deferred._load\n"
        "class PandasFound:  # pyarrow.dataset being imported when pandas is\n"
        "    by_dataset = None\n"
        "    def find_spec(self, name, *args):\n"
        "        if name == 'pandas' and self.by_dataset is None:\n"
        "            self.by_dataset = 'pyarrow.dataset' in sys.modules\n"
        "found = PandasFound()\n"
        "sys.meta_path.insert(0, found)\n"
        "def spied(self):\n"
        "    before = {'duckdb', 'pandas'} - set(sys.modules)\n"
        "    module = load(self)\n"
        "    came.update(before & set(sys.modules))\n"
        "    return module\n"
        "dependencies._Deferred._load = spied\n"
        "before = 'duckdb' in sys.modules\n"
        "run = open_run(sys.argv[1], progress=False)\n"
        "print(json.dumps({'before': before, 'after': 'duckdb' in sys.modules, 'rows': len(run.rollouts()),\n"
        "                  'threads': sorted(t.name for t in threading.enumerate()),\n"
        "                  'imported': sorted(came), 'by_dataset': found.by_dataset}))\n")
    done = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    # (DuckDB 1.3 scans an Arrow table through pyarrow.dataset, which imports
    # pandas in pyarrow 19, the lowest versions allowed: pandas comes with that scan.)
    by_dataset = seen.pop("by_dataset")
    assert seen == {"before": False, "after": True, "rows": 30, "threads": ["MainThread"],
                    "imported": ["duckdb"] if by_dataset else ["duckdb", "pandas"]}
    builds = [json.loads(p.read_text())["build"] for p in (folder / ".rollkit" / "traces.jsonl").glob("part-*.json")]
    assert builds == ["native"]


def test_a_line_that_is_not_a_trace_is_named_by_the_python_build(tmp_path, monkeypatch):
    folder = big_run(5, tmp_path / "run", tasks=2)
    source = folder / "traces.jsonl"
    with open(source, "a") as f:
        f.write('{"id": "x", "task": {"key": "k"}}\n')  # valid JSON, no task type
    monkeypatch.setattr(columns, "_NATIVE", True)
    with pytest.raises(rk.TraceFileError, match="line 6 is not a rollkit trace"):
        open_run(folder)
    source.write_text(source.read_text().replace('{"id": "x", "task": {"key": "k"}}', "{not json"))
    with pytest.raises(rk.TraceFileError, match="line 6 is not a rollkit trace"):
        open_run(folder)


def test_blank_lines_and_a_torn_tail_cut_parts_as_the_python_build_does(tmp_path, monkeypatch):
    monkeypatch.setattr(columns, "_BATCH", 3)
    folder = big_run(7, tmp_path / "run", tasks=2)
    source = folder / "traces.jsonl"
    lines = source.read_text().splitlines(keepends=True)
    source.write_text("".join([lines[0], "\n", "   \n", *lines[1:5], " \t\n", *lines[5:]]) + lines[0][:50])
    _same_tables(source, tmp_path, monkeypatch)
    run = open_run(folder)
    assert len(run) == 7 and [t.id for t in run] == [json.loads(x)["id"] for x in lines]


def test_a_small_part_is_built_in_python(tmp_path, monkeypatch):
    # Below _NATIVE_MIN_BYTES of source the Python build is the cheaper one.
    folder = big_run(20, tmp_path / "run", tasks=3)
    size = (folder / "traces.jsonl").stat().st_size
    for least, build in ((size + 1, "python"), (size, "native")):
        monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", least)
        shutil.rmtree(folder / ".rollkit", ignore_errors=True)
        open_run(folder)
        assert [json.loads(p.read_text())["build"] for p in (folder / ".rollkit" / "traces.jsonl").glob("part-*.json")] \
            == [build]


def test_the_first_open_shows_the_bytes_it_reads(tmp_path, capsys):
    folder = big_run(40, tmp_path / "run", tasks=3)
    size = (folder / "traces.jsonl").stat().st_size
    open_run(folder, progress=True)
    shown = capsys.readouterr().err
    assert "building the tables of traces.jsonl" in shown and "100%" in shown
    assert f"{size / 1024:.1f}k" in shown  # the total, in KB (unit_scale, 1024)
    open_run(folder, progress=True)  # built already: nothing to show
    assert capsys.readouterr().err == ""
    open_run(big_run(30, tmp_path / "small", tasks=3))  # a small build: no bar unless asked
    assert capsys.readouterr().err == ""


def _listed_tables(cache: Path) -> list[list[str]]:
    return [json.loads(p.read_text())["tables"] for p in sorted(cache.glob("part-*.json"))]


def test_a_first_open_builds_the_rollouts_and_the_others_when_first_asked_for(tmp_path, monkeypatch):
    # The first open is for the rollouts frame: the other five tables of a
    # part are built (natively, from the part's bytes) when first asked
    # for, each alone, and are then the Python build's, row for row.
    monkeypatch.setattr(columns, "_BATCH", 7)
    folder = big_run(20, tmp_path / "run", turns=2, tasks=3)
    cache = folder / ".rollkit" / "traces.jsonl"
    run = open_run(folder)
    assert len(run.rollouts()) == 20
    assert _listed_tables(cache) == [["rollouts"]] * 3
    assert not (cache / "turns").exists()
    assert len(run.turns()) == 40
    assert _listed_tables(cache) == [["rollouts", "turns"]] * 3
    assert not (cache / "phases").exists() and not (cache / "messages").exists()
    assert len(run.search("How many")) == 20
    assert _listed_tables(cache) == [["rollouts", "turns", "messages"]] * 3
    assert len(run.phases()) == 100 and len(run.signals()) == 60
    assert _listed_tables(cache) == [["rollouts", "turns", "phases", "signals", "messages"]] * 3
    assert len(run.calls()) == 40
    assert _listed_tables(cache) == [list(TABLES)] * 3
    assert {json.loads(p.read_text())["build"] for p in cache.glob("part-*.json")} == {"native"}
    python, _ = _build(folder / "traces.jsonl", tmp_path / "python", False, monkeypatch)
    for table in TABLES:
        built = [pq.read_table(cache / table / f"{p.stem}.parquet") for p in sorted(cache.glob("part-*.json"))]
        assert [b.equals(a) and b.schema.metadata == a.schema.metadata for a, b in zip(python[table], built)] \
            == [True] * 3, table


def test_the_tables_without_text_are_built_without_reading_it(tmp_path, monkeypatch):
    # A message written with a key twice: the native reader refuses a part
    # whose messages it reads (the Python build reads it, as rk.load does).
    # The turns, phases and signals read no message: their part is still
    # built natively, and the calls and messages later in Python; every
    # table is the Python build's, row for row.
    folder = big_run(6, tmp_path / "run", turns=2, tasks=3)
    source = folder / "traces.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    assert lines[2].count(b'"role":"user"') == 1
    lines[2] = lines[2].replace(b'"role":"user"', b'"role":"user","role":"user"')
    source.write_bytes(b"".join(lines))
    cache = folder / ".rollkit" / "traces.jsonl"
    run = open_run(folder)
    assert len(run.turns()) == 12 and len(run.phases()) == 30 and len(run.signals()) == 18
    assert [json.loads(p.read_text())["build"] for p in cache.glob("part-*.json")] == ["native"]
    assert len(run.calls()) == 12  # no call's reply is a message here: the calls read none
    assert [json.loads(p.read_text())["build"] for p in cache.glob("part-*.json")] == ["native"]
    assert len(run.messages()) == sum(len(json.loads(line)["messages"]) for line in lines)
    assert [json.loads(p.read_text())["build"] for p in cache.glob("part-*.json")] == ["native+python"]
    python, _ = _build(source, tmp_path / "python", False, monkeypatch)
    for table in TABLES:
        (built,) = [pq.read_table(f) for f in sorted((cache / table).glob("*.parquet"))]
        assert built.equals(python[table][0]), table


async def test_the_calls_read_the_messages_only_where_a_reply_is_one(tmp_path, monkeypatch):
    # A committed call of rk.evaluate's demo agent gives its request's length,
    # its reply being the next message: those parts' calls read the messages;
    # big_run's calls give none and read none. Where the text test is
    # misled (the key written with an escape), the values tell, and the
    # calls are read again with the messages: the Python build's, row for row.
    from rollkit.tables import nativebuild

    arithmetic = await rk.evaluate_async(demo_agent(), arithmetic_tasks(4), repeats=2, progress=False)
    plain = rk.save(arithmetic.traces, tmp_path / "plain" / "t.jsonl")
    escaped = tmp_path / "escaped" / "t.jsonl"
    escaped.parent.mkdir()
    data = plain.read_bytes()
    assert data.count(b'"request_messages":4') == 8
    escaped.write_bytes(data.replace(b'"request_messages":', b'"request\\u005fmessages":'))
    assert b'"request_messages":' not in escaped.read_bytes()
    unmade = big_run(12, tmp_path / "big" / "run", turns=2, tasks=3) / "traces.jsonl"
    read = []
    real = nativebuild._read
    monkeypatch.setattr(nativebuild, "_read", lambda con, lines, ordinal, fields, engine: (
        read.append("messages" in fields), real(con, lines, ordinal, fields, engine))[1])
    calls_first = ("rollouts", "calls", "turns", "phases", "signals", "messages")
    for name, source, asked in (("plain", plain, [True]), ("escaped", escaped, [False, True]),
                                ("big", unmade, [False])):
        read.clear()
        native, builds = _build(source, tmp_path / name / "native", True, monkeypatch, ("rollouts", "calls"))
        assert builds == ["native"] and read[1:] == asked, (name, read)
        _same_tables(source, tmp_path / name, monkeypatch, orders=(calls_first,))
    plain_calls = pq.read_table(next((tmp_path / "plain" / "native" / "calls").glob("*.parquet")))
    assert plain_calls.column("reply").to_pylist()[1] == "The answer is 42."


def test_a_later_ask_builds_small_parts_natively_when_together_they_are_worth_it(tmp_path, monkeypatch):
    # A live run leaves small parts (below _NATIVE_MIN_BYTES each); asked for
    # later together, they are worth DuckDB's fixed cost, paid once (the
    # parts of a build share its database): built natively, not in Python.
    monkeypatch.setattr(columns, "_BATCH", 5)
    folder = big_run(20, tmp_path / "run", turns=2, tasks=3)
    size = (folder / "traces.jsonl").stat().st_size
    monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", size // 2)  # each part below it, the four above it
    cache = folder / ".rollkit" / "traces.jsonl"
    run = open_run(folder)
    assert {json.loads(p.read_text())["build"] for p in cache.glob("part-*.json")} == {"python"}
    assert len(run.search("How many")) == 20
    assert {json.loads(p.read_text())["build"] for p in cache.glob("part-*.json")} == {"native+python"}
    monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", size + 1)  # together below it: the Python build's
    shutil.rmtree(cache)
    run = open_run(folder)
    assert len(run.turns()) == 40
    assert {json.loads(p.read_text())["build"] for p in cache.glob("part-*.json")} == {"python"}


def test_sql_the_browser_and_export_build_only_the_tables_they_name(tmp_path):
    # A query over the rollouts must not pay for the other five tables'
    # build; naming one builds that one (and its view) on the spot.
    from rollkit.notebook.runbrowser import RunBrowser

    folder = big_run(20, tmp_path / "run", turns=2, tasks=3)
    cache = folder / ".rollkit" / "traces.jsonl"
    run = open_run(folder)
    assert run.sql("select count(*) as n from rollouts")["n"][0] == 20
    browser = RunBrowser(run)
    assert "<b>20</b> of 20 rollouts" in browser.status.value
    rk.export(run, tmp_path / "out.jsonl", format="sft")
    assert _listed_tables(cache) == [["rollouts"]]
    browser.where("id in (select id from turns where turn = 2)")
    assert "<b>20</b> of 20 rollouts" in browser.status.value
    # the later build makes the table named, alone
    assert sorted(_listed_tables(cache)[0]) == ["rollouts", "turns"]
    assert run.sql("select count(*) as n from calls")["n"][0] == 40
    assert sorted(_listed_tables(cache)[0]) == ["calls", "rollouts", "turns"]


def test_a_run_opened_while_written_agrees_with_itself_after_a_later_table_catches_up(tmp_path):
    # Opened at 20 traces; 10 more are written and another process (here a
    # second TableSet) adds their part. The first open's turns() brings its
    # tables up to date: its index, frames and SQL then all see 30.
    folder = big_run(30, tmp_path / "whole", turns=2, tasks=3)
    lines = (folder / "traces.jsonl").read_bytes().splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"".join(lines[:20]))
    run = open_run(live)
    assert len(run) == 20 and run[19].id == json.loads(lines[19])["id"]
    with open(live, "ab") as f:
        f.write(b"".join(lines[20:]))
    TableSet(live)  # the other process: a part for the new lines
    assert len(run.turns()) == 60
    assert len(run) == 30 and len(run.rollouts()) == 30
    assert run[29].id == json.loads(lines[29])["id"]
    assert run.sql("select count(*) as n from rollouts")["n"][0] == 30


def test_a_part_merged_away_while_completed_does_not_come_back(tmp_path, monkeypatch):
    # Between reading a part's marker and completing it, another process
    # merged it away (here: its marker removed). Its marker must not be
    # written again; the tables are completed as the folder is now.
    folder = big_run(20, tmp_path / "run", turns=2, tasks=3)
    cache = folder / ".rollkit" / "traces.jsonl"
    run = open_run(folder)
    (marker,) = cache.glob("part-*.json")
    real_part = columns.TableSet._part
    merges = []

    def merged_meanwhile(self, *args, **kwargs):
        if len(args) == 8 and not merges:  # the first completion of a part: the other process merges it now
            merges.append(marker.name)
            marker.unlink()
            (cache / "rollouts" / f"{marker.stem}.parquet").unlink()
        return real_part(self, *args, **kwargs)

    monkeypatch.setattr(columns.TableSet, "_part", merged_meanwhile)
    assert len(run.turns()) == 40
    assert merges == [marker.name]
    assert _listed_tables(cache) == [["rollouts", "turns"]]  # built again from the file, not a marker brought back
    assert len(run.rollouts()) == 20


def test_a_table_built_later_checks_its_source_first(tmp_path, monkeypatch):
    # Between the first open and the first ask for another table the file
    # was rewritten: the tables are made current from it, never built from
    # bytes other than those the part was cut from; a torn later table is
    # rebuilt.
    folder = big_run(12, tmp_path / "run", turns=2, tasks=3)
    source = folder / "traces.jsonl"
    run = open_run(folder)
    lines = source.read_bytes().splitlines(keepends=True)
    source.write_bytes(b"".join(lines[:5]))
    assert len(run.turns()) == 10  # the five traces the file holds now, two turns each
    assert len(open_run(folder).rollouts()) == 5
    cache = folder / ".rollkit" / "traces.jsonl"
    turns = next((cache / "turns").glob("*.parquet"))
    turns.write_bytes(turns.read_bytes()[:100])
    assert len(open_run(folder).turns()) == 10


def _reference_cut(data: bytes, lines: int) -> list[int]:
    # Every newline of the buffer, then cut where `lines` non-blank lines end: the rule _line_ends keeps.
    ends = [i + 1 for i, byte in enumerate(data) if byte == 10]
    counted, kept = 0, []
    for start, end in zip([0, *ends], ends):
        kept.append(end)
        counted += bool(data[start:end].strip())
        if counted == lines:
            break
    return kept


@pytest.mark.parametrize("lines", [1, 2, 3, 5, 100])
def test_line_ends_stop_at_the_line_that_makes_the_part_and_skip_blank_ones(lines):
    # Found by bytes.find, not by comparing the whole buffer: the same ends,
    # blank and whitespace-only lines not counted, a torn tail not a line.
    texts = [b"", b"\n", b"a\n", b"\n\n\na\nb\n", b"  \n\t\nx\n \n\ny\nz\n", b'{"a": 1}\n \x0b\n{"b": 2}\n{"c"',
             b"\r\n\x0c\n" * 3 + b"tail", b"a\nb\nc\nd\ne\nf\n"]
    for data in texts:
        for buffer in (data, bytearray(data)):
            assert columns._line_ends(buffer, lines).tolist() == _reference_cut(data, lines), data
        assert columns._line_ends(data).tolist() == [i + 1 for i, byte in enumerate(data) if byte == 10], data


@pytest.mark.parametrize("in_flight", [1, 2, 3])
def test_parts_built_side_by_side_keep_their_order_and_name_a_bad_line(tmp_path, monkeypatch, in_flight):
    # Parts are built _IN_FLIGHT at once: the tables come out in the
    # source's order even when a later part ends first (here the first part
    # waits until the second is built), and a bad line in a middle part is
    # named, by its number in the file.
    import threading

    monkeypatch.setattr(columns, "_BATCH", 4)
    folder = big_run(18, tmp_path / "run", turns=2, tasks=3)
    source = folder / "traces.jsonl"
    python, _ = _build(source, tmp_path / "python", False, monkeypatch)
    monkeypatch.setattr(columns, "_IN_FLIGHT", in_flight)
    second_built = threading.Event()
    build_part = TableSet._part

    def first_part_last(self, data, starts, ends, lengths, part_start, *rest, **options):
        if part_start == 0 and in_flight > 1:
            assert second_built.wait(60), "the second part was not built beside the first"
        made = build_part(self, data, starts, ends, lengths, part_start, *rest, **options)
        if part_start > 0:
            second_built.set()
        return made

    monkeypatch.setattr(TableSet, "_part", first_part_last)
    native, builds = _build(source, tmp_path / "native", True, monkeypatch)
    assert builds == ["native"] * 5
    for table in TABLES:
        assert len(native[table]) == 5
        for a, b in zip(python[table], native[table]):
            assert a.equals(b), table
    lines = source.read_text().splitlines(keepends=True)
    lines[9] = '{"id": "x", "task": {"key": "k"}}\n'  # line 10, in the third of five parts
    source.write_text("".join(lines))
    with pytest.raises(rk.TraceFileError, match="line 10 is not a rollkit trace") as failed:
        open_run(folder)
    # The file and its map are let go when the build fails, not when its traceback is (a
    # notebook keeps the last one): a mapped or open file cannot be fixed in place on Windows.
    held = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")]
    mapped = Path("/proc/self/maps").read_text()
    assert failed.tb is not None
    assert str(source) not in held
    assert str(source) not in mapped


def test_a_file_that_cannot_be_mapped_is_read_and_gives_the_same_tables(tmp_path, monkeypatch):
    # Parts are views of the file mapped into memory; where mapping fails
    # (a file system without it) the bytes are read instead, cut the same.
    monkeypatch.setattr(columns, "_BATCH", 4)
    folder = big_run(14, tmp_path / "run", turns=2, tasks=3)
    source = folder / "traces.jsonl"
    with open(source, "a") as f:
        f.write('{"id": "torn')  # a last line still being written: it waits
    mapped, _ = _build(source, tmp_path / "mapped", True, monkeypatch)
    calls = []

    def unmappable(*args, **kwargs):
        calls.append(args)
        raise OSError(19, "No such device")

    monkeypatch.setattr(columns.mmap, "mmap", unmappable)
    read, builds = _build(source, tmp_path / "read", True, monkeypatch)
    # (mapping tried by the first open, then by each of the five tables' later asks: each alone)
    assert len(calls) == 1 + 5 and builds == ["native"] * 4
    for table in TABLES:
        assert [len(t) for t in read[table]] == [len(t) for t in mapped[table]]
        for a, b in zip(mapped[table], read[table]):
            assert a.equals(b), table
    # A file that grew is read from where its parts end: the same rows as a fresh build of the whole.
    lines = source.read_bytes().splitlines(keepends=True)
    grown = tmp_path / "grown.jsonl"
    grown.write_bytes(b"".join(lines[:6]) + lines[6][:20])
    TableSet(grown, cache=tmp_path / "grown", progress=False)
    grown.write_bytes(b"".join(lines))
    again = TableSet(grown, cache=tmp_path / "grown", progress=False)
    assert [p["start"] for p in again.parts][:2] == [0, len(b"".join(lines[:4]))] and len(calls) == 6 + 2
    for table in TABLES:
        rows = [row for f in again.files[table] for row in pq.read_table(f).to_pylist()]
        assert rows == [row for t in mapped[table] for row in t.to_pylist()], table


def test_only_complete_lines_are_mapped_so_a_torn_tail_cut_off_meanwhile_is_never_touched(tmp_path, monkeypatch):
    # A resumed run cuts a torn last line off while a monitor may be
    # opening the run: mapped pages past a file's new end kill the process
    # (SIGBUS), so the map ends at the last newline, however long the tail.
    folder = big_run(6, tmp_path / "run", tasks=2)
    source = folder / "traces.jsonl"
    complete = source.stat().st_size
    with open(source, "a") as f:
        f.write('{"id": "' + "x" * (3 << 20))  # a torn line longer than the 1 MB looked at a time
    lengths = []
    real_map = columns.mmap.mmap

    def recorded(fileno, length, **options):
        lengths.append(length)
        return real_map(fileno, length, **options)

    monkeypatch.setattr(columns.mmap, "mmap", recorded)
    assert len(open_run(folder)) == 6 and lengths == [complete]
    with open(source, "rb") as f:
        assert columns._complete_end(f, 0, source.stat().st_size) == complete
        assert columns._complete_end(f, complete, source.stat().st_size) == complete  # nothing complete after it
        assert columns._complete_end(f, 0, 0) == 0


@pytest.mark.parametrize("table", ["turns", "phases", "signals", "calls", "messages"])
def test_a_later_ask_builds_its_table_alone_from_the_fields_its_columns_read(tmp_path, monkeypatch, table):
    # A later ask builds the table asked for and no other, reading the trace
    # fields its query names and no other: what only the other tables read,
    # and what tells a line that is no trace, the first open read and checked.
    from rollkit.tables import nativebuild

    read, queries = [], []
    real_read, real_queries = nativebuild._read, nativebuild._queries
    monkeypatch.setattr(nativebuild, "_read", lambda con, lines, ordinal, fields, engine: (
        read.append(fields), real_read(con, lines, ordinal, fields, engine))[1])
    monkeypatch.setattr(nativebuild, "_queries", lambda *a: (queries.append(real_queries(*a)), queries[-1])[1])
    folder = big_run(12, tmp_path / "run", turns=2, tasks=3)
    run = open_run(folder)
    read.clear(), queries.clear()
    assert len(getattr(run, table)()) > 0
    assert _listed_tables(folder / ".rollkit" / "traces.jsonl") == [[t for t in TABLES if t in ("rollouts", table)]]
    (fields,), (query,) = read, [q[table] for q in queries]
    # (and the values typed per part, which a part holding none of leaves out of the query; whether a call's
    # reply may be a message, which decides whether the calls read the messages)
    query += " ".join(nativebuild._FREE[name] for name in nativebuild._FREE_IN.get(table, ()))
    query += nativebuild._FOLLOWS if table == "calls" else ""
    named = {name for name in nativebuild._TRACE_FIELDS if re.search(rf"\bt\.{name}\b", query)}
    assert set(fields) == named, table
    for name, kind in fields.items():  # and of a field's own fields (a call's), those the query names
        inner = kind[0] if isinstance(kind, list) else kind
        if isinstance(inner, dict):
            assert {k for k in inner if not re.search(rf'\.("?){k}\1(?!\w)', query)} == set(), (table, name)


async def test_the_calls_look_for_a_reply_that_is_a_message_in_a_part_s_first_lines_only(tmp_path, monkeypatch):
    # A part's calls read the messages where its first lines (_FOLLOW_PROBE
    # bytes) give a call's request length; a part whose first such call
    # comes later is read without them, then again with them (the values
    # tell): the Python build's calls either way.
    from rollkit.tables import nativebuild

    arithmetic = await rk.evaluate_async(demo_agent(), arithmetic_tasks(4), repeats=2, progress=False)
    source = rk.save(arithmetic.traces, tmp_path / "plain" / "t.jsonl")
    first = nativebuild._NUMBERED_REQUEST.search(source.read_bytes()).start()
    read = []
    real = nativebuild._read
    monkeypatch.setattr(nativebuild, "_read", lambda con, lines, ordinal, fields, engine: (
        read.append("messages" in fields), real(con, lines, ordinal, fields, engine))[1])
    for probe, asked in ((first + 30, [True]), (first, [False, True])):
        monkeypatch.setattr(nativebuild, "_FOLLOW_PROBE", probe)
        read.clear()
        native, builds = _build(source, tmp_path / f"native-{probe}", True, monkeypatch, ("rollouts", "calls"))
        python, _ = _build(source, tmp_path / f"python-{probe}", False, monkeypatch, ("rollouts", "calls"))
        assert builds == ["native"] and read[1:] == asked, (probe, read)
        assert native["calls"][0].equals(python["calls"][0])
