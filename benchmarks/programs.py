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
  Anthropic Messages, Gemini generateContent): a client in another process (stdlib http.client,
  keep-alive, so no SDK cost on either side) posts the same body 500 times
  to a bare aiohttp server answering a fixed body in that dialect (the
  floor: HTTP alone), then to rollkit's server (parse, session pipeline,
  instant ScriptedModel, recording, answer). Printed: both medians, their
  difference (the overhead, model time subtracted) and the ratio.
- the live-program user turn: a persistent program (stdlib only; it
  keeps one keep-alive connection to the server) answers each user turn
  with one chat-completions call and yields; rollkit drives TURNS turns
  through `rollout.step(message)`. Beside it, the floor: the same program
  over the same pipes driven by bare asyncio, with no model call (the
  program's yield echoes the turn), and a bare aiohttp server answering the
  call (the floor with the call). Printed: medians per turn.
- concurrent rollouts on one server: N rollouts at once, each making 20
  calls with its own openai SDK client, all through the one shared server.
  The clients run in the server's own process and event loop (no 2-core
  machine can start hundreds of programs), so they compete with the server
  for the CPU: a worst case. For each N: whether every call was answered,
  calls per second, and median / p95 call latency.

- SandboxRuntime side by side with SubprocessRuntime: the extra cost of a
  program launch and of a model call through the sandbox's bridge.

Run: python benchmarks/programs.py [--json PATH] (only the sandbox part: ... programs.py sandbox; only the live turn:
... programs.py live)
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
from _common import Results, json_path

MEASURED = Results("programs.py", "the interception server: overhead per model call of a real program, per dialect, "
                   "the live-program user turn, concurrent rollouts on one server, the sandbox's extra cost")

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


async def program_overhead(calls: int = CALLS, runtime: type = rk.SubprocessRuntime) -> tuple[float, float, float, float]:
    harness = rk.ProgramHarness([sys.executable, "bench.py", str(calls)])
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"), harness=harness, runtime=runtime)
    rollout = agent.rollout(Bench(prompt="go"))
    assert await rollout.open(), rollout.trace.errors
    await rollout.step()
    trace = await rollout.close()
    assert trace.ok and len(trace.model_calls) == calls, trace.errors
    latencies = rollout.ctx.state["latencies"]
    samples = [wall - call.latency for wall, call in zip(latencies, trace.model_calls)]
    return (statistics.median(samples), statistics.quantiles(samples, n=20)[-1], statistics.median(latencies),
            statistics.quantiles(samples, n=10)[0])


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
    "gemini": ("/v1beta/models/m:generateContent", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
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
        headers = {"Authorization": f"Bearer {ctx.secret}", "x-api-key": ctx.secret, "anthropic-version": "2023-06-01",
                   "x-goog-api-key": ctx.secret}
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


# The live program: one JSON line per turn on stdin, one model call (chat
# completions over one keep-alive connection, stdlib only, so it starts in
# milliseconds), then a yield line. With "echo" it makes no call: the floor.
LIVE_PROGRAM = """
import http.client, json, os, sys, urllib.parse
mode = sys.argv[1]
base = urllib.parse.urlsplit(os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"))
conn = http.client.HTTPConnection(base.hostname, base.port)
headers = {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", ""), "Content-Type": "application/json"}
history = []
for line in sys.stdin:
    history.extend(json.loads(line)["messages"])
    if mode == "call":
        conn.request("POST", base.path + "/chat/completions", body=json.dumps({"model": "m", "messages": history}),
                     headers=headers)
        reply = json.loads(conn.getresponse().read())["choices"][0]["message"]
        history.append(reply)
        answer = reply["content"]
    else:
        answer = history[-1]["content"]
    sys.stdout.write(json.dumps({"yield": answer}) + "\\n")
    sys.stdout.flush()
"""
TURNS = 300


class _LiveTask(rk.Task):
    async def setup(self, ctx):
        ctx.runtime.write("live.py", LIVE_PROGRAM)


async def live_turn(turns: int = TURNS) -> tuple[float, float, float, float]:
    """Median wall time of one user turn through rollkit (step with the
    user's message -> the program's stdin -> its model call through the
    interception server -> its yield), this process's CPU time per turn
    (rollkit's share, less noisy than wall time on a shared machine), and
    the median wall time of the first and of the last 50 turns (the program
    resends the whole conversation each call, so a turn's parsing grows
    with it)."""
    harness = rk.ProgramHarness([sys.executable, "live.py", "call"], persistent=True)
    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "ok"), harness=harness, runtime=rk.SubprocessRuntime)
    rollout = agent.rollout(_LiveTask(prompt="go"), user=True)
    assert await rollout.open(), rollout.trace.errors
    await rollout.step()
    walls = []
    cpu = time.process_time()
    for i in range(turns):
        t0 = time.perf_counter()
        assert await rollout.step(f"turn {i}"), rollout.trace.errors
        walls.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu) / turns
    trace = await rollout.close()
    assert trace.ok and trace.num_turns == turns + 1, trace.errors
    return statistics.median(walls), cpu, statistics.median(walls[:50]), statistics.median(walls[-50:])


