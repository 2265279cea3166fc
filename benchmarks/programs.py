"""Interception-server benchmark: what routing a program's model calls
through rollkit costs, and how many rollouts one server carries at once.

Prints:
- the framework overhead per model call for a real program (a subprocess
  using the openai SDK, run by ProgramHarness in a SubprocessRuntime): the
  program times each call, and the model's own time (trace.model_calls
  latency, on the instant ScriptedModel) is subtracted. Median and p95 over
  500 calls. This is program -> HTTP -> server -> session pipeline ->
  ScriptedModel -> back, SDK included.
- the overhead per call of each dialect (chat completions, Responses,
  Anthropic Messages): a client in another process (stdlib http.client,
  keep-alive, so no SDK cost on either side) posts the same body 500 times
  to a bare aiohttp server answering a fixed body in that dialect (the
  floor: HTTP alone), then to rollkit's server (parse, session pipeline,
  instant ScriptedModel, recording, answer). Printed: both medians, their
  difference (the overhead, model time subtracted) and the ratio.
- concurrent rollouts on one server: N rollouts at once, each making 20
  calls with its own openai SDK client, all through the one shared server.
  The clients run in the server's own process and event loop (no 2-core
  machine can start hundreds of programs), so they compete with the server
  for the CPU: a worst case. For each N: whether every call was answered,
  calls per second, and median / p95 call latency.

- SandboxRuntime side by side with SubprocessRuntime: the extra cost of a
  program launch and of a model call through the sandbox's bridge.

Run: python benchmarks/programs.py (only the sandbox part: ... programs.py sandbox)
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


async def program_overhead(calls: int = CALLS, runtime: type = rk.SubprocessRuntime) -> tuple[float, float, float]:
    harness = rk.ProgramHarness([sys.executable, "bench.py", str(calls)])
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"), harness=harness, runtime=runtime)
    rollout = agent.rollout(Bench(prompt="go"))
    assert await rollout.open(), rollout.trace.errors
    await rollout.step()
    trace = await rollout.close()
    assert trace.ok and len(trace.model_calls) == calls, trace.errors
    latencies = rollout.ctx.state["latencies"]
    samples = [wall - call.latency for wall, call in zip(latencies, trace.model_calls)]
    return statistics.median(samples), statistics.quantiles(samples, n=20)[-1], statistics.median(latencies)


# The dialect client: posts BODY to URL `calls` times on one keep-alive
# connection and prints the latencies as JSON. Stdlib only, so both servers
# are measured with the same cheap client.
CLIENT = """
import http.client, json, sys, time, urllib.parse
url, headers, body, calls = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4])
parts = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(parts.hostname, parts.port)
latencies = []
for _ in range(calls):
    t0 = time.perf_counter()
    conn.request("POST", parts.path, body=body, headers={"Content-Type": "application/json", **headers})
    answer = conn.getresponse()
    answer.read()
    assert answer.status == 200, answer.status
    latencies.append(time.perf_counter() - t0)
print(json.dumps(latencies))
"""

DIALECT_CALLS = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"model": "m", "input": "hi"}),
    "anthropic": ("/v1/messages", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}),
}


async def _client(url: str, headers: dict[str, str], body: dict, calls: int) -> list[float]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, url, json.dumps(headers), json.dumps(body), str(calls),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0, "the benchmark client failed"
    return json.loads(out)


async def _floor(path: str, answer: dict, body: dict, calls: int) -> list[float]:
    """A bare aiohttp server answering `answer` on `path`: HTTP and JSON alone."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post(path, handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        return await _client(f"http://127.0.0.1:{port}{path}", {}, body, calls)
    finally:
        await runner.cleanup()


class _DialectHarness(interception.InterceptedHarness):
    """Runs the dialect client against this rollout's registration."""

    name = "dialect-client"
    served_model = "m"

    def __init__(self, path: str, body: dict, calls: int) -> None:
        self.path, self.body, self.calls = path, body, calls

    async def segment(self, ctx, messages):
        base = ctx.services["anthropic"]
        headers = {"Authorization": f"Bearer {ctx.secret}", "x-api-key": ctx.secret, "anthropic-version": "2023-06-01"}
        ctx.state["latencies"] = await _client(base + self.path, headers, self.body, self.calls)
        ctx.state["payload"] = self.registration(ctx)._last_payload  # what the floor answers


