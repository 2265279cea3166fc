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
- everything: all a user can turn on at once: the folder, spans to the
  collector in a process of its own, prices, each call's token ids and
  logprobs recorded (the same toy model answering with them, as
  `OpenAIModel(logprobs=True)` records an endpoint's), a judge
  (`Agent(judges=[...])`), a subscriber to the agent's events, and the
  progress bar (drawn to a closed-off stream).
- everything+silent: the same, the spans sent to the collector that
  never answers. Runs only when named, and in --sandbox.
- folder-no-live, folder-no-dump, folder-bare: where a folder's cost goes,
  by taking one part away (each without the live tables, so against
  folder-tables): the live file's lines not written (its writer a sink
  that does nothing), each trace's
  line not serialized (the same line, serialized once before the run,
  written for every rollout), or both (what is left: the trace line's
  write and flush, the events, the folder's files).
- otel-proc: no folder, spans to the collector in a process of its own
  (each trace serialized for the span sender: against `none`, what spans
  cost a run without a folder). Runs only when named.

Printed: rollouts/s of each setting (the best of its rounds, the machine
being shared; the median beside it) and its ratio to `none`, by wall time
and by the process's CPU time (every thread's: steadier when other work
shares the machine; a collector that stalls the run shows in wall time)
until `rk.evaluate` returns, and by CPU time until the tables' last part,
which a run's end does not wait for, is written too (cpu+tables), and that
plus the CPU of the process's children (cpu+child: the span sender's, the
run's total; /proc's clock ticks, 10 ms, so read it over many rollouts); plus
whether pandas was imported by the end (the run's path should never import it).
Beside each ratio, what the setting adds to a rollout, in CPU (or wall)
microseconds, against the first setting. The three settings that take a
part away, and otel-proc, run only when named.

    PYTHONPATH=. python benchmarks/overhead.py [--tasks 2000] [--rounds 3] [--concurrency 32] [--json PATH]
        [--settings none,folder,folder-tables,folder-waited,folder+otel,folder+otel-proc,folder+silent,prices,everything]
    PYTHONPATH=. python benchmarks/overhead.py --settings none,folder-tables,folder-no-live,folder-no-dump,folder-bare
    PYTHONPATH=. python benchmarks/overhead.py --settings none,otel-proc
    PYTHONPATH=. python benchmarks/overhead.py --sandbox 8 [--rounds 3]
    PYTHONPATH=. python benchmarks/overhead.py --instructions --tasks 300 --settings none,folder-tables,folder-no-dump

`--sandbox N` measures something else: N rollouts of a program run in a
bubblewrap sandbox (`rk.SandboxRuntime`, three model calls each) with
nothing on, with everything on, and with everything on but the spans
sent to a collector that never answers, as wall time (the programs' CPU
is theirs); skipped with the reason where bubblewrap cannot run.

`--instructions` counts instead of timing: each setting's instructions per
rollout until `rk.evaluate` returns, one evaluation under valgrind's
callgrind a setting, against the first setting's: what a change costs in
work, apart from the CPU time other processes take. A count still moves
with valgrind's speed wherever the run does something on the clock: the
live file is written every 0.2 s of wall time, and valgrind slows the run
about fifty times (more when the machine is busy), so its writes catch
fewer rollouts each than at full speed and its share reads higher than it
is, and differently at another load. Count two trees side by side, at the
same time. What a count cannot show is the CPU's caches: a line
serialized right after another costs the same instructions and much less
time. Skipped, saying so, without valgrind.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import os
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
from typing import Any, Iterator

import rollkit as rk
from rollkit.core.messages import AssistantMessage, Response, TokenLogprobs, Usage
from rollkit.core.models import ScriptedModel
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.examples.arithmetic import toy_calculator_model
from rollkit.programs.sandbox_runtime import sandbox_unavailable
from rollkit.runs import evaluation
from rollkit.tables.columns import settle
from rollkit.core.events import RunSink
from rollkit.runs.live import LiveWriter
from rollkit.tables.livetables import TraceLog
from _common import Results, json_option

_trace_line = evaluation.trace_line
SETTINGS = ("none", "folder", "folder-tables", "folder-waited", "folder+otel", "folder+otel-proc", "folder+silent",
            "prices", "everything", "folder-no-live", "folder-no-dump", "folder-bare", "otel-proc", "everything+silent")
DEFAULT = SETTINGS[:9]
_TAKEN_AWAY = ("folder-tables", "folder-no-live", "folder-no-dump", "folder-bare")  # the live tables off


class _Unserialized:
    """In place of the run's serializer of trace lines: one line serialized
    before the run, given for every trace (what the lines cost without
    their serialization)."""

    line = b""

    @classmethod
    def set_line(cls, tasks: list) -> None:
        cls.line = rk.evaluate(demo_agent(), tasks[:1], progress=False).traces[0].model_dump_json().encode() + b"\n"

    @classmethod
    def trace_line(cls, trace: Any) -> bytes:
        return cls.line


class _Unwritten(RunSink):
    """In place of the live file's writer: hears every event, writes nothing."""

    def __init__(self, path: Path) -> None:
        pass

    def follow(self, rollout_id: str, state: Any) -> None:
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


def _with_tokens(toy: ScriptedModel) -> ScriptedModel:
    """The toy model answering as an endpoint asked for token ids and
    logprobs does: each reply with its prompt's and its own ids, logprobs
    and token texts (as many as the reply's words), and an id."""
    async def reply(request: Any) -> Response:
        answer = (await toy.complete(request)).message
        size = max(1, len((answer.content or "").split()) + sum(len(c.arguments.split()) for c in answer.tool_calls))
        prompt = sum(len((getattr(m, "content", None) or "").split()) + 1 for m in request.messages)
        tokens = TokenLogprobs(prompt_ids=list(range(prompt)), ids=list(range(size)), logprobs=[-0.25] * size,
                               text=["t"] * size)
        return Response(message=AssistantMessage(content=answer.content, tool_calls=answer.tool_calls),
                        usage=Usage(input_tokens=prompt, output_tokens=size), tokens=tokens, id="chatcmpl-1",
                        model=toy.name)
    return ScriptedModel(reply, name=toy.name)


@rk.metric
def _turns(trace: rk.Trace) -> float:
    """A judge: every trace scored once more."""
    return float(trace.num_turns)


def _agent(setting: str) -> Any:
    if not setting.startswith("everything"):
        return demo_agent()
    agent = demo_agent(model=_with_tokens(toy_calculator_model()), judges=[_turns])
    agent.subscribe(lambda *event: None)
    return agent


# The sandboxed program: three chat-completions calls through rollkit's
# server, stdlib only (the program's own start-up stays small beside the sandbox's).
_PROGRAM = """
import json, os, urllib.request
for i in range(3):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"call {i}"}]}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body, headers={
        "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=60).read()
"""


def _sandboxed_agent(setting: str) -> Any:
    """A program in a bubblewrap sandbox (SandboxRuntime) making three model
    calls; in `everything`, the same with all a user can turn on (see `_agent`)."""
    model = rk.ScriptedModel(lambda request: "ok", name="toy-program")
    everything = setting.startswith("everything")
    agent = rk.Agent(model=_with_tokens(model) if everything else model, runtime=rk.SandboxRuntime,
                     harness=rk.ProgramHarness([sys.executable, "-c", _PROGRAM]), judges=[_turns] if everything else ())
    if everything:
        agent.subscribe(lambda *event: None)
    return agent


def _children_cpu(skip: int) -> float:
    """CPU seconds of this process's children but `skip` (the collector):
    those reaped, and those running (the span sender, reused from run to run)."""
    times = os.times()
    total = times.children_user + times.children_system
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == skip:
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


@contextlib.contextmanager
def _setting(setting: str, root: Path, collectors: _Collectors, concurrency: int,
             make_agent: Any = _agent) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The agent and `rk.evaluate` options of one evaluation in `setting`,
    with the run's parts swapped as the setting says while it lasts (its
    folder removed and the parts put back after)."""
    agent = make_agent(setting)
    everything = setting.startswith("everything")
    options: dict[str, Any] = {"progress": everything, "concurrency": concurrency}
    if setting.startswith("folder") or everything:
        options["out"] = root / f"run-{time.monotonic_ns()}"
    if setting in ("folder+otel", "folder+otel-proc", "folder+silent", "otel-proc") or everything:
        options["otel"] = collectors.url("otel-proc" if setting == "everything" else setting.split("+")[-1])
    if setting == "prices" or everything:
        rk.prices({agent.model.name: {"input": 1.0, "output": 2.0}})
    log = _Waited if setting == "folder-waited" else TraceLog
    evaluation.TraceLog = functools.partial(log, tables=setting not in _TAKEN_AWAY)
    if setting in ("folder-no-dump", "folder-bare"):
        evaluation.trace_line = _Unserialized.trace_line
    if setting in ("folder-no-live", "folder-bare"):
        evaluation.LiveWriter = _Unwritten
    try:
        with warnings.catch_warnings(), open(os.devnull, "w") as bar, contextlib.redirect_stderr(bar):
            warnings.simplefilter("ignore")  # the silent collector's warning at the end
            yield agent, options
    finally:
        evaluation.TraceLog, evaluation.LiveWriter, evaluation.trace_line = TraceLog, LiveWriter, _trace_line
        if setting == "prices" or everything:
            rk.prices({agent.model.name: None})
        if "out" in options:
            shutil.rmtree(options["out"])


def _run(setting: str, tasks: list, root: Path, collectors: _Collectors, concurrency: int,
         make_agent: Any = _agent) -> tuple[float, float, float, float]:
    """One evaluation in `setting`; its wall and CPU seconds until it
    returned (the CPU of every thread of this process: on a shared machine
    the steadier one), its CPU seconds with its tables' last part written,
    and that plus its child processes' CPU (the span sender's: the run's
    total CPU; the collector's is not counted)."""
    with _setting(setting, root, collectors, concurrency, make_agent) as (agent, options):
        gc.collect()
        children = _children_cpu(collectors.process.pid)
        t, c = time.perf_counter(), time.process_time()
        rk.evaluate(agent, tasks, **options)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        settle()  # the tables' last part, built after the run returned: its CPU is the run's too
        tables = time.process_time() - c
        return wall, cpu, tables, tables + _children_cpu(collectors.process.pid) - children


