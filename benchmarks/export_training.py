"""Benchmark: a big run to each training format (rk.export formats "sft",
"tokens", "preference", "prompts"; issue 51).

Writes a made-up run (rollkit.examples.big_run: 1,000 tasks, repeats that
score 1 or 0, single-turn or with tool-calling turns), adds token ids and
logprobs to each call as a chat template makes them (each call's prompt
extends the previous prompt and reply), builds its columnar tables once,
then, each export in a fresh process so its peak memory is its own: wall
and CPU time, rows, the file's size, the process's peak RSS (VmHWM) and
what the export added over the opened run. The baseline, in the same
process before the export: reading and parsing every selected line
(`ExportSource.lines`, orjson), the floor any row builder stands on; the
ratio is the export's CPU over it.

Run: PYTHONPATH=. python benchmarks/export_training.py [--n 100000] [--turns 1] [--keep DIR] [--json PATH]
Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from _common import Results, in_fresh_python, json_option

_EXPORT = r'''
import json, os, resource, sys, time
import rollkit as rk
from rollkit.interop.exports import ExportSource
from rollkit.tables.columns import json_loads
def rss():  # this process's own peak (VmHWM)
    with open("/proc/self/status") as f:
        return round(next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
folder, out, fmt, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
run = rk.open_run(folder, progress=False)
import pyarrow.parquet, duckdb
run.sql("select 1")
loads = json_loads()
c = cpu()
for line in ExportSource(None, run=run).lines():
    loads(line)
floor = cpu() - c
before = rss()
c, t = cpu(), time.perf_counter()
rk.export(run, out, format=fmt, **options)
wall, spent = time.perf_counter() - t, cpu() - c
rows = pyarrow.parquet.ParquetFile(out).metadata.num_rows if out.endswith(".parquet") else sum(1 for _ in open(out))
print(json.dumps({"rows": rows, "wall_s": round(wall, 2), "cpu_s": round(spent, 2), "read_floor_cpu_s": round(floor, 2),
                  "ratio_to_floor": round(spent / floor, 1), "file_mb": round(os.path.getsize(out) / 1e6, 1),
                  "rss_open_mb": before, "peak_mb": rss(), "added_mb": rss() - before}))
'''


def _with_tokens(folder: Path) -> None:
    """Token ids and logprobs on every committed call of the run's lines:
    a prompt of 40 ids per message, a reply of 12, each call's prompt the
    previous prompt and reply and then its new messages' ids."""
    source = folder / "traces.jsonl"
    tmp = folder / "traces.jsonl.tokens"
    with open(source, encoding="utf-8") as lines, open(tmp, "w", encoding="utf-8") as out:
        for n, line in enumerate(lines):
            record = json.loads(line)
            sequence: list[int] = []
            seen = 0
            for i, call in enumerate(record["model_calls"]):
                count = call.get("request_messages") or seen + 1
                sequence = sequence + [(n + 31 * j) % 30000 for j in range(40 * (count - seen))]
                seen = count + 1
                ids = [(n * 7 + i * 13 + j) % 30000 for j in range(12)]
                call["tokens"] = {"prompt_ids": sequence, "ids": ids, "logprobs": [-0.125] * 12}
                sequence = sequence + ids
            out.write(json.dumps(record) + "\n")
    tmp.replace(source)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000, help="rollouts")
    parser.add_argument("--turns", type=int, default=1, help="turns per rollout (each but the last calls a tool)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the generated run here")
    parser.add_argument("--formats", default="sft,sft-parquet,tokens,preference,prompts")
    json_option(parser)
    args = parser.parse_args()
    results = Results("export_training.py", "a made-up run with token ids to each training format, each export in a "
                      "fresh process; read_floor_cpu_s is parsing every selected line, the floor under any row builder")
    from rollkit.examples.bigrun import big_run
    from rollkit.tables.lazyrun import open_run

    root = args.keep or Path(tempfile.mkdtemp(prefix="rk-export-training-"))
    label = f"{args.n:,} rollouts x {args.turns} turn(s)"
    try:
        folder = root / f"{args.n}-{args.turns}"
        if not (folder / "traces.jsonl").exists():
            t = time.perf_counter()
            big_run(args.n, folder, turns=args.turns)
            _with_tokens(folder)
            size = (folder / "traces.jsonl").stat().st_size / 1e9
            print(f"{label}: generated with token ids, {size:.2f} GB in {time.perf_counter() - t:.1f} s", flush=True)
        t = time.perf_counter()
        open_run(folder, progress=False)
        print(f"{label}: tables built in {time.perf_counter() - t:.1f} s", flush=True)
        results.add(f"{label}: tables built (first open)", time.perf_counter() - t, "s")
        for name in args.formats.split(","):
            fmt, suffix = ("sft", ".parquet") if name == "sft-parquet" else (name, ".jsonl")
            options = {"advantage": "mean_std"} if fmt == "tokens" else {}
            out = str(root / f"{name}{suffix}")
            result = in_fresh_python(_EXPORT, str(folder), out, fmt, json.dumps(options))
            print(f"{label}: {name}: {result}", flush=True)
            results.add_record(f"{label}, {name}", result)
        results.save(args.json)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