async def dialect_overhead(name: str, calls: int = CALLS) -> tuple[float, float, float]:
    path, body = DIALECT_CALLS[name]
    harness = _DialectHarness(path, body, calls)
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"), harness=harness)
    rollout = agent.rollout(rk.Task(prompt="bench"))
    assert await rollout.open(), rollout.trace.errors
    await rollout.step()
    trace = await rollout.close()
    assert trace.ok and len(trace.model_calls) == calls, trace.errors
    measured = [wall - call.latency for wall, call in zip(rollout.ctx.state["latencies"], trace.model_calls)]
    # The floor answers with what rollkit answered: the same body size and JSON work.
    floor = await _floor(path, rollout.ctx.state["payload"], body, calls)
    walls = statistics.median(rollout.ctx.state["latencies"])
    return statistics.median(measured), statistics.median(floor), walls / statistics.median(floor)


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


async def _launch_times(runtime: rk.Runtime, launches: int) -> list[float]:
    times = []
    for _ in range(launches):
        t0 = time.perf_counter()
        done = await runtime.run(["true"], timeout=60)
        times.append(time.perf_counter() - t0)
        assert done.returncode == 0, done
    return times


async def sandbox_side_by_side(launches: int = 40, calls: int = 300, rounds: int = 3) -> None:
    """SandboxRuntime next to SubprocessRuntime in the same run: the extra cost
    of one program launch (`true`, to its exit) and of one model call through
    the sandbox's bridge (relay inside, Unix socket, forwarder outside). Each
    round measures both, interleaved; the medians of the rounds are printed."""
    plain, sandbox = rk.SubprocessRuntime(), rk.SandboxRuntime()
    await plain.start()
    await sandbox.start()
    try:
        launch = [(statistics.median(await _launch_times(plain, launches)),
                   statistics.median(await _launch_times(sandbox, launches))) for _ in range(rounds)]
    finally:
        await plain.stop()
        await sandbox.stop()
    per_call = [((await program_overhead(calls))[0], (await program_overhead(calls, rk.SandboxRuntime))[0])
                for _ in range(rounds)]
    for what, pairs, unit in (("program launch", launch, "ms"), ("model call", per_call, "ms")):
        base, boxed = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        extra = statistics.median(p[1] - p[0] for p in pairs)
        print(f"{what:14s}: SubprocessRuntime median {base * 1e3:.3f} {unit}, SandboxRuntime {boxed * 1e3:.3f} {unit}, "
              f"extra {extra * 1e3:.3f} {unit} (median of {rounds} rounds)")


async def main() -> None:
    if sys.argv[1:] == ["sandbox"]:
        await sandbox_side_by_side()
        return
    median, p95, wall = await program_overhead()
    print(f"overhead per model call through the interception server ({CALLS} calls of one program): "
          f"median {median * 1e3:.2f} ms, p95 {p95 * 1e3:.2f} ms (median call as the program sees it: "
          f"{wall * 1e3:.2f} ms)")
    for name in DIALECT_CALLS:
        # Three rounds, each rollkit then its floor; the medians of the rounds,
        # so a burst of load from another process does not decide the number.
        rounds = [await dialect_overhead(name) for _ in range(3)]
        measured, floor, ratio = (statistics.median(r[i] for r in rounds) for i in range(3))
        print(f"dialect {name:9s}: median {measured * 1e3:.3f} ms per call through rollkit (model time subtracted), "
              f"bare aiohttp floor {floor * 1e3:.3f} ms, overhead {(measured - floor) * 1e3:.3f} ms, "
              f"ratio {ratio:.2f}x the floor")
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
    await sandbox_side_by_side()


if __name__ == "__main__":
    asyncio.run(main())
