"""Benchmark: an RL-sized run through the columnar store (issue 24).

Writes 1,000,000 single-turn rollouts and 100,000 twenty-turn rollouts with
tool calls (rollkit.examples.big_run: JSON lines from a template, not real
rollouts), then, each step in a fresh process so its peak memory is its own:

- first open: a fresh process, the tables absent, the file in the page
  cache (as a run that just wrote it leaves it), opens the run (which
  builds the rollouts table, natively: DuckDB parses the JSON lines) and
  gets the rollouts frame; its wall and CPU time and peak memory; then the
  turns frame (which builds the other five tables); --repeats times, each
  in a new process, and their median (the machine is shared);
- the Python build beside the native one, in one process (the ratio; the
  machine is shared, so absolute times vary), up to --compare-max rollouts:
  the rollouts table (a first open), then the other five;
- cold: a new process opens the run and gets the rollouts frame;
- warm: the same again in that process;
- the turns, calls, phases and signals frames;
- SQL: mean reward by task; search: a phrase over every message;
- one trace parsed from its byte offset (first, with the index, and next);
- peak memory of that process (ru_maxrss);
- rk.load of 100,000 traces as objects;
- the tables written as the run goes (rollkit.tables.livetables, issue 34):
  each run's lines written again through the run's writer, with its tables
  and without (the cost per line), then that folder's first open in a
  fresh process (its tables are there: nothing to build);
- the run-time cost: a real rk.evaluate run at concurrency 1 and 256, its
  tables written as it goes and not (rollouts/s of each), and the first
  open after it;
- inspect-ai: read_eval_log and samples_df on the same rollouts saved as
  an inspect log (rk.save format="inspect"), against open + rollouts here;
- --first-asks: each other table's first ask (turns, calls, phases,
  signals, the messages' text search) after a first open, each in a fresh
  process from the same rollouts-only tables (wall, CPU and peak memory),
  on each generated run and on --evaluated folders (runs rk.evaluate
  wrote, their tables as the run left them), against DuckDB's own read of
  the same file (read_json_auto to Parquet) in a fresh process.

Run: PYTHONPATH=. python benchmarks/bigrun.py [--n 100000,1000000] [--n20 100000] [--keep DIR] [--no-steps] [--repeats 3]
     [--no-live] [--run-tasks 1000] [--run-concurrency 1,256] [--load 0] [--inspect 0]
     [--first-asks] [--asks turns,calls] [--evaluated DIR,DIR] [--json PATH]
Prints one line per number. Mind the machine: the 1M step takes minutes.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import Results, in_fresh_python, json_option

MEASURED = Results("bigrun.py", "an RL-sized made-up run through the columnar store, each step in a fresh process; "
                   "a number without a unit in its name is seconds")


def _shown(what: str, record: dict) -> None:
    print(f"{what}: {record}", flush=True)
    MEASURED.add_record(what, record, bare="s")

_STEPS = r'''
import gc, json, resource, sys, time
t0 = time.perf_counter()
import rollkit as rk
from rollkit.tables.lazyrun import open_run
folder, phrase = sys.argv[1], sys.argv[2]
out = {}
peaks = {}  # the process's peak RSS (MB) once each step is done: which step set the peak
def clock(name, fn):
    t = time.perf_counter(); value = fn(); out[name] = round(time.perf_counter() - t, 3)
    peaks[name] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return value
run = clock("open", lambda: open_run(folder))
frame = clock("rollouts_cold", run.rollouts)
out["open_plus_rollouts_cold"] = round(out["open"] + out["rollouts_cold"], 3)
out["rows"] = len(frame)
del frame
clock("rollouts_warm", run.rollouts)
run2 = clock("reopen", lambda: open_run(folder))
clock("reopen_rollouts", run2.rollouts)
out["open_plus_rollouts_warm"] = round(out["reopen"] + out["reopen_rollouts"], 3)
del run2
for kind in ("turns", "calls", "phases", "signals"):
    clock(kind, lambda: len(getattr(run, kind)()))
    gc.collect()
clock("sql_mean_reward_by_task", lambda: run.sql("select task_key, avg(reward) from rollouts group by 1"))
hits = clock("search", lambda: run.search(phrase))
out["search_hits"] = len(hits)
clock("one_trace_first", lambda: run[len(run) // 2])
clock("one_trace", lambda: run[len(run) // 3])
clock("one_trace_by_id", lambda: run.trace(hits.ids[-1]))
out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
out["peak_mb_after"] = peaks
print(json.dumps(out))
'''

_BUILD = r'''
import json, resource, sys, time
t = time.perf_counter()
import rollkit as rk
from rollkit.tables.lazyrun import open_run
imported = time.perf_counter() - t
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
c = cpu(); t = time.perf_counter(); run = open_run(sys.argv[1], progress=False); built = time.perf_counter() - t
peak_build = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
t = time.perf_counter(); frame = run.rollouts(); rollouts = time.perf_counter() - t
out = {"first_open": round(built, 2), "rollouts": round(rollouts, 2),
       "first_open_plus_rollouts": round(built + rollouts, 2), "cpu_s": round(cpu() - c, 1),
       "import_s": round(imported, 2), "traces": len(run), "rows": len(frame), "peak_mb_build": peak_build,
       "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
del frame
c = cpu(); t = time.perf_counter(); run.turns()  # the other five tables, built when first asked for
out.update(then_turns_s=round(time.perf_counter() - t, 2), then_turns_cpu_s=round(cpu() - c, 1),
           peak_mb_all=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
print(json.dumps(out))
'''

# The Python build (the reference, and what every first open cost before the
# native one) and the native build of the same file, one after the other in
# one process, each into a cache folder of its own: the ratio holds when the
# machine is busy, where the absolute numbers do not.
_COMPARE = r'''
import json, resource, shutil, sys, tempfile, time
from pathlib import Path
import rollkit as rk
from rollkit.tables import columns
from rollkit.tables.columns import TableSet
source = Path(sys.argv[1]) / "traces.jsonl"
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
out = {}
for label, native in (("python", False), ("native", True)):
    columns._NATIVE = native
    cache = Path(tempfile.mkdtemp(prefix="rk-build-"))
    try:
        c = cpu(); t = time.perf_counter(); tables = TableSet(source, cache=cache, progress=False)
        out[label] = {"wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(cpu() - c, 2)}
        c = cpu(); t = time.perf_counter(); [tables.files[name] for name in columns.TABLES]  # the other five
        out[label].update(rest_wall_s=round(time.perf_counter() - t, 2), rest_cpu_s=round(cpu() - c, 2))
    finally:
        shutil.rmtree(cache)
out["ratio_wall"] = round(out["python"]["wall_s"] / out["native"]["wall_s"], 1)
out["ratio_cpu"] = round(out["python"]["cpu_s"] / out["native"]["cpu_s"], 1)
print(json.dumps(out))
'''

_LOAD = r'''
import json, resource, sys, time
import rollkit as rk
t = time.perf_counter(); traces = rk.load(sys.argv[1])
print(json.dumps({"rk_load": round(time.perf_counter() - t, 2), "traces": len(traces),
                  "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
'''

# A real rk.evaluate run with its tables written as it goes (the default)
# and without (TraceLog(tables=False): the build waits for the first open),
# one after the other, twice each, in one process: rollouts/s of each (the
# best of two, the machine being shared) and the first open after it.
_RUN_COST = r'''
import functools, json, shutil, sys, tempfile, time
from pathlib import Path
import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.runs import evaluation
from rollkit.tables.lazyrun import open_run
from rollkit.tables.livetables import TraceLog
tasks, repeats, concurrency = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
root = Path(tempfile.mkdtemp())
rk.evaluate(demo_agent(), arithmetic_tasks(20), out=root / "warm", progress=False, concurrency=concurrency)
best = {}
try:
    for attempt in range(2):
        for label, tables in (("live", True), ("plain", False)):
            evaluation.TraceLog = functools.partial(TraceLog, tables=tables)
            folder = root / f"{label}-{attempt}"
            t = time.perf_counter()
            rk.evaluate(demo_agent(), arithmetic_tasks(tasks), repeats=repeats, out=folder, progress=False,
                        concurrency=concurrency)
            ran = time.perf_counter() - t
            t = time.perf_counter(); open_run(folder); opened = time.perf_counter() - t
            if label not in best or ran < best[label][0]:
                best[label] = (ran, opened)
finally:
    shutil.rmtree(root)
n = tasks * repeats
out = {"rollouts": n, "concurrency": concurrency}
for label, (ran, opened) in best.items():
    out[label] = {"rollouts_per_s": round(n / ran), "run_s": round(ran, 2), "first_open_after_s": round(opened, 3)}
out["live_cost"] = f"{100 * (best['live'][0] / best['plain'][0] - 1):+.1f}% run time"
print(json.dumps(out))
'''

# The lines of a generated run written again through rollkit.tables.livetables
# (as a run writes them, a flushed line at a time), with its tables and
# without: the writer's cost per line, then its folder's first open (which
# should build nothing) in a fresh process (_BUILD).
_LIVE_WRITE = r'''
import json, os, resource, shutil, sys, time
from pathlib import Path
from rollkit.tables.livetables import TraceLog
source, target = Path(sys.argv[1]) / "traces.jsonl", Path(sys.argv[2])
out = {}
for label, tables in (("plain", False), ("live", True)):
    shutil.rmtree(target, ignore_errors=True); target.mkdir(parents=True)
    shutil.copy(source.parent / "manifest.json", target / "manifest.json")
    r = resource.getrusage(resource.RUSAGE_SELF); c = r.ru_utime + r.ru_stime
    t = time.perf_counter()
    with open(source, "rb") as lines, TraceLog(target / "traces.jsonl", tables=tables) as log:
        for line in lines:
            log.write(line)
    out[label + "_write_s"] = round(time.perf_counter() - t, 2)
    r = resource.getrusage(resource.RUSAGE_SELF); out[label + "_cpu_s"] = round(r.ru_utime + r.ru_stime - c, 2)
n = sum(1 for _ in open(source, "rb"))
out["lines"] = n
out["tables_us_per_line"] = round(1e6 * (out["live_write_s"] - out["plain_write_s"]) / n, 1)
out["tables_cpu_us_per_line"] = round(1e6 * (out["live_cpu_s"] - out["plain_cpu_s"]) / n, 1)
out["parts"] = len(list((target / ".rollkit" / "traces.jsonl").glob("part-*.json")))
out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
'''

_INSPECT = r'''
import json, sys, time, resource
import rollkit as rk
from rollkit.tables.lazyrun import open_run
src, log = sys.argv[1], sys.argv[2]
from inspect_ai.log import read_eval_log
t = time.perf_counter(); read_eval_log(log); read = time.perf_counter() - t
from inspect_ai.analysis import samples_df
t = time.perf_counter(); samples_df(log); sdf = time.perf_counter() - t
open_run(src)  # tables built
t = time.perf_counter(); open_run(src).rollouts(); ours = time.perf_counter() - t
print(json.dumps({"read_eval_log": round(read, 2), "samples_df": round(sdf, 2), "rollkit_open_rollouts": round(ours, 3),
                  "ratio_read": round(read / ours, 1), "ratio_samples_df": round(sdf / ours, 1)}))
'''


# One table's first ask (or the first search) from a fresh process, the
# rollouts-only tables of a first open already there: wall, CPU, peak memory.
_FIRST_ASK = r'''
import json, resource, sys, time
from rollkit.tables.lazyrun import open_run
folder, ask = sys.argv[1], sys.argv[2]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
run = open_run(folder, progress=False)
c = cpu(); t = time.perf_counter()
made = len(run.search("Cleo has 33")) if ask == "search" else len(getattr(run, ask)())
print(json.dumps({"ask": ask, "wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(cpu() - c, 2), "rows": made,
                  "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
'''

# DuckDB's own read of the whole file (every field, its types inferred) to Parquet: the yardstick of item 4.
_DUCKDB_READ = r'''
import json, resource, sys, tempfile, time, os
import duckdb
source = sys.argv[1]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
with tempfile.TemporaryDirectory() as tmp:
    c = cpu(); t = time.perf_counter()
    duckdb.sql(f"copy (select * from read_json_auto('{source}', format='newline_delimited')) to '{tmp}/x.parquet'")
    print(json.dumps({"duckdb_read_to_parquet_s": round(time.perf_counter() - t, 2), "cpu_s": round(cpu() - c, 2),
                      "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
'''

_ASKS = ("turns", "calls", "phases", "signals", "messages", "search")


def _first_asks(folder: Path, label: str, fresh: bool, asks: tuple[str, ...] = _ASKS) -> None:
    """Each of `asks`'s first ask from the same tables: a first open's
    (`fresh`: rollouts only, built here) or the folder's as they are."""
    cache = folder / ".rollkit"
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
        in_fresh_python(_BUILD.replace("run.turns()", "pass"), str(folder))
    kept = Path(tempfile.mkdtemp(prefix="rk-asks-")) / "kept"
    shutil.copytree(cache, kept)
    try:
        for ask in asks:
            shutil.rmtree(cache)
            shutil.copytree(kept, cache)
            _shown(f"{label} first ask of {ask} (fresh process)", in_fresh_python(_FIRST_ASK, str(folder), ask))
        _shown(f"{label} DuckDB reads the file once", in_fresh_python(_DUCKDB_READ, str(folder / 'traces.jsonl')))
    finally:
        shutil.rmtree(cache)
        shutil.copytree(kept, cache)
        shutil.rmtree(kept.parent)


