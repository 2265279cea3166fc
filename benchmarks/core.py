"""Core overhead benchmark, on the instant ScriptedModel.

Prints:
- the median framework overhead per turn over a 200-turn interaction
  (wall time of each turn minus the model's own time),
- rollouts per second for 1,000 single-turn rollouts run concurrently,
- peak resident memory of the process,
- the time `import rollkit` takes in a fresh interpreter (median of 5, the
  bytecode cached; and the first, compiling).

Run: python benchmarks/core.py [--json PATH]
(--json PATH also writes the numbers with the machine, load and date:
benchmarks/results/core.json is the one the docs' benchmarks page tables.)
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import rollkit as rk
from _common import Results, json_path


async def per_turn_overhead(turns: int = 200) -> tuple[float, float]:
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"))
    samples = []
    async with agent.interaction(rk.Task()) as it:
        for i in range(turns):
            t0 = time.perf_counter()
            await it.turn(f"message {i}")
            wall = time.perf_counter() - t0
            samples.append(wall - it.trace.turns[-1].latency)
    return statistics.median(samples), statistics.quantiles(samples, n=20)[-1]


async def concurrent_rollouts(n: int = 1000) -> float:
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"))
    tasks = [rk.Task(prompt=f"question {i}") for i in range(n)]
    t0 = time.perf_counter()
    traces = await asyncio.gather(*(agent.run(task) for task in tasks))
    elapsed = time.perf_counter() - t0
    assert all(t.ok for t in traces)
    return n / elapsed


def import_time() -> tuple[float, float]:
    """(first, median of the next 5): the first compiles the sources, as
    right after an install; the rest read the bytecode cache, as every later
    import does. The cache goes to a folder of its own, whatever
    PYTHONDONTWRITEBYTECODE says here (a user's Python writes it)."""
    code = "import time; t = time.perf_counter(); import rollkit; print(time.perf_counter() - t)"
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": cache}
        runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                     env=env).stdout) for _ in range(6)]
    return runs[0], statistics.median(runs[1:])


async def main() -> None:
    results = Results("core.py", "the core's overhead on the instant ScriptedModel; import time")
    await per_turn_overhead(20)  # warm caches and imports
    median, p95 = await per_turn_overhead()
    results.add("overhead per turn, 200-turn interaction (median)", median * 1e6, "µs")
    results.add("overhead per turn, 200-turn interaction (p95)", p95 * 1e6, "µs")
    print(f"overhead per turn (200-turn interaction): median {median * 1e6:.1f} us, p95 {p95 * 1e6:.1f} us")
    await concurrent_rollouts(100)
    rates = [await concurrent_rollouts() for _ in range(3)]
    print(f"1,000 concurrent single-turn rollouts: {statistics.median(rates):,.0f} rollouts/s (median of 3)")
    results.add("1,000 concurrent single-turn rollouts, one process (median of 3)", statistics.median(rates), "rollouts/s")
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results.add("peak memory of this process (max RSS)", peak_kib / 1024, "MiB")
    print(f"peak memory (max RSS): {peak_kib / 1024:.1f} MiB")
    first, cached = import_time()
    print(f"import rollkit: {cached * 1000:.0f} ms (median of 5 fresh interpreters; the first, compiling "
          f"the sources: {first * 1000:.0f} ms)")
    results.add("import rollkit, bytecode cached (median of 5 fresh interpreters)", cached * 1000, "ms")
    results.add("import rollkit, first after an install (compiling)", first * 1000, "ms")
    results.save(json_path(sys.argv))


if __name__ == "__main__":
    asyncio.run(main())
