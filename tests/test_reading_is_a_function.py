"""Reading a file is a function of its content: the same file loaded twice,
from another folder, or rewritten with its keys in another order gives the
same traces. What breaks this is a value drawn from the reader's own world
instead of the file (a random id, the clock at load time, where the file
lay); checked over every real fixture, whatever format it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import rollkit as rk

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _trace_files() -> list[Path]:
    """Every fixture rk.load reads on its own (verifiers' metadata.json and
    the provenance notes are not trace files)."""
    found = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.suffix != ".md" and path.name != "metadata.json":
            found.append(path)
    return found


def _data(traces: list[rk.Trace], *, keep_id: bool = True) -> list[dict[str, Any]]:
    out = []
    for trace in traces:
        data = trace.model_dump(mode="json")
        data["info"].pop("file", None)  # where the file lay: the one thing that may differ
        if not keep_id:
            data.pop("id")
        out.append(data)
    return out


def test_every_real_file_reads_the_same_twice_and_from_another_folder(tmp_path: Path):
    files = _trace_files()
    assert len(files) >= 90, len(files)
    differ = {}
    for path in files:
        first = _data(rk.load(path, errors="skip"))
        copy = tmp_path / path.parent.name
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(path.parent, copy, ignore=shutil.ignore_patterns(".rollkit"))
        again, moved = _data(rk.load(path, errors="skip")), _data(rk.load(copy / path.name, errors="skip"))
        if again != first or moved != first:
            differ[str(path.relative_to(FIXTURES))] = _first_difference(first, again if again != first else moved)
        if len({t["id"] for t in first}) != len(first):  # a file's traces are as many ids (several per line too)
            differ[str(path.relative_to(FIXTURES))] = "two traces share an id"
    assert differ == {}


def _first_difference(a: Any, b: Any, at: str = "") -> str:
    if type(a) is not type(b):
        return f"{at}: {a!r:.80} vs {b!r:.80}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{at}.{key}")
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{at}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{at}[{i}]")
    return f"{at}: {a!r:.80} vs {b!r:.80}"


def _reordered(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reordered(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


def _json_records(path: Path) -> tuple[list[Any], bool] | None:
    if path.suffix in (".eval",) or path.read_bytes()[:1].lstrip() not in (b"{", b"["):
        return None
    text = path.read_text()
    if path.suffix != ".jsonl":
        try:
            return [json.loads(text)], False
        except ValueError:
            pass
    return [json.loads(line) for line in text.splitlines() if line.strip()], True


def _unordered(value: Any) -> Any:
    """What may follow the order of an object's keys, as the file gave
    them: tool arguments kept as their text (compared parsed), and the
    scorers' names listed from inspect's `scores` object (compared sorted)."""
    if isinstance(value, dict):
        return {k: json.loads(v) if k == "arguments" and isinstance(v, str) and v[:1] == "{"
                else sorted(v) if k == "scorers" and isinstance(v, list) and all(isinstance(x, str) for x in v)
                else _unordered(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_unordered(v) for v in value]
    return value


@pytest.mark.parametrize("path", [p for p in _trace_files() if p.suffix != ".eval"],
                         ids=lambda p: str(p.relative_to(FIXTURES)))
def test_a_file_with_its_keys_sorted_reads_as_the_original(tmp_path: Path, path: Path):
    parsed = _json_records(path)
    if parsed is None:
        pytest.skip("not JSON")
    records, lines = parsed
    copy = tmp_path / path.parent.name
    shutil.copytree(path.parent, copy, ignore=shutil.ignore_patterns(".rollkit"))
    out = [json.dumps(_reordered(r)) for r in records]
    (copy / path.name).write_text("\n".join(out) + "\n" if lines else out[0])
    try:
        original = rk.load(path)
    except rk.TraceFileError:
        pytest.skip("the tool's reader refuses it whole; what errors='skip' salvages then goes through "
                    "inspect's streaming header reader, which reads the keys in the order written")
    before = _unordered(_data(original, keep_id=False))
    after = _unordered(_data(rk.load(copy / path.name), keep_id=False))
    assert after == before, _first_difference(before, after)


def test_two_equal_records_stay_two_traces_with_their_own_ids(tmp_path: Path):
    line = json.dumps({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})
    path = tmp_path / "chats.jsonl"
    path.write_text(f"{line}\n{line}\n")
    first, second = rk.load(path)
    assert first.messages == second.messages
    assert first.id != second.id
    assert [t.id for t in rk.load(path)] == [first.id, second.id]


def test_an_id_digests_what_each_line_draws_on_the_metadata_beside_it_included(tmp_path: Path):
    """A verifiers line is read with the run's metadata.json: the same
    lines beside another run's metadata are other traces, with other ids;
    beside the same metadata, the same ids, wherever the folder lies."""
    line = json.dumps({"prompt": [{"role": "user", "content": "2+2?"}],
                       "completion": [{"role": "assistant", "content": "4"}], "reward": 1.0, "example_id": 0})
    ids = {}
    for name, model in (("a", "model-a"), ("b", "model-b"), ("c", "model-a")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text(f"{line}\n")
        (tmp_path / name / "metadata.json").write_text(json.dumps({"env_id": "arith", "model": model}))
        [ids[name]] = [(t.id, t.agent["model"]) for t in rk.load(tmp_path / name / "results.jsonl")]
    assert ids["a"][1] == "model-a" and ids["b"][1] == "model-b"
    assert ids["a"][0] != ids["b"][0] and ids["a"] == ids["c"]


def test_an_error_the_source_did_not_time_gets_the_runs_end_marked_inferred(tmp_path: Path):
    """mini-swe-agent writes an exit status, not when it happened: the error
    is placed at the run's end (its last timed moment; 0.0 when the source
    timed nothing) and said to be inferred."""
    path = FIXTURES / "mini-swe-agent"
    files = sorted(p for p in path.iterdir() if p.suffix == ".json")
    failed = [t for f in files for t in rk.load(f) if t.errors]
    assert failed, "a fixture with an error"
    for trace in failed:
        assert "errors.time" in trace.info["inferred"]
        ends = [c.end for c in trace.model_calls] + [p.end for p in trace.phases.values()]
        assert trace.errors[0].time == max(ends, default=0.0)
    assert sorted(t.errors[0].time > 0 for t in failed) == [False, True]