def _read_through(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=lambda text: [int(x) for x in text.split(",")], default=[100_000, 1_000_000],
                        help="single-turn rollouts, one run per size (comma separated)")
    parser.add_argument("--n20", type=int, default=100_000, help="twenty-turn rollouts")
    parser.add_argument("--compare-max", type=int, default=100_000,
                        help="the Python build is timed beside the native one up to this many rollouts")
    parser.add_argument("--repeats", type=int, default=3,
                        help="first opens of each size, each in a fresh process (the machine is shared: the median)")
    parser.add_argument("--no-steps", action="store_true", help="only the first open (and the comparison)")
    parser.add_argument("--load", type=int, default=100_000, help="traces for rk.load")
    parser.add_argument("--inspect", type=int, default=2_000, help="rollouts saved as an inspect log (0: skip)")
    parser.add_argument("--run-tasks", type=int, default=1000, help="tasks of the real run (x 2 repeats)")
    parser.add_argument("--run-concurrency", type=lambda text: [int(x) for x in text.split(",")], default=[1, 256],
                        help="concurrency of the real run, with and without live tables (comma separated)")
    parser.add_argument("--no-live", dest="live", action="store_false",
                        help="skip writing each run again through the live tables' writer")
    parser.add_argument("--keep", type=Path, default=None, help="keep the generated runs here")
    parser.add_argument("--first-asks", action="store_true",
                        help="each other table's first ask and the first search, each in a fresh process")
    parser.add_argument("--asks", type=lambda text: tuple(text.split(",")), default=_ASKS,
                        help=f"which first asks (with --first-asks; comma separated, of {','.join(_ASKS)})")
    parser.add_argument("--evaluated", type=lambda text: [Path(x) for x in text.split(",")], default=[],
                        help="run folders rk.evaluate wrote: their first asks (with --first-asks)")
    json_option(parser)
    args = parser.parse_args()
    from rollkit.examples.bigrun import big_run

    root = args.keep or Path(tempfile.mkdtemp(prefix="rk-bigrun-"))
    try:
        for label, n, turns in (*(("1-turn", n, 1) for n in args.n), ("20-turn", args.n20, 20)):
            if n <= 0:
                continue
            folder = root / f"{label}-{n}"
            if not (folder / "traces.jsonl").exists():
                t = time.perf_counter()
                big_run(n, folder, turns=turns)
                size = (folder / "traces.jsonl").stat().st_size / 1e9
                print(f"{label} {n:,} rollouts: generated {size:.2f} GB in {time.perf_counter() - t:.1f} s", flush=True)
            else:  # kept from an earlier run: into the page cache, where a run that just wrote it leaves it
                _read_through(folder / "traces.jsonl")
            opens = []
            for _ in range(args.repeats):
                shutil.rmtree(folder / ".rollkit", ignore_errors=True)  # tables absent: a first open
                opens.append(in_fresh_python(_BUILD, str(folder)))
                print(f"{label} {n:,} first open + rollouts (fresh process, native build): {opens[-1]}", flush=True)
            if len(opens) > 1:
                times = sorted(o["first_open_plus_rollouts"] for o in opens)
                print(f"{label} {n:,} first open + rollouts over {len(times)} fresh processes: median "
                      f"{statistics.median(times)} s, least {times[0]} s, most {times[-1]} s", flush=True)
            MEASURED.add_record(f"{label} {n:,}, first open (fresh process, native build; the last of {len(opens)})",
                               opens[-1], bare="s")
            if args.live:
                live = root / f"{label}-{n}-live"
                _shown(f"{label} {n:,} written as a run writes them, with and without tables",
                      in_fresh_python(_LIVE_WRITE, str(folder), str(live)))
                _shown(f"{label} {n:,} first open + rollouts of the run whose tables were written as it went "
                      f"(fresh process)", in_fresh_python(_BUILD, str(live)))
                shutil.rmtree(live)
            if n <= args.compare_max:
                _shown(f"{label} {n:,} Python build vs native build (same process)", in_fresh_python(_COMPARE, str(folder)))
            if args.first_asks:
                _first_asks(folder, f"{label} {n:,}", fresh=True, asks=args.asks)
            if not args.no_steps:
                _shown(f"{label} {n:,} steps (warm)", in_fresh_python(_STEPS, str(folder), 'Cleo has 33'))
        for folder in args.evaluated if args.first_asks else ():
            _first_asks(folder, f"{folder.name} (made by rk.evaluate)", fresh=False, asks=args.asks)
        if args.load:
            folder = root / f"load-{args.load}"
            big_run(args.load, folder)
            _shown(f"rk.load {args.load:,} single-turn traces", in_fresh_python(_LOAD, str(folder)))
        if args.run_tasks:
            for concurrency in args.run_concurrency:
                _shown(f"real run at concurrency {concurrency}, tables written as it goes vs built on the first open",
                      {k: v for k, v in in_fresh_python(_RUN_COST, str(args.run_tasks), '2', str(concurrency)).items()
                       if k not in ('rollouts', 'concurrency')})
        if args.inspect:
            import rollkit as rk

            folder = root / f"inspect-{args.inspect}"
            big_run(args.inspect, folder, turns=3)
            log = rk.save(rk.load(folder), folder / "log.json", format="inspect")
            _shown(f"inspect on {args.inspect:,} rollouts", in_fresh_python(_INSPECT, str(folder), str(log)))
        MEASURED.save(args.json)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
