"""One reading of a trace line for every reader (issue 47): a run file
holding hostile lines opens with the same tables whether the Python build
makes them (a small file) or the native one (a big file; forced here on a
small one: _NATIVE_MIN_BYTES), and rk.load reads the same traces, or all
three refuse with the same error naming the file and the line. The lines
are generated (hypothesis): a key written twice at any level, first or
last; NaN, Infinity (nan, -INF...), a number past a double's range, a number written as a
string, an object, a list or a boolean where a number belongs, a fraction
or text (or null) where an integer belongs; nesting;
invalid UTF-8, a NUL byte (raw or escaped), a lone surrogate; a BOM, CRLF
line ends, a blank line in the middle, a last line without its newline or
cut short. The same for the tables a run writes as it goes
(rollkit.tables.livetables), from its first line and when it resumes a
half-written file. What is not caught yet is held as strict expected
failures, each named. The rule itself is in rollkit.tables.nativebuild's
docstring."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import rollkit as rk
from rollkit.examples.bigrun import big_run
from rollkit.tables import columns, livetables, nativebuild
from rollkit.tables.columns import TABLES, TableSet
from rollkit.tables.livetables import TraceLog
from rollkit.tables.runfolder import _repair_torn_tail

BOM = b"\xef\xbb\xbf"


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[dict[str, Any]]:
    folder = big_run(5, tmp_path_factory.mktemp("base") / "run", tasks=2, turns=2)
    return [json.loads(line) for line in (folder / "traces.jsonl").read_bytes().splitlines()]


# ---- hostile lines --------------------------------------------------------------

def _paths(value: Any, at: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every (path, value) in a record, containers included."""
    found = [(at, value)]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found.extend(_paths(item, (*at, key)))
    return found


def _dump(value: Any, at: tuple, change: tuple) -> bytes:
    """`value` as compact JSON, `change` applied where its path is `at`:
    ("dup", path, key, decoy, decoy_first) writes the key twice, ("text",
    path, raw) writes raw JSON text for the value, ("inside", path, raw)
    puts raw bytes inside a string."""
    kind, where = change[0], change[1]
    if where == at and kind == "text":
        return change[2]
    if where == at and kind == "inside":
        return json.dumps(value).encode()[:-1] + change[2] + b'"'
    if isinstance(value, dict):
        pieces = []
        for key, item in value.items():
            name = json.dumps(key).encode() + b":"
            if kind == "dup" and where == at and key == change[2]:
                decoy = name + json.dumps(change[3]).encode()
                pieces.extend([decoy, name + _dump(item, (*at, key), change)] if change[4]
                              else [name + _dump(item, (*at, key), change), decoy])
            else:
                pieces.append(name + _dump(item, (*at, key), change))
        return b"{" + b",".join(pieces) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(_dump(item, (*at, i), change) for i, item in enumerate(value)) + b"]"
    return json.dumps(value).encode()


def _typed_numbers(structure: dict, at: tuple = (), kinds: tuple = ("DOUBLE", "DOUBLE[]")) -> set[tuple]:
    """The paths (list indices left out) of the real numbers the tables read
    (`kinds`: of the integers, ("BIGINT",))."""
    found = set()
    for key, kind in structure.items():
        kind = kind[0] if isinstance(kind, list) else kind
        if isinstance(kind, dict):
            found |= _typed_numbers(kind, (*at, key), kinds)
        elif kind in kinds or "DOUBLE" in kinds and kind.startswith("MAP(VARCHAR, DOUBLE"):
            found.add((*at, key))
    return found


# Where a real number written otherwise is what the tables would read (a field
# the tables do not read is checked by rk.load alone: the tables do not
# check a line against the trace schema; free-typed values, e.g. limits,
# are typed per part, so a run's small live parts may type them apart).
_TYPED = _typed_numbers(nativebuild._TRACE_FIELDS) - {("segments", "end")}  # read between two


# The integers the tables read, and what is written there otherwise.
_INTEGERS = _typed_numbers(nativebuild._TRACE_FIELDS, kinds=("BIGINT",))
_NOT_INTEGERS = [b"2.5", b"-0.5", b'"2.5"', b'"7"', b"2.0", b"1e400", b'"abc"', b"[1]", b'{"v": 1}', b"null",
                 b"nan", b"-INF"]


