"""What the things a user turns on cost a run (issue 44), in one process.

The same `rk.evaluate` of the demo agent on single-turn arithmetic tasks
(an instant model: all the time is rollkit's) runs in each setting below,
the settings taking turns within each round and the order rotating from one
round to the next (no setting always runs first, after a collection, or on
a warmer heap):

- none: no folder (the baseline);
- folder: `out=DIR` (traces.jsonl, live.jsonl, the live tables);
- folder-tables: the same without the live tables (TraceLog(tables=False):
  the JSON lines alone, their tables built by the first open);
- folder-waited: the live tables, the run's end waiting for their last
  part (as before the end handed it over and returned);
- folder+otel: and `otel=` a collector on 127.0.0.1 in this process (an
  `http.server` thread that reads each request and answers 200: its work
  shares this process's GIL, so it counts against the run);
- folder+otel-proc: the same collector in a process of its own, as a
  user's collector is (what the spans cost the run itself);
- folder+silent: and `otel=` a listener on 127.0.0.1 that accepts
  connections and never answers (a hung collector);
- prices: no folder, the model priced with `rk.prices` (each call's cost
  computed);
- folder-no-live, folder-no-dump, folder-bare: where a folder's cost goes,
  by taking one part away (each without the live tables, so against
  folder-tables): the live file's lines not written (its writer a sink
  that does nothing; the rollouts' events still reach it), each trace's
  line not serialized (the same line, serialized once before the run,
  written for every rollout), or both (what is left: the trace line's
  write and flush, the events, the folder's files).

Printed: rollouts/s of each setting (the best of its rounds, the machine
being shared; the median beside it) and its ratio to `none`, by wall time
and by the process's CPU time (every thread's: steadier when other work
shares the machine; a collector that stalls the run shows in wall time)
until `rk.evaluate` returns, and by CPU time until the tables' last part,
which a run's end does not wait for, is written too (cpu+tables); plus
whether pandas was imported by the end (the run's path should never import it).
Beside each ratio, what the setting adds to a rollout, in CPU (or wall)
microseconds, against the first setting. The three settings that take a
part away run only when named.

    PYTHONPATH=. python benchmarks/overhead.py [--tasks 2000] [--rounds 3] [--concurrency 32] [--json PATH]
        [--settings none,folder,folder-tables,folder-waited,folder+otel,folder+otel-proc,folder+silent,prices]
    PYTHONPATH=. python benchmarks/overhead.py --settings none,folder-tables,folder-no-live,folder-no-dump,folder-bare
"""

from __future__ import annotations

import argparse
import functools
import gc
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.runs import evaluation
from rollkit.tables.columns import settle
from rollkit.core.events import RunSink
from rollkit.runs.live import LiveWriter
from rollkit.tables.livetables import TraceLog
from _common import Results, json_option

SETTINGS = ("none", "folder", "folder-tables", "folder-waited", "folder+otel", "folder+otel-proc", "folder+silent",
            "prices", "folder-no-live", "folder-no-dump", "folder-bare")
DEFAULT = SETTINGS[:8]
_TAKEN_AWAY = ("folder-tables", "folder-no-live", "folder-no-dump", "folder-bare")  # the live tables off


class _Unserialized(TraceLog):
    """A trace log that writes one line serialized before the run for every
    trace (what the lines cost without their serialization)."""

    line = b""

    def append(self, trace: Any) -> None:
        self.write(self.line)


class _Unwritten(RunSink):
    """In place of the live file's writer: hears every event, writes nothing."""

    def __init__(self, path: Path) -> None:
        pass


class _Waited(TraceLog):
    """A trace log whose close waits for its last part, whatever it is asked."""

    def close(self, *, wait: bool = True) -> None:
        super().close(wait=True)


class _Taker(BaseHTTPRequestHandler):
    """A collector that keeps nothing: reads the request, answers 200."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


# The same collector run by a process of its own; it prints its port, then serves until killed.
_COLLECTOR_PROCESS = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from overhead import _Taker, ThreadingHTTPServer
server = ThreadingHTTPServer(("127.0.0.1", 0), _Taker)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class _Collectors:
    """The collectors on 127.0.0.1: one that takes spans in this process, the
    same in a process of its own, and one that never answers."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Taker)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.process = subprocess.Popen([sys.executable, "-c", _COLLECTOR_PROCESS], stdout=subprocess.PIPE, text=True)
        self.process_port = int(self.process.stdout.readline())  # type: ignore[union-attr]
        self.silent = socket.socket()
        self.silent.bind(("127.0.0.1", 0))
        self.silent.listen(1024)  # connections complete in the backlog; nothing ever reads them

    def url(self, which: str) -> str:
        port = {"otel": self.server.server_address[1], "otel-proc": self.process_port,
                "silent": self.silent.getsockname()[1]}[which]
        return f"http://127.0.0.1:{port}/v1/traces"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()  # type: ignore[union-attr]
        self.silent.close()


