"""verifiers' own evaluation of a taskset, for tests/test_verifiers_tasks.py.

Run with a verifiers 0.4 interpreter: `python tests/helpers/verifiers_native_eval.py
TASKSET_ID BASE_URL OUT_DIR [vf-eval options...]`, with the model's key in
SCRIPTED_KEY. It runs `vf-eval` (verifiers.v1.cli.eval.main) as is, with its
`null` harness (verifiers' own chat loop program, its MCP client and tool
servers, its scoring), and prints one JSON line per trace: the task's idx,
rewards {name: [score, weight]} and metrics.

One thing is replaced: `Runtime.prepare_uv_script`, which would install the
chat program's declared packages (openai, mcp==2.0.0, httpx, httpx2, tenacity,
certifi) with uv from the network. This interpreter already holds exactly
those, so the program is written to the runtime and run by it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path


async def prepare_uv_script_here(self, script, env=None, *, activate=True):  # noqa: ANN001 - verifiers' signature
    """`Runtime.prepare_uv_script` for an interpreter that already holds the
    script's packages: the script is written to the runtime's scripts folder and
    run by this interpreter (benchmarks/peers.py's verifiers side uses it too)."""
    # The subprocess runtime's scripts folder is on this machine. Rollouts run
    # side by side (and other vf-eval processes share the folder): a script is
    # written once, whole, under a name of its own and renamed into place, so
    # no rollout runs a file another is still writing.
    data = script.encode() if isinstance(script, str) else script
    path = Path(self.scripts_dir) / f"{hashlib.sha256(data).hexdigest()}.py"
    if not path.is_file() or path.read_bytes() != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        writing = path.with_name(f"{path.name}.{os.getpid()}.{id(data)}")
        writing.write_bytes(data)
        os.replace(writing, path)
    return [sys.executable, str(path)]


def main() -> None:
    from verifiers.v1.cli.eval.main import main as vf_eval
    from verifiers.v1.runtimes.base import Runtime

    taskset, base_url, out, *options = sys.argv[1:]
    Runtime.prepare_uv_script = prepare_uv_script_here
    vf_eval([taskset, "-m", "scripted", "--client.base-url", base_url, "--client.api-key-var", "SCRIPTED_KEY",
             "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess", "-o", out, "--no-push", *options])
    print()  # vf-eval leaves its last line open
    for found in sorted(Path(out).rglob("traces.jsonl")):
        for line in found.read_text().splitlines():
            for trace in json.loads(line)["traces"]:
                rewards = {name: None if r is None else [r["score"], r.get("weight", 1.0)]
                           for name, r in trace["rewards"].items()}
                print(json.dumps({"idx": trace["task"]["data"]["idx"], "rewards": rewards, "metrics": trace["metrics"],
                                  "stop": trace.get("stop_condition"),
                                  "errors": [str(e.get("message", e)) for e in trace.get("errors", [])]}))


if __name__ == "__main__":
    main()