def _read(path: tuple) -> bool:
    named = tuple(p for p in path if not isinstance(p, int))
    return named in _TYPED or named[:-1] in _TYPED  # a map's value or a list's item: its field's path


_FREE_TEXTS: dict[str, list[tuple]] = {}


def _free_texts(record: dict[str, Any]) -> list[tuple]:
    """The paths of the strings any text is a valid value of (not a role, a
    phase's name...): what lands inside them is all that makes the line hostile."""
    if record["id"] not in _FREE_TEXTS:
        _FREE_TEXTS[record["id"]] = [p for p, v in _paths(record) if isinstance(v, str)
                                     and _valid_with(record, p[:-1], p[-1], v + "x\u00e9")]
    return _FREE_TEXTS[record["id"]]


def _valid_with(record: dict[str, Any], path: tuple, key: Any, value: Any) -> bool:
    changed = json.loads(json.dumps(record))
    holder = changed
    for part in path:
        holder = holder[part]
    holder[key] = value
    try:
        rk.Trace.model_validate_json(json.dumps(changed))
    except ValueError:
        return False
    return True


_NUMBERS = [b"NaN", b"Infinity", b"-Infinity", b'"1.5"', b'"abc"', b'{"v": 1}', b"[1]", b"true",
            b"null", b"2.5", b"7", b"1e400", b"-1e400", b"1e-400", b"nan", b"-INF", b"iNfInItY"]
_INSIDE = [b"\xff", b"\xc3", b"\x00", b"\\u0000", b"\\ud800", b"\\udc00x", b"\\ud83d\\ude00", b"\xe2\x82\xac"]


@st.composite
def hostile_line(draw: Any, record: dict[str, Any]) -> bytes:
    places = _paths(record)
    kind = draw(st.sampled_from(["dup", "number", "integer", "inside", "deep", "none"]))
    if kind == "dup":
        objects = [(p, v) for p, v in places if isinstance(v, dict) and v]
        path, obj = draw(st.sampled_from(objects))
        key = draw(st.sampled_from(sorted(obj)))
        value = obj[key]
        # The other value: of the same JSON type (a wrong type is the "number" kind's), or the
        # container itself where the last one is the record's own.
        decoy = (not value if isinstance(value, bool) else value + draw(st.integers(1, 3))
                 if isinstance(value, (int, float)) else value + "x" if isinstance(value, str) else value)
        # The decoy last only where rk.load takes its value (a role "systemx" is no
        # trace's: the tables do not check values against the schema, rk.load does).
        last_is_decoy = draw(st.booleans()) and not isinstance(value, (dict, list)) and _valid_with(record, path,
                                                                                                    key, decoy)
        return _dump(record, (), ("dup", path, key, decoy, not last_is_decoy))
    if kind == "number":
        numbers = [p for p, v in places if isinstance(v, (int, float)) and not isinstance(v, bool) and _read(p)]
        return _dump(record, (), ("text", draw(st.sampled_from(numbers)), draw(st.sampled_from(_NUMBERS))))
    if kind == "integer":
        integers = [p for p, v in places if isinstance(v, int) and not isinstance(v, bool)
                    and tuple(x for x in p if not isinstance(x, int)) in _INTEGERS]
        return _dump(record, (), ("text", draw(st.sampled_from(integers)), draw(st.sampled_from(_NOT_INTEGERS))))
    if kind == "inside":
        texts = _free_texts(record)
        return _dump(record, (), ("inside", draw(st.sampled_from(texts)), draw(st.sampled_from(_INSIDE))))
    if kind == "deep":  # nesting rk.load's parser reads (deeper: test_nesting_past_rk_load_s_parser_below)
        depth = draw(st.integers(1, 150))
        deep = dict(record, task=dict(record["task"], data=dict(record["task"]["data"], deep=0)))
        return _dump(deep, (), ("text", ("task", "data", "deep"), b"[" * depth + b"]" * depth))
    return _dump(record, (), ("none", None))


@st.composite
def hostile_file(draw: Any, records: list[dict[str, Any]]) -> bytes:
    lines = [_dump(r, (), ("none", None)) for r in records]
    for at in sorted(draw(st.sets(st.integers(0, len(lines) - 1), min_size=1, max_size=3))):
        lines[at] = draw(hostile_line(records[at]))
    end = b"\r\n" if draw(st.booleans()) else b"\n"
    data = [line + end for line in lines]
    if draw(st.booleans()):
        data.insert(draw(st.integers(1, len(data) - 1)), draw(st.sampled_from([b"\n", b"  \n", b"\r\n"])))
    last = draw(st.sampled_from(["whole", "no newline", "cut"]))
    if last == "no newline":
        data[-1] = data[-1].rstrip(b"\r\n")
    elif last == "cut":
        data[-1] = data[-1][:draw(st.integers(1, len(data[-1]) - 2))]
    return (BOM if draw(st.booleans()) else b"") + b"".join(data)


