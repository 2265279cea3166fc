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
   the file itself.

Run: python benchmarks/notebook.py [--traces 10000] [--turns 60] [--big 100000]
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


async def _bench_live(turns: int) -> None:
    agent = rk.Agent(model="echo", limits={"max_turns": turns + 1, "max_total_tokens": 10**9})
    ro = NotebookRollout(agent, rk.Task(id="bench"))
    await ro.aopen()
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
        await ro.astep(f"message number {i}")
    await ro.aclose()
    print(f"live updates, per turn, over {turns} turns (all events of that turn):")
    for name, values in samples.items():
        values = values[1:]  # the first turn pays one-off imports and template work
        median = statistics.median(values) * 1000
        worst = max(values) * 1000
        verdict = "ok" if median < 20 else "OVER the 20 ms aim"
        print(f"  {name:<17} median {median:6.2f} ms   max {worst:6.2f} ms  ({verdict})")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--big", type=int, default=100_000, help="traces for the big load (0: skip it)")
    args = parser.parse_args()
    bench_replay(bench_frames(args.traces))  # replay the same saved traces
    asyncio.run(_bench_live(args.turns))
    if args.big:
        bench_big_load(args.big)


if __name__ == "__main__":
    main()
