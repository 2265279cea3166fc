"""Benchmark of the eager frames: `rk.frames.<kind>(traces)` over Trace
objects in memory (rollkit.analysis.frames: each trace's JSON record through
the store's row builder, then Arrow and pandas as the lazy run reads them).

Prints the seconds each of the five store frames (rollouts, turns, calls,
phases, signals) takes over N demo traces (the arithmetic demo agent, run
once per task and copied under new ids), best of 3.

Run: python benchmarks/frames_eager.py [--traces 2000] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from _common import Results, json_option


async def _traces(n: int) -> list[rk.Trace]:
    agent = demo_agent()
    base = [await agent.run(t) for t in arithmetic_tasks(12)]
    return [base[i % len(base)].model_copy(update={"id": f"{i:06d}"}) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=2000)
    json_option(parser)
    args = parser.parse_args()
    results = Results("frames_eager.py", f"the eager frames over {args.traces:,} demo traces in memory, best of 3")
    traces = asyncio.run(_traces(args.traces))
    for kind in ("rollouts", "turns", "calls", "phases", "signals"):
        build = getattr(rk.frames, kind)
        build(traces[:10])  # imports and first-use costs out of the way
        best = min(_timed(build, traces) for _ in range(3))
        print(f"rk.frames.{kind}({len(traces)} traces): {best:.3f} s, {len(build(traces))} rows")
        results.add(f"rk.frames.{kind}({len(traces):,} traces)", best, "s")
    results.save(args.json)


def _timed(build, traces) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    build(traces)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