# ---- what each reader makes of a file --------------------------------------------

@contextmanager
def _native(forced: bool):
    """The native build at any size (forced), or the Python build (a small file's)."""
    saved = columns._NATIVE_MIN_BYTES
    columns._NATIVE_MIN_BYTES = 0 if forced else saved
    try:
        yield
    finally:
        columns._NATIVE_MIN_BYTES = saved


def _values(table: pa.Table) -> dict[str, list]:
    def plain(x: Any) -> Any:
        return "nan" if isinstance(x, float) and math.isnan(x) else x

    return {name: [plain(x) for x in table.column(name).to_pylist()] for name in table.column_names}


def _tables(tables: TableSet) -> tuple:
    read = {}
    for table in TABLES:
        parts = [pq.read_table(f).replace_schema_metadata(None) for f in tables.files[table]]
        read[table] = _values(pa.concat_tables(parts, promote_options="permissive")) if parts else {}
    return "tables", read


def _opened(source: Path, forced: bool) -> tuple:
    cache = Path(tempfile.mkdtemp(dir=source.parent))
    try:
        with _native(forced):
            return _tables(TableSet(source, cache=cache, progress=False))
    except rk.TraceFileError as exc:
        return "refused", str(exc)
    finally:
        shutil.rmtree(cache)


def _loaded(source: Path) -> tuple:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn last line, a newer rollkit's fields
            traces = rk.load(source)
    except rk.TraceFileError as exc:
        return "refused", str(exc)
    return "traces", [t.id for t in traces], [t.task.key for t in traces]


def _difference(a: tuple, b: tuple) -> str:
    if a[0] != "tables" or b[0] != "tables":
        return f"{a[0]}: {a[1] if a[0] == 'refused' else ''} / {b[0]}: {b[1] if b[0] == 'refused' else ''}"
    return "; ".join(f"{table}.{name}: {a[1][table].get(name)} / {b[1][table].get(name)}" for table in TABLES
                     for name in sorted(set(a[1][table]) | set(b[1][table]))
                     if a[1][table].get(name) != b[1][table].get(name))[:1500]


def _agree(source: Path) -> tuple:
    """Both builds and rk.load agree on `source`; their common outcome. The
    tables wait for a last line's newline (it may be being written), where
    rk.load reads a whole one (a newline lost): rk.load reads the file up
    to its last newline here."""
    python, native = _opened(source, False), _opened(source, True)
    data = source.read_bytes()
    whole = source.with_suffix(".whole.jsonl")
    whole.write_bytes(data[:data.rfind(b"\n") + 1])
    loaded = _loaded(whole)
    if loaded[0] == "refused":
        loaded = "refused", loaded[1].replace(str(whole), str(source))
    assert python == native, _difference(python, native)
    if python[0] == "refused":
        assert loaded == python
    else:
        rollouts = python[1]["rollouts"]
        assert loaded == ("traces", rollouts["id"], rollouts["task_key"]), loaded[1]
    return python


_CHEAP = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])


@_CHEAP
@given(data=st.data())
def test_every_reader_reads_a_hostile_file_alike_at_either_size(records, tmp_path, data):
    source = tmp_path / "traces.jsonl"
    source.write_bytes(data.draw(hostile_file(records)))
    _agree(source)


