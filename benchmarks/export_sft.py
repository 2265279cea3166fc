"""Benchmark: a big run to SFT training rows (rk.export format="sft", issue 35).

Writes a made-up run (rollkit.examples.big_run: JSON lines from a validated
template, single-turn or with tool-calling turns), builds its columnar
tables once, then, each in a fresh process so its peak memory is its own:

- export: open the run and write every rollout as a training row to
  Parquet (row groups of 2,000); wall and CPU time, rows per second, the
  file's size, and the process's peak RSS (VmHWM: ru_maxrss of a child
  starts at its parent's) beside its peak once the run was open (what the
  export itself added);
- where: the same with `where="reward = 1"` (about half the rows);
- via traces: the rows of --sample rollouts built through `Trace` objects
  (each trace read by its row, dumped and turned into a row: the path a
  list of traces takes) against the JSON-line path the export takes; rows
  per CPU second of each (the machine may be shared: CPU time holds).

Run: PYTHONPATH=. python benchmarks/export_sft.py [--n 100000] [--turns 1,5] [--sample 5000] [--keep DIR] [--json PATH]
Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from _common import Results, in_fresh_python, json_option

_EXPORT = r'''
import json, os, resource, sys, time
import rollkit as rk
def rss():  # this process's own peak (VmHWM); ru_maxrss would start at the parent's, kept across exec
    with open("/proc/self/status") as f:
        return round(next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
folder, out, where = sys.argv[1], sys.argv[2], sys.argv[3] or None
run = rk.open_run(folder, progress=False)
import pyarrow.parquet, duckdb  # loaded before the baseline: the export's own memory is what comes after
run.sql("select 1")
before = rss()
c, t = cpu(), time.perf_counter()
rk.export(run, out, format="sft", where=where)
wall = time.perf_counter() - t
rows = pyarrow.parquet.ParquetFile(out).metadata.num_rows if out.endswith(".parquet") else sum(1 for _ in open(out))
print(json.dumps({"rows": rows, "wall_s": round(wall, 2), "cpu_s": round(cpu() - c, 2),
                  "rows_per_s": round(rows / wall), "file_mb": round(os.path.getsize(out) / 1e6, 1),
                  "rss_open_mb": before, "peak_mb": rss(), "added_mb": rss() - before}))
'''

_PATHS = r'''
import json, resource, sys, time
import rollkit as rk
from rollkit.interop.exports import ExportSource
from rollkit.interop.exports.branches import records
from rollkit.interop.exports.sft import training_row
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
folder, sample = sys.argv[1], int(sys.argv[2])
run = rk.open_run(folder, progress=False)
signals = sorted(c for c in run.arrow_schema("rollouts") if c.startswith(("reward.", "metric.")))
lines = records(ExportSource(None, run=run))[1]
next(lines), run[0]  # the fixed costs (the SQL connection, the offsets index) are not the paths'
c = cpu()
for i, (record, _) in enumerate(lines):
    if i == sample:
        break
    training_row(record, signals)
by_lines = cpu() - c
c = cpu()
for i in range(1, sample + 1):
    record = json.loads(run[i].model_dump_json())
    training_row(record, signals)
by_traces = cpu() - c
print(json.dumps({"sample": sample, "json_lines_rows_per_cpu_s": round(sample / by_lines),
                  "via_traces_rows_per_cpu_s": round(sample / by_traces), "ratio": round(by_traces / by_lines, 1)}))
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=lambda text: [int(x) for x in text.split(",")], default=[100_000],
                        help="rollouts, one run per size (comma separated)")
    parser.add_argument("--turns", type=lambda text: [int(x) for x in text.split(",")], default=[1, 5],
                        help="turns per rollout (each but the last calls a tool), one run per value")
    parser.add_argument("--sample", type=int, default=5_000, help="rollouts for the two row paths (0: skip)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the generated runs here")
    json_option(parser)
    args = parser.parse_args()
    results = Results("export_sft.py", "a made-up run to SFT training rows (Parquet), each export in a fresh process")
    from rollkit.examples.bigrun import big_run
    from rollkit.tables.lazyrun import open_run

    root = args.keep or Path(tempfile.mkdtemp(prefix="rk-export-sft-"))
    try:
        for n in args.n:
            for turns in args.turns:
                label = f"{n:,} rollouts x {turns} turn(s)"
                folder = root / f"{n}-{turns}"
                if not (folder / "traces.jsonl").exists():
                    t = time.perf_counter()
                    big_run(n, folder, turns=turns)
                    size = (folder / "traces.jsonl").stat().st_size / 1e9
                    print(f"{label}: generated {size:.2f} GB in {time.perf_counter() - t:.1f} s", flush=True)
                t = time.perf_counter()
                open_run(folder, progress=False)
                print(f"{label}: tables built in {time.perf_counter() - t:.1f} s", flush=True)
                results.add(f"{label}: tables built (first open)", time.perf_counter() - t, "s")
                out = str(root / f"rows-{n}-{turns}.parquet")
                for where in ("", "reward = 1"):
                    got = in_fresh_python(_EXPORT, str(folder), out, where)
                    print(f"{label}: export to SFT Parquet{', where ' + where if where else ''}: {got}", flush=True)
                    results.add_record(f"{label}, export{', where ' + where if where else ''}", got)
                if args.sample:
                    got = in_fresh_python(_PATHS, str(folder), str(args.sample))
                    print(f"{label}: JSON lines vs Trace objects: {got}", flush=True)
                    results.add(f"{label}: rows built from JSON lines", got["json_lines_rows_per_cpu_s"],
                                "rows/CPU s", got["via_traces_rows_per_cpu_s"], "through Trace objects")
        results.save(args.json)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
