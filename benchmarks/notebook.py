"""Benchmark of the notebook layer.

Prints:
1. the time to build the four DataFrames (rollouts, turns, phases, signals)
   from 10,000 saved traces (aim: under 2 s), after loading them with rk.load;
2. the time `rk.replay_hooks` takes over those 10,000 saved traces with 3
   hooks (a response @stop, a request @intercept, a trace @stop) and one
   limit (aim: under 2 s);
3. the time one live-plot update takes per turn (aim: under 20 ms), for the
   budget burn chart and the phase timeline, and for the whole rollout panel;
4. `rk.load` of 100,000 saved example traces (aim: under 5 s and under 600 MB
   peak RSS, in a fresh process so the peak is the load's own), the four
   frames over them (aim: under 3 s), and `rk.frames.rollouts(path)` reading
   the file itself;
5. the run monitor's cost per finished rollout in the run's process (the
   live file, the event subscription and a RunMonitor fed in-process; aim:
   under 50 µs), as the difference of the same run with and without it;
6. a RunMonitor's redraws per second at rollout rates from 10/s to
   1,000,000/s (bounded: at most 4/s plus the final one), and over a real run;
7. catching up with a run folder of 100,000 trace lines (aim: under 2 s);
8. `rk.compare` of two 10,000-trace runs with 1,000 bootstrap resamples
   (aim: under 1 s), paired by task and by (task, repeat).

Run: python benchmarks/notebook.py [--traces 10000] [--turns 60] [--big 100000] [--only-watch] [--json PATH]
Writes its trace files to a temporary folder and removes it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rollkit as rk
from rollkit import frames, plots
from rollkit.examples import Arithmetic, arithmetic_tasks, demo_agent
from rollkit.notebook.stepping import NotebookRollout
from _common import Results, json_option

MEASURED = Results("notebook.py", "the notebook layer: frames, replay, live updates, big loads, watching and "
                   "comparing runs")


async def _make_traces(n: int) -> list[rk.Trace]:
    agent = demo_agent()
    base = await asyncio.gather(*(agent.run(t) for t in arithmetic_tasks(24)))
    broken = rk.Agent(model=rk.ScriptedModel([], name="broken"))
    base += await asyncio.gather(*(broken.run(t) for t in arithmetic_tasks(2)))
    return [base[i % len(base)].model_copy(update={"id": f"t{i:06d}"}) for i in range(n)]


def bench_frames(n: int) -> list[rk.Trace]:
    """The four frames from n saved traces; returns the traces as loaded."""
    traces = asyncio.run(_make_traces(n))
    with tempfile.TemporaryDirectory(prefix="rollkit-bench-") as folder:
        path = rk.save(traces, Path(folder))
        t0 = time.perf_counter()
        loaded = rk.load(path)
        load_s = time.perf_counter() - t0
    timings = {}
    shapes = {}
    for build in (frames.rollouts, frames.turns, frames.phases, frames.signals):
        t0 = time.perf_counter()
        frame = build(loaded)
        timings[build.__name__] = time.perf_counter() - t0
        shapes[build.__name__] = frame.shape
    total = sum(timings.values())
    print(f"frames from {len(loaded)} saved traces (rk.load took {load_s:.2f} s, not counted):")
    for name, seconds in timings.items():
        print(f"  {name:<9} {seconds * 1000:8.1f} ms  rows x cols = {shapes[name]}")
        MEASURED.add(f"frame {name} from {len(loaded):,} saved traces", seconds * 1000, "ms")
    verdict = "ok" if total < 2.0 else "OVER the 2 s aim"
    print(f"  all four  {total * 1000:8.1f} ms  ({verdict})")
    return loaded


class _Replayed(Arithmetic):
    """Three hooks to replay: one at each boundary kind."""

    @rk.stop
    def big_answer(self, response: rk.Response) -> bool:
        return len(response.message.content or "") > 20

    @rk.intercept
    def shout(self, request: rk.Request) -> rk.Request | None:
        first = request.messages[0]
        if first.role != "system" or first.content.isupper():
            return None
        return request.model_copy(update={"messages": [first.model_copy(update={"content": first.content.upper()}),
                                                       *request.messages[1:]]})

    @rk.stop
    def long_trace(self, trace: rk.Trace) -> bool:
        return trace.num_total_tokens > 60


def bench_replay(traces: list[rk.Trace]) -> None:
    t0 = time.perf_counter()
    frame = rk.replay_hooks(traces, _Replayed, limits={"max_total_tokens": 40})
    seconds = time.perf_counter() - t0
    verdict = "ok" if seconds < 2.0 else "OVER the 2 s aim"
    print(f"replay_hooks over {len(traces)} saved traces, 3 hooks + 1 limit: {seconds * 1000:.0f} ms, "
          f"{len(frame)} rows ({verdict})")
    MEASURED.add(f"replay_hooks over {len(traces):,} saved traces, 3 hooks + 1 limit", seconds * 1000, "ms")


async def _bench_live(turns: int) -> None:
    agent = rk.Agent(model="echo", limits={"max_turns": turns + 1, "max_total_tokens": 10**9})
    ro = NotebookRollout(agent, rk.Task(id="bench"))
    await ro.open_async()
    burn = plots.LiveBudgetBurn(ro.rollout)
    timeline = plots.LivePhaseTimeline(ro.rollout)
    panel = ro.panel(chart=False)
    samples: dict[str, list[float]] = {"budget burn": [], "phase timeline": [], "panel (no chart)": []}
    # Time each view's own event handler, on the events it receives per turn.
    burn.close()
    timeline.close()
    panel._unsubscribe()

    def timed(name: str, handler):  # type: ignore[no-untyped-def]
        current: list[float] = []

        def on_event(event: rk.Event) -> None:
            t0 = time.perf_counter()
            handler(event)
            current.append(time.perf_counter() - t0)
            if event.kind == "segment_end":  # one user turn: one segment, one model turn
                samples[name].append(sum(current))
                current.clear()

        return on_event

    ro.subscribe(timed("budget burn", burn._on_event))
    ro.subscribe(timed("phase timeline", timeline._on_event))
    ro.subscribe(timed("panel (no chart)", panel._on_event))
    for i in range(turns):
        await ro.step_async(f"message number {i}")
    await ro.close_async()
    print(f"live updates, per turn, over {turns} turns (all events of that turn):")
    for name, values in samples.items():
        values = values[1:]  # the first turn pays one-off imports and template work
        median = statistics.median(values) * 1000
        worst = max(values) * 1000
        verdict = "ok" if median < 20 else "OVER the 20 ms aim"
        print(f"  {name:<17} median {median:6.2f} ms   max {worst:6.2f} ms  ({verdict})")
        MEASURED.add(f"live update per turn, {name} (median of {turns - 1} turns)", median, "ms")


# Run in a child process: its peak RSS is then what loading took. VmHWM
# (Linux) starts afresh at exec; ru_maxrss would carry the parent's peak.
_CHILD = """
import resource, sys, time
def peak_mb():
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
import rollkit as rk
before = peak_mb()
t0 = time.perf_counter()
traces = rk.load(sys.argv[1])
load_s = time.perf_counter() - t0
peak = peak_mb()
from rollkit import frames
t0 = time.perf_counter()
shapes = [build(traces).shape for build in (frames.rollouts, frames.turns, frames.phases, frames.signals)]
frames_s = time.perf_counter() - t0
count = len(traces)
del traces
t0 = time.perf_counter()
frames.rollouts(sys.argv[1])
direct_s = time.perf_counter() - t0
print(count, load_s, before, peak, frames_s, direct_s, shapes)
"""


def bench_big_load(n: int) -> None:
    traces = asyncio.run(_make_traces(n))
    with tempfile.TemporaryDirectory(prefix="rollkit-bench-") as folder:
        path = rk.save(traces, Path(folder) / "big.jsonl")
        size = path.stat().st_size / 1e6
        del traces
        done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the loading process failed:\n{done.stderr}")
    count, load_s, before, peak, frames_s, direct_s, shapes = done.stdout.strip().split(" ", 6)
    load_s, frames_s, direct_s, before, peak = map(float, (load_s, frames_s, direct_s, before, peak))
    print(f"rk.load of {count} saved traces ({size:.0f} MB file): {load_s:.2f} s "
          f"({'ok' if load_s < 5 else 'OVER the 5 s aim'}), peak RSS {peak:.0f} MB "
          f"({before:.0f} MB before loading; {'ok' if peak < 600 else 'OVER the 600 MB aim'})")
    print(f"the four frames over them: {frames_s:.2f} s ({'ok' if frames_s < 3 else 'OVER the 3 s aim'}); "
          f"shapes {shapes}")
    print(f"rk.frames.rollouts(path), loading the file itself: {direct_s:.2f} s")
    MEASURED.add_record(f"rk.load of {int(count):,} saved traces, fresh process",
                        {"load_s": load_s, "peak_rss_mb": peak, "four_frames_s": frames_s,
                         "frames.rollouts(path)_s": direct_s})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--big", type=int, default=100_000, help="traces for the big load (0: skip it)")
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts per run when timing the monitor's cost")
    parser.add_argument("--lines", type=int, default=100_000, help="trace lines of the folder to follow")
    parser.add_argument("--compare", type=int, default=10_000, help="traces per run for rk.compare")
    parser.add_argument("--only-watch", action="store_true", help="only 5-8: watching and comparing runs")
    json_option(parser)
    args = parser.parse_args()
    if not args.only_watch:
        bench_replay(bench_frames(args.traces))  # replay the same saved traces
        asyncio.run(_bench_live(args.turns))
        if args.big:
            bench_big_load(args.big)
    main_watch(args)
    MEASURED.save(args.json)



# ---- watching and comparing runs (rollkit.runs.live, rollkit.notebook.monitor, rk.compare) ----


def _careful_agent() -> rk.Agent:
    from rollkit.examples import careful_calculator_model

    return demo_agent(model=careful_calculator_model())


def _plain_run(n: int, watched: bool, folder: Path) -> float:
    """Seconds per rollout of an n-rollout run writing a run folder, with or
    without what watching adds: the live file, the rollouts' event
    subscription, and a RunMonitor fed in this process (monitor=True). The
    baseline switches the watching off where the run turns it on."""
    from rollkit.notebook.monitor import RunMonitor
    from rollkit.runs import evaluation

    tasks = arithmetic_tasks(n)
    watch_run = evaluation._Run._watch_run

    async def run() -> float:
        pending = rk.evaluate_async(demo_agent(), tasks, concurrency=32, progress=False, out=folder)
        if watched:
            RunMonitor(pending)
        t0 = time.perf_counter()
        await pending
        return (time.perf_counter() - t0) / n

    if not watched:
        evaluation._Run._watch_run = lambda self: None  # type: ignore[method-assign]
    try:
        return asyncio.run(run())
    finally:
        evaluation._Run._watch_run = watch_run  # type: ignore[method-assign]


class _Recorder:
    """A watcher that records what a run tells its watchers, to replay it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []  # type: ignore[type-arg]

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, args))