@_CHEAP
@given(data=st.data(), forced=st.booleans())
def test_a_resumed_half_written_file_gets_the_tables_a_fresh_open_makes(records, tmp_path, data, forced,
                                                                         monkeypatch):
    # A run killed mid-write left `before` (its last line maybe cut short);
    # the resume cuts off a torn line, as rk.evaluate's does, and its log
    # builds the tables of what is there, then writes the rest with theirs.
    # Cut at 0: a run that writes every line itself, its tables as it goes
    # (its live parts, natively or in Python), and the first open after it.
    monkeypatch.setattr(livetables, "_LINES", 2)
    whole = data.draw(hostile_file(records)).splitlines(keepends=True)
    cut = data.draw(st.integers(1, len(whole)))
    source = tmp_path / f"run-{cut}-{forced}.jsonl"
    source.write_bytes(b"".join(whole[:cut]))
    _repair_torn_tail(source)
    live: tuple | None = None
    try:
        with _native(forced), TraceLog(source) as log:
            for line in whole[cut:]:
                if line.endswith(b"\n"):  # a resumed run writes whole lines
                    log.write(line)
        live = _tables(TableSet(source, progress=False))
    except rk.TraceFileError as exc:
        live = "refused", str(exc)
    finally:
        shutil.rmtree(source.parent / columns.CACHE_DIR, ignore_errors=True)
    assert live == _agree(source)


@settings(_CHEAP, max_examples=12)
@given(data=st.data(), forced=st.booleans())
def test_a_run_s_live_tables_read_hostile_lines_as_a_fresh_open_does(records, tmp_path, data, forced, monkeypatch):
    # A run writes every line itself (rollkit.tables.livetables), its tables
    # as it goes, two lines a part (natively, or in Python); the first open
    # of its file reads those parts, and agrees with both builds and rk.load.
    monkeypatch.setattr(livetables, "_LINES", 2)
    lines = [line for line in data.draw(hostile_file(records)).splitlines(keepends=True) if line.endswith(b"\n")]
    source = tmp_path / f"run-{forced}-{len(list(tmp_path.iterdir()))}.jsonl"
    try:
        with _native(forced), TraceLog(source, mode="xb") as log:
            for line in lines:
                log.write(line)
        parts = {json.loads(p.read_text())["build"] for p in (source.parent / columns.CACHE_DIR).rglob("part-*.json")}
        live = _tables(TableSet(source, progress=False))
    except rk.TraceFileError as exc:
        parts, live = set(), ("refused", str(exc))
    finally:
        shutil.rmtree(source.parent / columns.CACHE_DIR, ignore_errors=True)
    assert live == _agree(source)
    # Read, its parts are the run's own (native ones only where forced; a part DuckDB must not read is Python's).
    assert live[0] == "refused" or set() < parts <= {"native" if forced else "python", "python"}


def test_the_rule_on_the_issue_s_lines(tmp_path, records):
    # The lines that differed (issue 47), each in a file of its own.
    record = records[1]
    reward = ("rewards", next(iter(record["rewards"])))
    cases = {
        "id twice": (("dup", (), "id", "first", True), "tables"),
        "NaN": (("text", ("info", "repeat"), b"NaN"), "field info.repeat: NaN or Infinity"),
        "Infinity": (("text", reward, b"-Infinity"), f"field {'.'.join(reward)}: NaN or Infinity"),
        "1e400": (("text", ("info", "repeat"), b"1e400"), "tables"),
        "as a string": (("text", reward, b'"1.0"'), "tables"),
        "as an object": (("text", reward, b'{"v": 1.0}'), f"field {'.'.join(reward)}: Input should be a valid number"),
    }
    outcomes = {}
    for name, (change, expect) in cases.items():
        source = tmp_path / f"{len(outcomes)}.jsonl"
        source.write_bytes(_dump(records[0], (), ("none", None)) + b"\n" + _dump(record, (), change) + b"\n")
        outcomes[name] = _agree(source)
        if expect == "tables":
            assert outcomes[name][0] == "tables", (name, outcomes[name])
        else:
            assert outcomes[name][0] == "refused" and f"{source}: line 2 " in outcomes[name][1], outcomes[name]
            assert expect in outcomes[name][1]
    assert outcomes["id twice"][1]["rollouts"]["id"][1] == record["id"]  # the last of the two
    assert outcomes["1e400"][1]["rollouts"]["repeat"][1] == math.inf
    assert outcomes["as a string"][1]["rollouts"]["reward"][1] == 1.0


def _deep(record: dict[str, Any]) -> dict[str, Any]:
    return dict(record, task=dict(record["task"], data=dict(record["task"]["data"], deep=0)))


# What the native build reads and rk.load (and the Python build) refuses,
# each a pass over the bytes to catch (rollkit.tables.nativebuild's docstring).
_UNCAUGHT = {
    "nesting past rk.load's parser": lambda r: _dump(_deep(r), (), ("text", ("task", "data", "deep"),
                                                                     b"[" * 5000 + b"]" * 5000)),
    "nan": lambda r: _dump(r, (), ("text", ("task", "data", "answer"), b"nan")),
    "-inf": lambda r: _dump(r, (), ("text", ("task", "data", "answer"), b"-inf")),
    "a trailing comma": lambda r: _dump(r, (), ("text", ("task", "data"), json.dumps(r["task"]["data"]).encode()[:-1]
                                                + b",}")),
}


