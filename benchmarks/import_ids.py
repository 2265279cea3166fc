"""Benchmark: what an imported trace's id costs (rollkit/interop/formats/_build.py `_content_id`).

An imported trace's id is a digest of what was read and where in the file:
a JSON line's bytes (with what beside the file every line draws on), else,
for a record inside a whole document, the trace as built. Prints, for the
real fixtures of every format (tests/fixtures, each loaded 3 times) and a
made-up JSON lines file of chat transcripts, the load time, the time spent
digesting ids and its share, and the microseconds per id.

Run: PYTHONPATH=. python benchmarks/import_ids.py [--records 5000] [--turns 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import rollkit as rk
from rollkit.interop.formats import _build
from _common import Results, json_option

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
_spent = [0.0, 0]
_digest = _build._content_id


def _timed(trace, where):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = _digest(trace, where)
    _spent[0] += time.perf_counter() - t
    _spent[1] += 1
    return out


def _measure(paths: list[Path], label: str, results: Results, repeat: int = 1) -> None:
    _spent[:] = [0.0, 0]
    t = time.perf_counter()
    n = sum(len(rk.load(p, errors="skip")) for _ in range(repeat) for p in paths)
    total = time.perf_counter() - t
    print(f"{label}: {n} traces, load {total:.3f} s, ids {_spent[0]:.3f} s ({100 * _spent[0] / total:.1f}%, "
          f"{1e6 * _spent[0] / max(_spent[1], 1):.0f} us per id)", flush=True)
    results.add(f"{label.strip()}: digesting ids, share of the load", 100 * _spent[0] / total, "%")
    results.add(f"{label.strip()}: per id", 1e6 * _spent[0] / max(_spent[1], 1), "µs")


def _made_up(path: Path, records: int, turns: int) -> None:
    with open(path, "w") as f:
        for i in range(records):
            messages = [{"role": "system", "content": "You are a careful assistant. " * 10}]
            for j in range(turns):
                messages.append({"role": "user", "content": f"question {i}.{j} " + "lorem ipsum dolor sit amet " * 20})
                messages.append({"role": "assistant", "content": f"answer {i}.{j} " + "consectetur adipiscing elit " * 30})
            f.write(json.dumps({"messages": messages}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5000, help="transcripts in the made-up file")
    parser.add_argument("--turns", type=int, default=20, help="user and assistant message pairs per transcript")
    json_option(parser)
    args = parser.parse_args()
    results = Results("import_ids.py", "what an imported trace's id (a digest of what was read) costs rk.load")
    warnings.simplefilter("ignore")  # the fixtures' skipped samples say so on every load
    _build._content_id = _timed
    files = [p for p in sorted(FIXTURES.rglob("*"))
             if p.is_file() and p.suffix != ".md" and p.name != "metadata.json" and ".rollkit" not in p.parts]
    for path in files:  # warm: imports, parsers
        rk.load(path, errors="skip")
    _measure(files, f"real fixtures ({len(files)} files)", results, repeat=3)
    by_format: dict[str, list[Path]] = {}
    for path in files:
        by_format.setdefault(path.relative_to(FIXTURES).parts[0], []).append(path)
    for name, paths in sorted(by_format.items()):
        _measure(paths, f"  {name}", results, repeat=3)
    with tempfile.TemporaryDirectory(prefix="rk-import-ids-") as root:
        made = Path(root) / "chats.jsonl"
        _made_up(made, args.records, args.turns)
        _measure([made], f"made-up chats.jsonl ({made.stat().st_size / 1e6:.0f} MB, {args.records} records)", results)
    results.save(args.json)


if __name__ == "__main__":
    main()
