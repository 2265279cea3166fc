"""Benchmark: a filter a user types on the locked connection (rollkit.tables.filters)
against the same condition on the owner's connection (run.sql), issue 48.

Writes a made-up run (rollkit.examples.big_run), opens it, then for each
filter times `run.where(filter, "id")` (a locked DuckDB made anew per call:
views, settings, the parse check, the time limit's timer) and
`run.sql("select id from rollouts where " + filter)` (the owner's
connection, kept), each the median of --repeat calls in this process, and
prints both and their ratio.

Run: PYTHONPATH=. python benchmarks/filters.py [--n 100000] [--repeat 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import rollkit as rk
from rollkit.examples.bigrun import big_run
from _common import Results, json_option

FILTERS = ["reward = 1", "turns > 0 and task_key like 'task-1%'", "has_error or is_truncated"]


def _median(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    json_option(parser)
    args = parser.parse_args()
    results = Results("filters.py", f"a typed filter on the locked connection (run.where) against run.sql on the owner's "
                      f"connection, {args.n:,} made-up rollouts, median of {args.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        run = rk.open_run(big_run(args.n, Path(tmp) / "run"), progress=False)
        for text in FILTERS:
            run.where(text, "id")  # builds what the filter names (is_truncated: the turns table) once
            locked = _median(lambda: run.where(text, "id"), args.repeat)
            rows = run.where(text, "id").num_rows
            if "has_error" in text:  # the flags exist on the locked connection only: nothing to compare
                print(f"{args.n:,} rollouts, where {text!r}: {rows:,} rows; locked {locked * 1000:.1f} ms")
                results.add(f"run.where({text!r}), {rows:,} rows", locked * 1000, "ms")
                continue
            owner = _median(lambda: run.sql(f"select id from rollouts where {text}"), args.repeat)
            print(f"{args.n:,} rollouts, where {text!r}: {rows:,} rows; locked {locked * 1000:.1f} ms, "
                  f"owner's run.sql {owner * 1000:.1f} ms, ratio {locked / owner:.2f}")
            results.add(f"run.where({text!r}), {rows:,} rows", locked * 1000, "ms", owner * 1000, "run.sql, same condition")
    results.save(args.json)


if __name__ == "__main__":
    main()