@pytest.mark.xfail(strict=True, reason="not caught natively (rollkit.tables.nativebuild): a pass over the bytes")
@pytest.mark.parametrize("case", sorted(_UNCAUGHT))
def test_what_only_a_pass_over_the_bytes_would_catch(tmp_path, records, case):
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_UNCAUGHT[case](records[0]) + b"\n")
    _agree(source)


@pytest.mark.parametrize("where", [("model_calls", 0, "index"), ("model_calls", 1, "segment"),
                                   ("model_calls", 0, "cum_turns"), ("model_calls", 1, "new_input_tokens"),
                                   ("model_calls", 0, "usage", "input_tokens")])
@pytest.mark.parametrize("text", [b"2.5", b"-0.5", b'"2.5"'])
def test_an_integer_written_otherwise(tmp_path, records, where, text):
    # DuckDB's reader and int() make 2.5 2; rk.load refuses it, and so do both builds.
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(records[0], (), ("text", where, text)) + b"\n")
    outcome = _agree(source)
    assert outcome[0] == "refused" and f"{source}: line 1 " in outcome[1], outcome
    assert ".".join(map(str, where)) in outcome[1], outcome


@pytest.mark.parametrize("text", [b"2.0", b"7"])
def test_a_whole_number_in_an_integer_field_is_read(tmp_path, records, text):
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(records[0], (), ("text", ("model_calls", 0, "cum_turns"), text)) + b"\n")
    assert _agree(source)[1]["calls"]["cum_turns"][0] == int(float(text))


@pytest.mark.parametrize("where", [(items, 0, name) for items, names in nativebuild._NOT_NULL.items() for name in names])
def test_null_where_the_schema_wants_a_number(tmp_path, records, where):
    # DuckDB's reader makes null what it makes a missing key (the default:
    # 0); rk.load and the Python build refuse it (a call's running totals,
    # a segment's start and charge), so the native build reads
    # such a line again (nativebuild._doubt) and leaves the part to Python.
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(records[0], (), ("text", where, b"null")) + b"\n")
    outcome = _agree(source)
    assert outcome[0] == "refused" and f"{source}: line 1 " in outcome[1] and ".".join(map(str, where)) in outcome[1]


@pytest.mark.parametrize("segment", ["start missing", "null", "start null in the second"])
def test_a_segment_without_its_start_is_refused_alike(tmp_path, records, segment):
    # The rollouts read a segment's start only where one follows another (the
    # wait); the schema wants one in each, and rk.load refuses the line
    # without it: both builds check every segment's (nativebuild._REQUIRED, rows).
    first = records[0]["segments"][0]
    segments = {"start missing": [{k: v for k, v in first.items() if k != "start"}], "null": [None],
                "start null in the second": [first, dict(first, index=1, start=None)]}[segment]
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(records[1], (), ("none", None)) + b"\n"
                       + _dump(dict(records[0], segments=segments), (), ("none", None)) + b"\n")
    outcome = _agree(source)
    assert outcome[0] == "refused" and f"{source}: line 2 " in outcome[1] and "segments." in outcome[1], outcome


def test_running_totals_left_out_are_read_natively_as_their_defaults(tmp_path, records):
    # A missing key is the schema's default to every reader; _doubt doubts
    # it with a null (DuckDB's reader reads them alike), Python reads the
    # line again and the part stays native.
    calls = [{k: v for k, v in c.items() if k not in nativebuild._NOT_NULL["model_calls"]}
             for c in records[0]["model_calls"]]
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(dict(records[0], model_calls=calls), (), ("none", None)) + b"\n")
    calls_table = _agree(source)[1]["calls"]
    assert calls_table["cum_turns"] == calls_table["cum_agent_time"] == [0, 0]
    with _native(True):
        TableSet(source, cache=tmp_path / "cache", progress=False)
    assert [json.loads(p.read_text())["build"] for p in (tmp_path / "cache").glob("part-*.json")] == ["native"]