def _measure(settings: list[str], tasks: list, rounds: int, concurrency: int, make_agent: Any = _agent,
             warm: int = 50) -> dict[str, list[tuple[float, ...]]]:
    """Each setting's (wall, CPU, CPU with the tables) seconds per round: a warm-up of each
    first (imports, the price table, the SDK; not counted), then the rounds,
    the settings taking turns and the order rotating from round to round."""
    root = Path(tempfile.mkdtemp(prefix="rollkit-overhead-"))
    collectors = _Collectors()
    times: dict[str, list[tuple[float, ...]]] = {s: [] for s in settings}
    try:
        for s in settings:
            _run(s, tasks[:warm], root, collectors, concurrency, make_agent)
        for r in range(rounds):
            for s in settings[r % len(settings):] + settings[:r % len(settings)]:
                times[s].append(_run(s, tasks, root, collectors, concurrency, make_agent))
    finally:
        collectors.close()
        shutil.rmtree(root, ignore_errors=True)
    return times


def _report(times: dict[str, list[tuple[float, ...]]], rollouts: int, results: Results) -> None:
    """Each setting's rollouts/s by each clock the rounds kept, its ratio to
    the first setting, and what it adds to a rollout in microseconds."""
    settings = list(times)
    clocks = ("wall", "cpu", "cpu+tables", "cpu+child")[:len(times[settings[0]][0])]
    for which, label in enumerate(clocks):
        base = rollouts / min(t[which] for t in times[settings[0]])
        for s in settings:
            spent = [t[which] for t in times[s]]
            best, median = rollouts / min(spent), rollouts / statistics.median(spent)
            print(f"{label:10} {s:16} {best:8.1f} rollouts/s (median {median:8.1f})  "
                  f"ratio to {settings[0]}: {best / base:.3f}  {1e6 / best - 1e6 / base:+6.0f} us/rollout")
            results.add(f"{s} ({label} time, best of {len(spent)})", best, "rollouts/s", base, settings[0])


