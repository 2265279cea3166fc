"""Benchmark: the rollouts' grid of `rollkit view` on a big run (issue 52).

Writes a run of --n single-turn rollouts (rollkit.examples.big_run), builds
its tables once (a first open, timed, as the run's writer or the first
look at it pays), then in a fresh process, the tables there:

- imports (the page's kernel has them already); open_run; open: the
  grid's first page (RunGrid: a count and one page of 25 from the run's
  tables, on the server);
- next: the next page; deep: a page near the end (an OFFSET of n - 25);
- sort: the first page sorted by reward, descending;
- filter: `reward < 0.5` (count and first page); search1: a phrase over
  every message (the text filter), the first building the run's messages
  table; search: another phrase, the table there;
- with --pages, in another fresh process: the runs list of the run's
  folder and the run's whole page (its monitor reads every line of the
  run, its charts the whole rollouts frame), as `view` builds them;
- the baseline, in the same process: the whole rollouts frame
  (run.rollouts(), what a grid holding the run in the browser's kernel
  would load first), and each step's ratio to it.

Run: PYTHONPATH=. python benchmarks/viewgrid.py [--n 1000000] [--keep DIR] [--pages] [--json PATH]
Prints one line per number. Mind the machine: writing and first opening
1,000,000 rollouts take about a minute.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from _common import Results, in_fresh_python, json_option

_STEPS = r'''
import json, sys, time
folder = sys.argv[1]
out = {}
def clock(name, fn):
    t = time.perf_counter(); value = fn(); out[name] = round(time.perf_counter() - t, 4); return value
def imports():
    global open_run, RunGrid
    from rollkit.tables.lazyrun import open_run
    from rollkit.notebook.runbrowser import RunGrid
clock("imports", imports)
run = clock("open_run", lambda: open_run(folder))
grid = clock("open", lambda: RunGrid(run, link=lambda rollout, searched=None: "?rollout=" + rollout))
out["rows_on_page"] = grid.grid.value.count("<tr data-row=")
clock("next", lambda: grid.page(1))
clock("deep", lambda: grid.page(len(run) // grid.page_size - 1))
clock("sort", lambda: grid.sort("reward", descending=True))
clock("filter", lambda: grid.where("reward < 0.5"))
out["filtered"] = grid.total
grid.where("")
clock("search1", lambda: grid.search("apples"))  # builds the messages table: once per run
out["found"] = grid.total
grid.search("")
clock("search", lambda: grid.search("pears"))
clock("baseline_frame", lambda: len(run.rollouts()))
print(json.dumps(out))
'''

_PAGES = r'''
import json, sys, time
from pathlib import Path
import rollkit.notebook.viewpage, rollkit.notebook.runslist
from rollkit.notebook.viewpage import view
folder = Path(sys.argv[1])
out = {}
for name, query in (("runs_list", ""), ("run_page", "run=" + folder.name)):
    t = time.perf_counter(); page = view([folder.parent], query=query); out[name] = round(time.perf_counter() - t, 2)
    for child in page.children:
        if hasattr(child, "stop"):
            child.stop()
print(json.dumps(out))
'''

_BUILD = r'''
import json, sys, time
from rollkit.tables.lazyrun import open_run
t = time.perf_counter(); run = open_run(sys.argv[1]); n = len(run)
print(json.dumps({"first_open": round(time.perf_counter() - t, 2), "n": n}))
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000, help="single-turn rollouts in the run")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run here")
    parser.add_argument("--pages", action="store_true", help="also time the runs list and the run's whole page")
    json_option(parser)
    args = parser.parse_args()
    results = Results("viewgrid.py", f"the rollouts' grid of rollkit view on {args.n:,} made-up rollouts, in a fresh "
                      "process; the baseline is the whole rollouts frame")
    from rollkit.examples.bigrun import big_run

    home = args.keep or Path(tempfile.mkdtemp(prefix="rollkit-viewgrid-"))
    try:
        t = time.perf_counter()
        folder = big_run(args.n, home / f"run-{args.n}")
        print(f"write {args.n:,} rollouts: {time.perf_counter() - t:.2f} s")
        built = in_fresh_python(_BUILD, str(folder))
        print(f"first open (tables built, {built['n']:,} rollouts): {built['first_open']:.2f} s")
        results.add("first open (tables built)", built["first_open"], "s")
        steps = in_fresh_python(_STEPS, str(folder))
        base = steps.pop("baseline_frame")
        rows, filtered, found = steps.pop("rows_on_page"), steps.pop("filtered"), steps.pop("found")
        print(f"grid page: {rows} rows; filter reward < 0.5: {filtered:,}; search 'apples': {found:,}")
        for name, seconds in steps.items():
            print(f"grid {name:<7} {seconds * 1000:9.1f} ms   ({seconds / base:.3f} x the whole rollouts frame)")
            if name in ("imports", "open_run"):  # what any look at the run pays, not a step of the grid
                results.add(f"grid: {name}", seconds * 1000, "ms")
            else:
                results.add(f"grid: {name}", seconds * 1000, "ms", base * 1000, "run.rollouts() of the whole run")
        print(f"baseline: run.rollouts() of {args.n:,}: {base * 1000:.1f} ms")
        if args.pages:
            pages = in_fresh_python(_PAGES, str(folder))
            print(f"whole pages, built in the kernel: the runs list {pages['runs_list']:.2f} s; the run's page "
                  f"(monitor, charts, grid) {pages['run_page']:.2f} s")
            results.add_record("whole page built in the kernel", {f"{k}_s": v for k, v in pages.items()})
        results.save(args.json)
    finally:
        if args.keep is None:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
