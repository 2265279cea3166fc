"""Interception-server benchmark: what routing a program's model calls
through rollkit costs, and how many rollouts one server carries at once.

Prints:
- the framework overhead per model call for a real program (a subprocess
  using the openai SDK, run by ProgramHarness in a SubprocessRuntime): the
  program times each call, and the model's own time (trace.model_calls
  latency, on the instant ScriptedModel) is subtracted. Median and p95 over
  500 calls. This is program -> HTTP -> server -> session pipeline ->
  ScriptedModel -> back, SDK included.
- concurrent rollouts on one server: N rollouts at once, each making 20
  calls with its own openai SDK client, all through the one shared server.
  The clients run in the server's own process and event loop (no 2-core
  machine can start hundreds of programs), so they compete with the server
  for the CPU: a worst case. For each N: whether every call was answered,
  calls per second, and median / p95 call latency.

Run: python benchmarks/programs.py
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import sys
import time

import openai

import rollkit as rk
from rollkit.programs import interception

CALLS = 500

# The measured program, written into the runtime's folder at setup. It uses
# the openai SDK only, like any program run by ProgramHarness.
PROGRAM = """
import json, sys, time
import openai

calls = int(sys.argv[1])
sys.stdin.readline()
client = openai.OpenAI(max_retries=0)
latencies = []
for i in range(calls):
    t0 = time.perf_counter()
    client.chat.completions.create(model="bench", messages=[{"role": "user", "content": f"call {i}"}])
    latencies.append(time.perf_counter() - t0)
with open("latencies.json", "w") as f:
    json.dump(latencies, f)
"""


class Bench(rk.Task):
    async def setup(self, ctx):
        ctx.runtime.write("bench.py", PROGRAM)

    async def finalize(self, ctx):
        ctx.state["latencies"] = json.loads(ctx.runtime.read("latencies.json"))


async def program_overhead(calls: int = CALLS) -> tuple[float, float, float]:
    harness = rk.ProgramHarness([sys.executable, "bench.py", str(calls)])
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"), harness=harness, runtime=rk.SubprocessRuntime)
    rollout = agent.rollout(Bench(prompt="go"))
    assert await rollout.open(), rollout.trace.errors
    await rollout.step()
    trace = await rollout.close()
    assert trace.ok and len(trace.model_calls) == calls, trace.errors
    latencies = rollout.ctx.state["latencies"]
    samples = [wall - call.latency for wall, call in zip(latencies, trace.model_calls)]
    return statistics.median(samples), statistics.quantiles(samples, n=20)[-1], statistics.median(latencies)


class _SDKHarness(interception.InterceptedHarness):
    """Stands in for a program inside this process: registers with the shared
    server like ProgramHarness and calls it with the openai SDK."""

    name = "sdk"

    def __init__(self, calls: int, latencies: list[float]) -> None:
        self.calls = calls
        self.latencies = latencies

    async def segment(self, ctx, messages):
        client = openai.AsyncOpenAI(base_url=ctx.services["openai"], api_key=ctx.secret, max_retries=0, timeout=300)
        try:
            for i in range(self.calls):
                t0 = time.perf_counter()
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"call {i}"}])
                self.latencies.append(time.perf_counter() - t0)
        finally:
            await client.close()


async def concurrent(n: int, calls: int = 20) -> tuple[bool, float, float, float]:
    latencies: list[float] = []
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"), harness=_SDKHarness(calls, latencies))
    t0 = time.perf_counter()
    traces = await asyncio.gather(*(agent.run(rk.Task(prompt=f"rollout {i}")) for i in range(n)))
    elapsed = time.perf_counter() - t0
    ok = all(t.ok and t.num_turns == calls for t in traces)
    return ok, n * calls / elapsed, statistics.median(latencies), statistics.quantiles(latencies, n=20)[-1]


async def main() -> None:
    median, p95, wall = await program_overhead()
    print(f"overhead per model call through the interception server ({CALLS} calls of one program): "
          f"median {median * 1e3:.2f} ms, p95 {p95 * 1e3:.2f} ms (median call as the program sees it: "
          f"{wall * 1e3:.2f} ms)")
    sustained = 0
    for n in (1, 10, 50, 100, 200, 400):
        ok, rate, med, p95 = await concurrent(n)
        print(f"{n:4d} concurrent rollouts x 20 calls: {'all answered' if ok else 'FAILED'}, "
              f"{rate:,.0f} calls/s, latency median {med * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms")
        if not ok:
            break
        sustained = n
    print(f"one server sustained {sustained} concurrent rollouts (largest level tried with every call answered)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory: {peak:.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
