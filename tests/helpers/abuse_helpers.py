"""`python helpers/abuse_helpers.py hog N LIMIT` and `python helpers/abuse_helpers.py flood N
LIMIT`: the file-descriptor exhaustion cases of tests/test_server_abuse.py,
in a process of its own whose descriptor limit is lowered to LIMIT (the test
process keeps its own).

Rollout A runs tests/programs/hog.py, which opens N connections to the
interception server and holds what it can; while it holds them (its model
call is waiting in the test model), rollout B, an ordinary program rollout
with a tool (so it needs a working folder, pipes, a port for its MCP server
and a connection), runs to the end. Prints one JSON line: how each rollout
ended, what the hog's attempts got, and how many connections the server
held at most.

`flood`: rollout A runs tests/programs/flood.py in a SandboxRuntime, which
opens N idle connections to each relay of its sandbox (the proxy, the
interception server's, the MCP tool server's); while it holds them, rollout
B, an ordinary sandboxed program rollout with a tool, runs to the end. Prints
one JSON line: how each rollout ended, what the flood's connections got, how
many descriptors rollkit held while flooded, and how many log records the
flood caused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import sys
from pathlib import Path

import rollkit as rk
from rollkit.programs import interception

HERE = Path(__file__).resolve().parents[1]  # tests/
PYTHON = sys.executable


class Shout(rk.Task):
    @rk.tool
    def shout(self, text: str) -> str:
        """Upper-case a text."""
        return text.upper()


async def hog(n: int) -> dict:
    holding, release = asyncio.Event(), asyncio.Event()
    peak = 0

    async def hog_model(request: rk.Request) -> str:
        holding.set()
        await release.wait()
        return "done"

    a_agent = rk.Agent(model=rk.ScriptedModel(hog_model),
                       harness=rk.ProgramHarness([PYTHON, str(HERE / "programs" / "hog.py"), str(n)]),
                       runtime=rk.SubprocessRuntime)
    b_agent = rk.Agent(model=rk.ScriptedModel(["fine"]),
                       harness=rk.ProgramHarness([PYTHON, str(HERE / "programs" / "plain.py"), "swallow-error"]),
                       runtime=rk.SubprocessRuntime)
    a = a_agent.rollout(rk.Task(prompt="hog"))
    assert await a.open(), a.trace.errors
    stepping = asyncio.ensure_future(a.step())
    async with asyncio.timeout(120):
        await holding.wait()
    server = interception._shared[asyncio.get_running_loop()].server
    peak = getattr(getattr(server, "guard", None), "connections", -1)
    b = await b_agent.run(Shout(prompt="hello"))
    release.set()
    await stepping
    counts = json.loads(a.runtime.read("counts.json"))
    a_trace = await a.close()
    return {"a_ok": a_trace.ok, "a_error": a_trace.error and a_trace.error.message,
            "b_ok": b.ok, "b_error": b.error and f"{b.error.type}: {b.error.message}",
            "counts": counts, "held_while_holding": peak}


class _Counted(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records = 0
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1
        if len(self.first) < 5:
            self.first.append(record.getMessage()[:200])


async def flood(n: int) -> dict:
    holding, release = asyncio.Event(), asyncio.Event()

    async def flood_model(request: rk.Request) -> str:
        holding.set()
        await release.wait()
        return "done"

    def sandbox() -> rk.SandboxRuntime:
        return rk.SandboxRuntime(ro_paths=[HERE / "programs"])

    a_agent = rk.Agent(model=rk.ScriptedModel(flood_model), runtime=sandbox,
                       harness=rk.ProgramHarness([PYTHON, str(HERE / "programs" / "flood.py"), str(n)]))
    b_agent = rk.Agent(model=rk.ScriptedModel(["fine"]), runtime=sandbox,
                       harness=rk.ProgramHarness([PYTHON, str(HERE / "programs" / "plain.py"), "swallow-error"]))
    logs = _Counted()
    logging.getLogger().addHandler(logs)
    a = a_agent.rollout(Shout(prompt="flood"))
    assert await a.open(), a.trace.errors
    stepping = asyncio.ensure_future(a.step())
    async with asyncio.timeout(240):
        waiting = asyncio.ensure_future(holding.wait())
        await asyncio.wait([waiting, stepping], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
    if not holding.is_set():  # the flood ended without its model call
        trace = await a.close()
        return {"a_ok": trace.ok, "a_error": trace.error and f"{trace.error.type}: {trace.error.message}",
                "log_records": logs.records, "first_log_records": logs.first}
    counts = json.loads(a.runtime.read("counts.json"))
    descriptors = len(os.listdir("/proc/self/fd"))
    served = interception._shared[asyncio.get_running_loop()].server.port
    names = {0: "proxy", served: "interception"}
    relays = {names.get(port, "mcp"): {"held": r.open, "refused": r.refused, "cap": r.cap}
              for port, r in a.runtime.relays.items()}
    b = await b_agent.run(Shout(prompt="hello"))
    release.set()
    await stepping
    a_trace = await a.close()
    logging.getLogger().removeHandler(logs)
    return {"a_ok": a_trace.ok, "a_error": a_trace.error and f"{a_trace.error.type}: {a_trace.error.message}",
            "b_ok": b.ok, "b_error": b.error and f"{b.error.type}: {b.error.message}",
            "b_answer": b.messages[-1].content if b.messages else None,
            "counts": counts, "relays": relays, "descriptors_while_flooded": descriptors, "log_records": logs.records,
            "first_log_records": logs.first}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("hog", "flood"):
        print("usage: helpers/abuse_helpers.py hog|flood N LIMIT", file=sys.stderr)
        return 2
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(argv[2]), hard))
    run = hog if argv[0] == "hog" else flood
    print(json.dumps(asyncio.run(run(int(argv[1])))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