def _counted(setting: str, tasks: list, concurrency: int) -> None:
    """`--counted SETTING`, the child `--instructions` runs under callgrind:
    a warm-up evaluation, then the measured one between two `os.getppid()`
    calls, where callgrind starts a new part of its count (its
    `--dump-before=getppid`), so the part between them is that evaluation
    alone. The garbage collector is off while it runs: a collection's
    count depends on what came before, not on the setting."""
    _Unserialized.set_line(tasks)
    root = Path(tempfile.mkdtemp(prefix="rollkit-overhead-"))
    collectors = _Collectors()
    try:
        with _setting(setting, root, collectors, concurrency) as (agent, options):
            rk.evaluate(agent, tasks[:30], **options)
        with _setting(setting, root, collectors, concurrency) as (agent, options):
            gc.collect()
            gc.disable()
            os.getppid()
            rk.evaluate(agent, tasks, **options)
            os.getppid()
            gc.enable()
    finally:
        collectors.close()
        shutil.rmtree(root, ignore_errors=True)


def _instructions(settings: list[str], args: argparse.Namespace, results: Results) -> None:
    """`--instructions`: each setting's instructions per rollout until
    `rk.evaluate` returns, counted by callgrind in a child (`_counted`) and
    set against the first setting's (see the module's docstring for what
    moves with the load); every thread of the run's process is counted,
    not the span sender's or the collector's. Skipped, saying so, without
    valgrind."""
    if shutil.which("valgrind") is None:
        print("instructions mode skipped: valgrind is not installed")
        return
    counts = {}
    for setting in settings:
        with tempfile.TemporaryDirectory(prefix="rollkit-callgrind-") as out:
            subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=no", "--dump-before=getppid",
                            f"--callgrind-out-file={out}/count.%p", sys.executable, __file__, "--counted", setting,
                            "--tasks", str(args.tasks), "--concurrency", str(args.concurrency)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # parts: .1 until the first getppid, .2 the evaluation, the last after it
            parts = sorted(Path(out).glob("count.*.*"))
            if len(parts) != 2:
                raise RuntimeError(f"{setting}: callgrind counted {len(parts) + 1} parts, not 3: something else in "
                                   f"the run called getppid, so the evaluation's own count is not known")
            part = next(Path(out).glob("count.*.2")).read_text()
            counts[setting] = int(part.split("\nsummary: ", 1)[1].split()[0]) / args.tasks
    base = counts[settings[0]]
    for setting, count in counts.items():
        print(f"instructions {setting:16} {count:12,.0f} a rollout  {count - base:+10,.0f} ({count / base - 1:+.2%}) "
              f"over {settings[0]}")
        results.add(f"{setting} (instructions a rollout)", count, "instructions", base, settings[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--settings", default=",".join(DEFAULT),
                        help=f"comma separated, the first is the baseline (default {','.join(DEFAULT)}; "
                             f"also {','.join(SETTINGS[len(DEFAULT):])})")
    parser.add_argument("--sandbox", type=int, default=0, metavar="N",
                        help="instead: N rollouts of a sandboxed program, none against everything")
    parser.add_argument("--instructions", action="store_true",
                        help="instead: each setting's instructions per rollout, counted by callgrind (valgrind)")
    parser.add_argument("--counted", metavar="SETTING", help=argparse.SUPPRESS)  # --instructions' child
    json_option(parser)
    args = parser.parse_args()
    if args.sandbox:
        return _sandbox(args)
    if args.counted:
        return _counted(args.counted, arithmetic_tasks(args.tasks), args.concurrency)
    results = Results("overhead.py", f"what a setting a user turns on costs rk.evaluate: {args.tasks:,} demo rollouts "
                      f"x {args.rounds} rounds, concurrency {args.concurrency}")
    settings = args.settings.split(",")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown settings {unknown}; the settings are {', '.join(SETTINGS)}")
    if args.instructions:
        _instructions(settings, args, results)
        return results.save(args.json)
    tasks = arithmetic_tasks(args.tasks)
    _Unserialized.set_line(tasks)
    times = _measure(settings, tasks, args.rounds, args.concurrency)
    print(f"{args.tasks} rollouts x {args.rounds} rounds, concurrency {args.concurrency}, python {sys.version.split()[0]}")
    _report(times, args.tasks, results)
    print(f"pandas imported by the end: {'pandas' in sys.modules}")
    results.save(args.json)


def _sandbox(args: argparse.Namespace) -> None:
    """`--sandbox N`: N rollouts of a program in a bubblewrap sandbox (three
    model calls each), with nothing on and with everything on; skipped,
    saying why, where bubblewrap cannot run. CPU is this process's only
    (the programs run in their own), so wall time is the one to read."""
    why = sandbox_unavailable()
    if why is not None:
        print(f"sandbox mode skipped: {why}")
        return
    results = Results("overhead.py", f"everything on against nothing on, {args.sandbox} rollouts of a sandboxed "
                      f"program x {args.rounds} rounds, concurrency {args.concurrency}")
    tasks = [rk.Task(prompt=f"go {i}") for i in range(args.sandbox)]
    times = _measure(["none", "everything", "everything+silent"], tasks, args.rounds, args.concurrency,
                     _sandboxed_agent, warm=1)
    print(f"{args.sandbox} sandboxed rollouts x {args.rounds} rounds, concurrency {args.concurrency}")
    _report(times, args.sandbox, results)
    results.save(args.json)


if __name__ == "__main__":
    main()