async def live_floor(turns: int = TURNS, *, call: bool = False) -> tuple[float, float]:
    """The same program over the same pipes, driven by bare asyncio: a line
    in, a line out. `call=True`: it calls a bare aiohttp server answering a
    fixed chat completion each turn."""
    import os
    import tempfile

    from aiohttp import web

    answer = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]}

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "live.py")
        with open(path, "w") as f:
            f.write(LIVE_PROGRAM)
        env = {"PATH": os.environ.get("PATH", ""), "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "k"}
        process = await asyncio.create_subprocess_exec(
            sys.executable, path, "call" if call else "echo", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env=env)
        walls = []
        cpu = 0.0
        try:
            for i in range(turns + 1):
                if i == 1:
                    cpu = time.process_time()
                t0 = time.perf_counter()
                message = [{"role": "user", "content": f"turn {i}"}]
                process.stdin.write((json.dumps({"messages": message}) + "\n").encode())
                await process.stdin.drain()
                line = await process.stdout.readline()
                assert json.loads(line)["yield"], line
                if i:  # the first line pays the program's start
                    walls.append(time.perf_counter() - t0)
            cpu = (time.process_time() - cpu) / turns
        finally:
            process.stdin.close()
            await process.wait()
            await runner.cleanup()
    return statistics.median(walls), cpu


async def _launch_times(runtime: rk.Runtime, launches: int) -> list[float]:
    times = []
    for _ in range(launches):
        t0 = time.perf_counter()
        done = await runtime.run(["true"], timeout=60)
        times.append(time.perf_counter() - t0)
        assert done.returncode == 0, done
    return times


# A round trip over one TCP connection to the host's loopback: 300 bytes out,
# the same back (an echo server in the benchmark's event loop, where the
# interception server runs), timed per exchange; prints the median. Stdlib
# sockets only, so the client costs the same in both runtimes.
ROUND_TRIP = """
import json, os, socket, statistics, sys, time
port = int(os.environ["ECHO_URL"].rsplit(":", 1)[1])
sock = socket.create_connection(("127.0.0.1", port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
message, times = b"x" * 300, []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    sock.sendall(message)
    got = 0
    while got < len(message):
        got += len(sock.recv(65536))
    times.append(time.perf_counter() - t0)
print(json.dumps(statistics.median(times)))
"""


class _Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


async def _round_trip(runtime: rk.Runtime, port: int, exchanges: int) -> float:
    runtime.write("round_trip.py", ROUND_TRIP)
    done = await runtime.run([sys.executable, "round_trip.py", str(exchanges)],
                             env={"ECHO_URL": f"http://127.0.0.1:{port}"}, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def sandbox_side_by_side(launches: int = 40, calls: int = 300, rounds: int = 3, exchanges: int = 2000) -> None:
    """SandboxRuntime next to SubprocessRuntime in the same run: the extra cost
    of one program launch (`true`, to its exit), of one round trip over a
    connection through the sandbox's bridge (relay inside, Unix socket,
    forwarder outside; what a model call pays on top of SubprocessRuntime's,
    measured without the SDK's and the server's noise around it) and of one
    model call with the openai SDK through ProgramHarness. Each round measures
    both runtimes, interleaved; the medians of the rounds are printed. Launch
    and model call are printed twice: the median of a round, and its 10th
    percentile (the launch or call the scheduler did not hold up: on a loaded
    2-core machine a median swings by milliseconds with the load alone)."""
    plain, sandbox = rk.SubprocessRuntime(), rk.SandboxRuntime()
    await plain.start()
    await sandbox.start()
    echo = await asyncio.get_running_loop().create_server(_Echo, "127.0.0.1", 0)
    port = echo.sockets[0].getsockname()[1]
    try:
        times = [(await _launch_times(plain, launches), await _launch_times(sandbox, launches)) for _ in range(rounds)]
        trips = [(await _round_trip(plain, port, exchanges), await _round_trip(sandbox, port, exchanges))
                 for _ in range(rounds)]
    finally:
        echo.close()
        await plain.stop()
        await sandbox.stop()
    calls_pairs = [(await program_overhead(calls), await program_overhead(calls, rk.SandboxRuntime))
                   for _ in range(rounds)]
    launch = [(statistics.median(plain), statistics.median(boxed)) for plain, boxed in times]
    launch_p10 = [(statistics.quantiles(plain, n=10)[0], statistics.quantiles(boxed, n=10)[0]) for plain, boxed in times]
    per_call = [(plain[0], boxed[0]) for plain, boxed in calls_pairs]
    per_call_p10 = [(plain[3], boxed[3]) for plain, boxed in calls_pairs]
    for what, pairs, unit in (("program launch", launch, "ms"), ("launch p10", launch_p10, "ms"),
                              ("round trip", trips, "ms"), ("model call", per_call, "ms"),
                              ("model call p10", per_call_p10, "ms")):
        base, boxed = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        extra = statistics.median(p[1] - p[0] for p in pairs)
        print(f"{what:14s}: SubprocessRuntime {base * 1e3:.3f} {unit}, SandboxRuntime {boxed * 1e3:.3f} {unit}, "
              f"extra {extra * 1e3:.3f} {unit} (median of {rounds} rounds)")
        MEASURED.add(f"{what}, SandboxRuntime (median of {rounds} rounds)", boxed * 1e3, unit, base * 1e3, "SubprocessRuntime")


async def live_side_by_side(rounds: int = 3) -> None:
    """The live-program user turn beside its floors: rounds of each, interleaved; the medians of the rounds."""
    results = [(*await live_turn(), *await live_floor(), *await live_floor(call=True)) for _ in range(rounds)]
    turn, turn_cpu, first, last, echo, _, called, called_cpu = (statistics.median(r[i] for r in results)
                                                                  for i in range(8))
    print(f"live-program user turn ({TURNS} turns of one conversation, one model call each): median "
          f"{turn * 1e3:.2f} ms through rollkit (first 50 turns {first * 1e3:.2f} ms, last 50 {last * 1e3:.2f} ms); floor: a bare echo over the same pipes {echo * 1e3:.2f} ms, "
          f"with its call answered by a bare aiohttp server {called * 1e3:.2f} ms; CPU per turn in this process "
          f"{turn_cpu * 1e3:.2f} ms (rollkit) vs {called_cpu * 1e3:.2f} ms (the floor with the call)")
    MEASURED.add(f"live-program user turn through rollkit (median, {TURNS} turns)", turn * 1e3, "ms", called * 1e3,
                 "bare echo program, its call answered by bare aiohttp")


async def main() -> None:
    out = json_path(sys.argv)
    which = [a for a in sys.argv[1:] if a not in ("--json", out)]
    if which in (["sandbox"], ["live"]):
        await (sandbox_side_by_side() if which == ["sandbox"] else live_side_by_side())
        MEASURED.save(out)
        return
    median, p95, wall, _ = await program_overhead()
    print(f"overhead per model call through the interception server ({CALLS} calls of one program): "
          f"median {median * 1e3:.2f} ms, p95 {p95 * 1e3:.2f} ms (median call as the program sees it: "
          f"{wall * 1e3:.2f} ms)")
    MEASURED.add(f"overhead per model call of a real program ({CALLS} calls, median)", median * 1e3, "ms")
    for name in DIALECT_CALLS:
        # Three rounds, each rollkit then its floor; the medians of the rounds,
        # so a burst of load from another process does not decide the number.
        rounds = [await dialect_overhead(name) for _ in range(3)]
        measured, floor, ratio = (statistics.median(r[i] for r in rounds) for i in range(3))
        print(f"dialect {name:9s}: median {measured * 1e3:.3f} ms per call through rollkit (model time subtracted), "
              f"bare aiohttp floor {floor * 1e3:.3f} ms, overhead {(measured - floor) * 1e3:.3f} ms, "
              f"ratio {ratio:.2f}x the floor")
        MEASURED.add(f"dialect {name} per call through rollkit (median of 3 rounds)", measured * 1e3, "ms", floor * 1e3,
                     "bare aiohttp server")
    await live_side_by_side()
    sustained = 0
    for n in (1, 10, 50, 100, 200, 400):
        ok, rate, med, p95 = await concurrent(n)
        print(f"{n:4d} concurrent rollouts x 20 calls: {'all answered' if ok else 'FAILED'}, "
              f"{rate:,.0f} calls/s, latency median {med * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms")
        if not ok:
            break
        MEASURED.add(f"{n} concurrent rollouts x 20 calls on one server", rate, "calls/s")
        sustained = n
    print(f"one server sustained {sustained} concurrent rollouts (largest level tried with every call answered)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory: {peak:.0f} MiB")
    MEASURED.add("peak resident memory", peak, "MiB")
    await sandbox_side_by_side()
    MEASURED.save(out)


if __name__ == "__main__":
    asyncio.run(main())
