"""`python abuse_helpers.py hog N LIMIT`: the file-descriptor exhaustion case
of tests/test_server_abuse.py, in a process of its own whose descriptor
limit is lowered to LIMIT (the test process keeps its own).

Rollout A runs tests/programs/hog.py, which opens N connections to the
interception server and holds what it can; while it holds them (its model
call is waiting in the test model), rollout B, an ordinary program rollout
with a tool (so it needs a working folder, pipes, a port for its MCP server
and a connection), runs to the end. Prints one JSON line: how each rollout
ended, what the hog's attempts got, and how many connections the server
held at most.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path

import rollkit as rk
from rollkit.programs import interception

HERE = Path(__file__).resolve().parent
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


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "hog":
        print("usage: abuse_helpers.py hog N LIMIT", file=sys.stderr)
        return 2
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(argv[2]), hard))
    print(json.dumps(asyncio.run(hog(int(argv[1])))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