def test_null_weight_is_refused_where_a_reward_may_be_null(tmp_path, records):
    # A trace's reward or metric may be None, its weight not (core.trace):
    # DuckDB reads both nulls as missing (a weight of 1.0).
    name = next(iter(records[0]["reward_weights"]))
    for at, table in ((("reward_weights", name), "refused"), (("rewards", name), "tables")):
        source = tmp_path / f"{at[0]}.jsonl"
        source.write_bytes(_dump(records[0], (), ("text", at, b"null")) + b"\n")
        assert _agree(source)[0] == table


@pytest.mark.parametrize("where", [("model_calls", 0, "start"), ("model_calls", 1, "cum_agent_time"),
                                   ("phases", "agent", "end"), ("segments", 0, "charged"), ("phases", "boot", "start"),
                                   ("model_calls", 0, "cum_turns"), ("model_calls", 1, "new_input_tokens")])
@pytest.mark.parametrize("text", [b"NAN", b"nan", b"-inf", b"INFINITY", b"-Infinity"])
def test_a_number_json_does_not_have_in_a_field_the_tables_read(tmp_path, records, where, text):
    # DuckDB's parser reads every spelling of NaN and infinity; a real the
    # tables read that is not finite has its line read again by Python's json.
    assert where in dict(_paths(records[0]))
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(records[1], (), ("none", None)) + b"\n" + _dump(records[0], (), ("text", where, text))
                       + b"\n")
    outcome = _agree(source)
    assert outcome[0] == "refused" and f"{source}: line 2 " in outcome[1], outcome


@pytest.mark.parametrize("forced", [False, True])
def test_two_bad_lines_the_first_named(tmp_path, records, forced):
    # A first open reads the rollouts' fields alone: line 1, bad in a call's
    # cum_agent_time only, passes it, line 2 does not; rk.load names line 1,
    # and so does the build on its way to the error (columns._first_refused).
    # The first open alone (forced natively, or in Python), then _agree's builds.
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(records[0], (), ("text", ("model_calls", 0, "cum_agent_time"), b'"abc"')) + b"\n"
                       + _dump(records[1], (), ("text", ("model_calls", 0, "start"), b"NaN")) + b"\n")
    with _native(forced), pytest.raises(rk.TraceFileError) as refused:
        TableSet(source, cache=tmp_path / "cache", progress=False)
    assert f"{source}: line 1 " in str(refused.value) and "model_calls.0.cum_agent_time" in str(refused.value)
    assert _agree(source)[1] == str(refused.value)


def test_a_newer_rollkit_s_line_before_a_bad_one_is_not_named(tmp_path, records):
    # On the way to the error the lines before are validated again without
    # making their records (store.load_refuses); a line with a newer
    # rollkit's fields loads (they are left out), so the bad one after it is named.
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(dict(records[0], from_a_newer_rollkit=1), (), ("none", None)) + b"\n"
                       + _dump(records[1], (), ("text", ("model_calls", 0, "start"), b'"abc"')) + b"\n")
    outcome = _agree(source)
    assert outcome[0] == "refused" and f"{source}: line 2 " in outcome[1], outcome


@pytest.mark.parametrize("role", [b'"systemx"', b"null", b"3"])
def test_a_role_no_message_has_is_refused_alike(tmp_path, records, role):
    # Neither build checks a line against the trace schema (pydantic costs
    # many builds); a message's role both check (the messages' own pass).
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(records[0], (), ("text", ("messages", 0, "role"), role)) + b"\n")
    outcome = _agree(source)
    assert outcome[0] == "refused" and f"{source}: line 1 " in outcome[1] and "messages.0" in outcome[1], outcome


@pytest.mark.parametrize("where, text, table, column, value", [
    (("phases", "boot", "start"), b"-1e400", "phases", "offset", None),  # -inf less -inf: NaN, missing
    (("phases", "agent", "end"), b"1e400", "rollouts", "phase.agent", math.inf),
    (("model_calls", 0, "end"), b"1e999", "rollouts", "model_time", math.inf)])
def test_infinite_times_read_alike(tmp_path, records, where, text, table, column, value):
    # A number past a double's range is infinity; infinity less infinity is
    # NaN, which the Python build's Arrow conversion makes missing
    # (from_pandas), and the native build as well (_nan_as_null).
    source = tmp_path / "traces.jsonl"
    source.write_bytes(_dump(records[0], (), ("text", where, text)) + b"\n")
    tables = _agree(source)[1]
    assert tables[table][column][0] == value
