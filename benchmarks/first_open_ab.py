"""Benchmark: a big run's first open under two source trees, rounds alternated (issue 47).

Whether a change to the native build made a first open slower: the same
made-up run (rollkit.examples.bigrun, written once with the tree this
script runs under) opened by each tree given, each open in a fresh
process with PYTHONPATH set to that tree, the run's tables removed before
each (a first open) and its trace file read through once before the first
(in the page cache, as a run that just wrote it leaves it). The trees take
turns, the first of a round alternating, because the machine is shared and
its load drifts. A tree is a checkout of any commit (git worktree add).

Printed, for each tree: the median of its rounds of wall time, CPU time
(user and system, the whole process: DuckDB's threads too), minor page
faults and peak memory from the open to the rollouts frame, the least CPU
time of its rounds, and each median as a ratio to the first tree's.

Run: python benchmarks/first_open_ab.py --n 100000,1000000 --rounds 10 BASE_TREE NEW_TREE [--runs DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import Results, json_option, unit_of

MEASURED = Results("first_open_ab.py", "a big made-up run's first open under two source trees, each open in a fresh "
                   "process, rounds alternated; medians, the baseline the first tree's")

FIRST_OPEN = r'''
import json, resource, sys, time
from rollkit.tables.lazyrun import open_run
before = resource.getrusage(resource.RUSAGE_SELF)
started = time.perf_counter()
frame = open_run(sys.argv[1], progress=False).rollouts()
wall = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                  "sys_s": after.ru_stime - before.ru_stime, "faults": after.ru_minflt - before.ru_minflt,
                  "peak_mb": after.ru_maxrss // 1024, "rows": len(frame),
                  "rollkit": __import__("rollkit").__file__}))
'''


def _first_open(folder: Path, tree: Path) -> dict:
    """The first open's numbers in a fresh process importing rollkit from
    `tree` (PYTHONPATH, and its working folder: `python -c` puts that first
    on the path, ahead of PYTHONPATH)."""
    shutil.rmtree(folder / ".rollkit", ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", FIRST_OPEN, str(folder)], capture_output=True, text=True,
                          cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    imported = measured.pop("rollkit")
    if Path(imported).resolve().parent.parent != tree.resolve():
        raise RuntimeError(f"{tree}: the first open imported rollkit from {imported}")
    return measured


def _compare(folder: Path, n: int, trees: list[Path], rounds: int) -> None:
    """Print and record the first opens of the run in `folder` under each tree (the first the baseline)."""
    with open(folder / "traces.jsonl", "rb") as f:
        while f.read(1 << 24):
            pass
    measured: dict[Path, list[dict]] = {tree: [] for tree in trees}
    for round_ in range(rounds):
        for tree in trees if round_ % 2 == 0 else trees[::-1]:
            measured[tree].append(_first_open(folder, tree))
    base = {key: statistics.median(r[key] for r in measured[trees[0]]) for key in measured[trees[0]][0]}
    print(f"first open of {n:,} single-turn rollouts ({(folder / 'traces.jsonl').stat().st_size >> 20} MB), "
          f"{rounds} rounds alternated; medians, and each as a ratio to {trees[0]}")
    for tree, made in measured.items():
        median = {key: statistics.median(r[key] for r in made) for key in made[0] if key != "rows"}
        shown = ", ".join(f"{key} {value:,.3f} ({value / base[key]:.3f}x)" for key, value in median.items())
        print(f"{tree}: {shown}; least cpu_s {min(r['cpu_s'] for r in made):.3f}")
        for key, value in median.items():
            MEASURED.add(f"{n:,} first open, {tree.name}: {key}", value, unit_of(key), base[key], f"{trees[0].name}'s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (the first is the baseline)")
    parser.add_argument("--n", type=lambda text: [int(x) for x in text.split(",")], default=[100_000],
                        help="single-turn rollouts in the run (comma separated: a run of each)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=Path, default=None, help="keep the made-up runs here (made if missing)")
    json_option(parser)
    args = parser.parse_args()
    scratch = None if args.runs else tempfile.mkdtemp(prefix="rollkit-first-open-")
    try:
        for n in args.n:
            folder = (args.runs or Path(scratch)) / f"run-{n}"
            if not (folder / "traces.jsonl").exists():
                from rollkit.examples.bigrun import big_run

                big_run(n, folder)
            _compare(folder, n, args.trees, args.rounds)
        MEASURED.save(args.json)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
