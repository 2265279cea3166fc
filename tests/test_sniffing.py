"""A file's format is recognised by what it holds, not by how its JSON is
laid out: the same records with their keys sorted (as `jq -S` and
`json.dumps(sort_keys=True)` write them), reversed, or pretty-printed are
claimed by the same format as the tool's own file. Checked over every real
fixture (every format rk.load reads; the folder grows with the corpus) and
rollkit's own trace file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import rollkit as rk
from rollkit.core.store import sniff_format
from rollkit.examples import arithmetic_tasks, demo_agent

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _json_files() -> list[Path]:
    """Every fixture that is a JSON document or JSON lines (not a zip)."""
    found = []
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.suffix in (".md", ".eval"):
            continue
        head = path.read_bytes()[:1].lstrip()
        if head in (b"{", b"["):
            found.append(path)
    return found


def _reordered(value: Any, how: str) -> Any:
    if isinstance(value, dict):
        items = [(k, _reordered(v, how)) for k, v in value.items()]
        items = sorted(items) if how == "sorted" else list(reversed(items)) if how == "reversed" else items
        return dict(items)
    if isinstance(value, list):
        return [_reordered(v, how) for v in value]
    return value


def _rewrite(path: Path, how: str) -> None:
    text = path.read_text()
    try:
        if path.suffix == ".jsonl":  # one record a line, even when there is one line
            raise ValueError
        records, lines = [json.loads(text)], False
    except ValueError:
        records, lines = [json.loads(line) for line in text.splitlines() if line.strip()], True
    indent = 2 if how == "pretty" and not lines else None
    out = [json.dumps(_reordered(r, how), indent=indent) for r in records]
    path.write_text("\n".join(out) + "\n")


@pytest.fixture(scope="module")
def rollkit_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("own") / "run"
    rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False, out=folder)
    return folder / "traces.jsonl"


@pytest.mark.parametrize("how", ["sorted", "reversed", "pretty"])
def test_every_format_is_recognised_whatever_the_order_of_its_keys(tmp_path: Path, rollkit_file: Path, how: str):
    files = _json_files()
    assert len(files) >= 7, files
    wrong = {}
    for original in [*files, rollkit_file]:
        # The whole folder comes along: some formats are a file and its neighbours.
        copy = tmp_path / original.parent.name
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(original.parent, copy, ignore=shutil.ignore_patterns(".rollkit"))
        expected = sniff_format(original).name
        _rewrite(copy / original.name, how)
        got = sniff_format(copy / original.name).name
        name = str(original.relative_to(original.parents[1]))
        if got != expected:
            wrong[name] = (expected, got)
    assert wrong == {}, f"once the keys were {how}: {wrong}"