def _replay_cost(rollouts: int) -> float:
    """Seconds per finished rollout that watching costs, measured by replay:
    one real run's watcher calls and rollout events (24 rollouts of the
    example set) replayed `rollouts` times into a real LiveWriter (a temp
    file), a RunState and a RunMonitor, through a real EventBus whose one
    subscriber takes the 2 kinds the run subscribes to; minus the same
    events emitted with no subscriber (what a run pays anyway)."""
    from rollkit.core.events import EventBus
    from rollkit.notebook.monitor import RunMonitor
    from rollkit.runs.live import LiveWriter

    agent, recorder, events = demo_agent(), _Recorder(), []
    agent.subscribe(lambda e: events.append((e.kind, e.rollout_id, e.data)))

    async def record() -> None:
        pending = rk.evaluate_async(agent, arithmetic_tasks(24), progress=False)
        pending.attach(recorder)
        await pending

    asyncio.run(record())
    by_rollout: dict[str, list] = {}  # type: ignore[type-arg]
    for kind, rid, data in events:
        by_rollout.setdefault(rid, []).append((kind, data))
    traces = [args[0] for name, args in recorder.calls if name == "finished"]
    rounds = max(1, rollouts // len(traces))

    class Source:
        def attach(self, state):  # type: ignore[no-untyped-def]
            self.state = state

    def run(watched: bool) -> float:
        with tempfile.TemporaryDirectory(prefix="rollkit-bench-") as root:
            bus = EventBus()
            sinks: list = []  # type: ignore[type-arg]
            if watched:
                writer = LiveWriter(Path(root) / "live.jsonl")
                monitor = RunMonitor(Source())
                sinks = [writer, monitor.state]
                current = [""]

                def on_event(event):  # type: ignore[no-untyped-def]
                    if event.kind == "phase_start":
                        for sink in sinks:
                            sink.phase(current[0], event.data["phase"])
                    else:
                        for sink in sinks:
                            sink.turn(current[0], event.data["turn"], 40 * event.data["turn"], 0.001)

                bus.subscribe(on_event, ("phase_start", "turn"))
            t0 = time.perf_counter()
            for _ in range(rounds):
                for trace in traces:
                    rid = trace.info["rollout_id"]
                    for sink in sinks:
                        sink.started(rid)
                    if watched:
                        current[0] = rid
                    for kind, data in by_rollout.get(trace.id, ()):
                        bus.emit(kind, trace.id, **data)
                    for sink in sinks:
                        sink.finished(trace)
            seconds = time.perf_counter() - t0
            if watched:
                writer.end("done")
            return seconds / (rounds * len(traces))

    async def in_loop(watched: bool) -> float:  # the monitor schedules its redraws on the loop
        return run(watched)

    return (min(asyncio.run(in_loop(True)) for _ in range(3))
            - min(asyncio.run(in_loop(False)) for _ in range(3)))


def _draw_time() -> float:
    """Seconds one RunMonitor redraw takes over a run of 2,000 rollouts."""
    from rollkit.notebook.monitor import RunMonitor

    traces = asyncio.run(_make_traces(2000))
    monitor = RunMonitor(traces)
    t0 = time.perf_counter()
    for _ in range(20):
        monitor.draw()
    return (time.perf_counter() - t0) / 20


def bench_monitor_cost(n: int) -> None:
    """The monitor's cost per finished rollout in the run's process, two ways:
    by replay (precise: only what watching adds), and as the difference of
    the same real run with and without it, alternated, best of 5 each (the
    rollouts' own cost varies more than that on a shared machine)."""
    replayed = _replay_cost(20_000) * 1e6
    draw = _draw_time() * 1000
    plain, watched = [], []
    with tempfile.TemporaryDirectory(prefix="rollkit-bench-") as root:
        for i in range(5):
            plain.append(_plain_run(n, False, Path(root) / f"p{i}"))
            watched.append(_plain_run(n, True, Path(root) / f"w{i}"))
    cost = (min(watched) - min(plain)) * 1e6
    verdict = "ok" if replayed < 50 else "OVER the 50 µs aim"
    print("monitor cost per finished rollout in the run's process (live file + events + RunState + RunMonitor):")
    print(f"  replayed: {replayed:6.1f} µs per rollout ({verdict}); plus its redraws, at most 4/s of "
          f"{draw:.2f} ms each whatever the rollout rate")
    print(f"  real {n}-rollout runs of the example set, best of 5: {min(plain) * 1e6:.1f} µs/rollout without, "
          f"{min(watched) * 1e6:.1f} with: {cost:.1f} µs")
    MEASURED.add("run monitor's cost per finished rollout, replayed", replayed, "µs")
    MEASURED.add(f"a real {n}-rollout run with the monitor (best of 5)", min(watched) * 1e6, "µs/rollout",
                 min(plain) * 1e6, "without it")


def bench_redraw_rate() -> None:
    """Redraws per second of a RunMonitor fed at rollout rates from 10/s to
    1,000,000/s (simulated clock: the rate is exact), and of one over a real
    run of fast rollouts (real clock and event loop)."""
    from rollkit.notebook.monitor import RunMonitor
    from rollkit.runs.live import finished_from_trace

    trace = asyncio.run(demo_agent().run(arithmetic_tasks(1)[0]))

    class Source:
        def attach(self, state):  # type: ignore[no-untyped-def]
            pass

    print("redraws per second of a RunMonitor (interval 0.25 s: at most 4/s plus the final one):")
    record = finished_from_trace(trace)
    seconds = 2.0
    for rate in (10, 1_000, 100_000, 1_000_000):
        now = [0.0]
        timers: list[tuple[float, object]] = []

        def schedule(delay, fn):  # type: ignore[no-untyped-def]
            entry = (now[0] + delay, fn)
            timers.append(entry)
            return _Handle(timers, entry)

        monitor = RunMonitor(Source(), clock=lambda: now[0], schedule=schedule)
        n = int(rate * seconds)
        start = monitor.redraws
        for i in range(n):
            now[0] = i / rate
            if timers and timers[0][0] <= now[0]:
                timers.pop(0)[1]()
            monitor.state.add(record)
        now[0] = seconds
        for _, fire in list(timers):
            fire()
        print(f"  {rate:>9,} rollouts/s for {seconds:.0f} s (simulated clock): {(monitor.redraws - start) / seconds:4.1f} redraws/s, "
              f"the last showing {monitor.state.done:,} done")

    async def real() -> tuple[float, int, int]:
        pending = rk.evaluate_async(demo_agent(), arithmetic_tasks(3000), concurrency=64, progress=False)
        monitor = RunMonitor(pending)
        start = monitor.redraws
        t0 = time.perf_counter()
        await pending
        return time.perf_counter() - t0, monitor.redraws - start, monitor.state.done

    elapsed, redraws, done = asyncio.run(real())
    print(f"  a real run: {done} rollouts in {elapsed:.2f} s ({done / elapsed:,.0f}/s): {redraws} redraws, "
          f"{redraws / elapsed:.1f}/s")
    MEASURED.add(f"RunMonitor redraws over a real run of {done} rollouts", redraws / elapsed, "/s")


class _Handle:
    def __init__(self, timers: list, entry: tuple) -> None:  # type: ignore[type-arg]
        self.timers, self.entry = timers, entry

    def cancel(self) -> None:
        if self.entry in self.timers:
            self.timers.remove(self.entry)


def bench_follow(lines: int) -> None:
    """Catching up with a run folder of `lines` traces (a monitor opened on a
    big run written elsewhere): FolderFollower's first poll, and a
    RunMonitor's first draw over it."""
    from rollkit.notebook.monitor import RunMonitor
    from rollkit.runs.live import FolderFollower

    traces = asyncio.run(_make_traces(lines))  # distinct ids: each line is its own rollout
    with tempfile.TemporaryDirectory(prefix="rollkit-bench-") as root:
        folder = Path(root)
        rk.save(traces, folder)
        size = (folder / "traces.jsonl").stat().st_size
        t0 = time.perf_counter()
        follower = FolderFollower(folder)
        follower.poll()
        poll_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        monitor = RunMonitor(folder, follow=False)
        monitor_s = time.perf_counter() - t0
        assert follower.state.done == lines == monitor.state.done, (follower.state.done, lines)
    verdict = "ok" if max(poll_s, monitor_s) < 2 else "OVER the 2 s aim"
    print(f"following a run folder of {lines:,} trace lines ({size / 1e6:.0f} MB):")
    print(f"  FolderFollower first poll {poll_s:.2f} s; RunMonitor(folder) built and drawn {monitor_s:.2f} s ({verdict})")
    MEASURED.add_record(f"following a run folder of {lines:,} trace lines",
                        {"FolderFollower first poll_s": poll_s, "RunMonitor(folder) built and drawn_s": monitor_s})


def bench_compare(n: int, resamples: int) -> None:
    """rk.compare of two n-trace runs (flawed vs careful toy, n tasks once
    each: n pairs), every signal, `resamples` bootstrap resamples."""
    flawed = asyncio.run(_make_traces(26))

    async def careful() -> list[rk.Trace]:
        agent = _careful_agent()
        return list(await asyncio.gather(*(agent.run(t) for t in arithmetic_tasks(24))))

    good = asyncio.run(careful())

    def run_of(traces: list[rk.Trace]) -> list[rk.Trace]:
        return [traces[i % len(traces)].model_copy(update={"id": f"t{i}", "info": {"example_id": f"task-{i}", "repeat": 0}})
                for i in range(n)]

    a, b = run_of(flawed[:24]), run_of(good)
    for by in ("task", "repeat"):
        t0 = time.perf_counter()
        result = rk.compare(a, b, by=by, resamples=resamples)
        seconds = time.perf_counter() - t0
        verdict = "ok" if seconds < 1 else "OVER the 1 s aim"
        reward = result.signal("reward")
        print(f"rk.compare of two {n:,}-trace runs by {by}, {len(result.signals)} signals, {resamples} resamples: "
              f"{seconds:.2f} s ({verdict}); reward B - A {reward.diff:.3f} [{reward.low:.3f}, {reward.high:.3f}]")
        MEASURED.add(f"rk.compare of two {n:,}-trace runs by {by}, {resamples} resamples", seconds, "s")


def main_watch(args: argparse.Namespace) -> None:
    bench_monitor_cost(args.rollouts)
    bench_redraw_rate()
    bench_follow(args.lines)
    bench_compare(args.compare, 1000)


if __name__ == "__main__":
    main()