def _run(setting: str, tasks: list, root: Path, collectors: _Collectors,
         concurrency: int) -> tuple[float, float, float]:
    """One evaluation in `setting`; its wall and CPU seconds until it
    returned (the CPU of every thread of this process: on a shared machine
    the steadier one), and its CPU seconds with its tables' last part written."""
    agent = demo_agent()
    options: dict[str, Any] = {"progress": False, "concurrency": concurrency}
    if setting.startswith("folder"):
        options["out"] = root / f"run-{time.monotonic_ns()}"
    if setting in ("folder+otel", "folder+otel-proc", "folder+silent"):
        options["otel"] = collectors.url(setting.split("+")[1])
    if setting == "prices":
        rk.prices({agent.model.name: {"input": 1.0, "output": 2.0}})
    log = _Waited if setting == "folder-waited" else _Unserialized if setting in ("folder-no-dump", "folder-bare") else TraceLog
    evaluation.TraceLog = functools.partial(log, tables=setting not in _TAKEN_AWAY)
    if setting in ("folder-no-live", "folder-bare"):
        evaluation.LiveWriter = _Unwritten
    gc.collect()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the silent collector's warning at the end
            t, c = time.perf_counter(), time.process_time()
            rk.evaluate(agent, tasks, **options)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            settle()  # the tables' last part, built after the run returned: its CPU is the run's too
            return wall, cpu, time.process_time() - c
    finally:
        evaluation.TraceLog, evaluation.LiveWriter = TraceLog, LiveWriter
        if setting == "prices":
            rk.prices({agent.model.name: None})
        if "out" in options:
            shutil.rmtree(options["out"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--settings", default=",".join(DEFAULT),
                        help=f"comma separated, the first is the baseline (default {','.join(DEFAULT)}; "
                             f"also {','.join(SETTINGS[len(DEFAULT):])})")
    json_option(parser)
    args = parser.parse_args()
    results = Results("overhead.py", f"what a setting a user turns on costs rk.evaluate: {args.tasks:,} demo rollouts "
                      f"x {args.rounds} rounds, concurrency {args.concurrency}")
    settings = args.settings.split(",")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown settings {unknown}; the settings are {', '.join(SETTINGS)}")
    tasks = arithmetic_tasks(args.tasks)
    _Unserialized.line = rk.evaluate(demo_agent(), tasks[:1], progress=False).traces[0].model_dump_json().encode() + b"\n"
    root = Path(tempfile.mkdtemp(prefix="rollkit-overhead-"))
    collectors = _Collectors()
    times: dict[str, list[tuple[float, float, float]]] = {s: [] for s in settings}
    try:
        for s in settings:  # a warm-up of each (imports, the price table, the SDK): not counted
            _run(s, tasks[:50], root, collectors, args.concurrency)
        for r in range(args.rounds):
            for s in settings[r % len(settings):] + settings[:r % len(settings)]:
                times[s].append(_run(s, tasks, root, collectors, args.concurrency))
    finally:
        collectors.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.tasks} rollouts x {args.rounds} rounds, concurrency {args.concurrency}, python {sys.version.split()[0]}")
    for label, which in (("wall", 0), ("cpu", 1), ("cpu+tables", 2)):
        base = args.tasks / min(t[which] for t in times[settings[0]])
        for s in settings:
            spent = [t[which] for t in times[s]]
            best, median = args.tasks / min(spent), args.tasks / statistics.median(spent)
            print(f"{label:10} {s:16} {best:8.0f} rollouts/s (median {median:6.0f})  "
                  f"ratio to {settings[0]}: {best / base:.3f}  {1e6 / best - 1e6 / base:+6.0f} us/rollout")
            results.add(f"{s} ({label} time, best of {args.rounds})", best, "rollouts/s", base, settings[0])
    print(f"pandas imported by the end: {'pandas' in sys.modules}")
    results.save(args.json)


if __name__ == "__main__":
    main()
