"""Peer comparison: the same workload in rollkit and in inspect-ai, one run.

Workload, on an instant model (rollkit's ScriptedModel, inspect-ai's built-in
`mockllm/model`), at the same concurrency for both (rollkit `concurrency`,
inspect-ai `max_samples` and `max_connections`), each writing its own log
(rollkit a run folder, inspect-ai its eval log) into a temporary folder:

- single-turn: SAMPLES samples, one model call each, scored by "the reply
  contains the target";
- conversations: CONVERSATIONS conversations of TURNS turns each (the user
  says "go on" after every reply), all time being framework time.

Printed: samples per second on the single-turn part, and overhead per turn
(wall time of the conversation part / turns, the model being instant), for
both tools, and their ratios. Each figure is the best of `--rounds` runs,
after a warm-up run, with interpreter start-up and imports excluded.

The rollkit side runs in this process; the inspect-ai side runs this same
file in another process (`--inspect-side`), so nothing here imports rollkit
or inspect-ai at module level. That process is this interpreter when it has
inspect-ai (rollkit's `inspect` extra installs it), else a virtual
environment of its own: `~/.cache/rollkit-bench/inspect-venv` (or
$ROLLKIT_BENCH_VENV), created and filled with `pip install inspect-ai` on
first use.

Run: python benchmarks/peers.py [--samples 300] [--conversations 5]
     [--turns 20] [--concurrency 16] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Results, json_option

REPLY = "Default output from mockllm/model"
TARGET = "mockllm"


# ---- rollkit side --------------------------------------------------------------


def _rollkit_workload():  # type: ignore[no-untyped-def]
    import rollkit as rk

    class Contains(rk.Task):
        @rk.reward
        def match(self, trace: rk.Trace) -> float:
            return float(TARGET in trace.last_reply)

    class Conversation(rk.Harness):
        """Call the model, then say "go on", TURNS times, in one segment."""

        name = "conversation"

        def __init__(self, turns: int) -> None:
            self.turns = turns

        async def segment(self, ctx, messages):  # type: ignore[no-untyped-def]
            conversation = ctx.messages
            conversation.extend(messages)
            for turn in range(self.turns):
                response = await ctx.complete(conversation)
                conversation.append(response.message)
                if turn < self.turns - 1:
                    conversation.append(rk.UserMessage(content="go on"))

    return rk, Contains, Conversation


async def _rollkit_run(samples: int, conversations: int, turns: int, concurrency: int, folder: Path) -> dict:
    rk, Contains, Conversation = _rollkit_workload()
    from rollkit.runs.evaluation import evaluate_async

    model = rk.ScriptedModel(lambda request: REPLY, name="instant")
    single = [Contains(id=f"s{i}", prompt=f"question {i}") for i in range(samples)]
    talks = [Contains(id=f"c{i}", prompt=f"conversation {i}") for i in range(conversations)]
    t0 = time.perf_counter()
    result = await evaluate_async(rk.Agent(model=model), single, concurrency=concurrency, out=folder / "single", progress=False)
    t1 = time.perf_counter()
    chat = await evaluate_async(
        rk.Agent(model=model, harness=Conversation(turns)), talks, concurrency=concurrency, out=folder / "chat", progress=False
    )
    t2 = time.perf_counter()
    assert all(t.reward == 1.0 for t in result.traces), "rollkit single-turn samples should all score 1"
    assert all(t.num_turns == turns for t in chat.traces), "rollkit conversations should have every turn"
    return {"single_s": t1 - t0, "chat_s": t2 - t1, "turns": sum(t.num_turns for t in chat.traces)}


def rollkit_side(args: argparse.Namespace) -> dict:
    best: dict = {}
    with tempfile.TemporaryDirectory(prefix="rollkit-bench-") as tmp:
        asyncio.run(_rollkit_run(5, 1, 2, args.concurrency, Path(tmp) / "warm"))
        for round_ in range(args.rounds):
            run = asyncio.run(
                _rollkit_run(args.samples, args.conversations, args.turns, args.concurrency, Path(tmp) / f"r{round_}")
            )
            best = _best(best, run)
    return best


# ---- inspect-ai side (runs under the venv's python) ----------------------------


def _inspect_run(samples: int, conversations: int, turns: int, concurrency: int, log_dir: str) -> dict:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageUser, ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, solver

    @solver
    def conversation():  # type: ignore[no-untyped-def]
        async def solve(state, generate):  # type: ignore[no-untyped-def]
            for turn in range(turns):
                state = await generate(state)
                if turn < turns - 1:
                    state.messages.append(ChatMessageUser(content="go on"))
            return state

        return solve

    def instant(input, tools, tool_choice, config):  # type: ignore[no-untyped-def]
        # Usage counted by words, as rollkit's ScriptedModel does: mockllm's
        # default counts with a tiktoken encoding fetched from the network.
        output = ModelOutput.from_content(model="mockllm", content=REPLY)
        prompt = sum(1 + len(m.text.split()) for m in input)
        reply = 1 + len(REPLY.split())
        output.usage = ModelUsage(input_tokens=prompt, output_tokens=reply, total_tokens=prompt + reply)
        return output

    model = get_model("mockllm/model", custom_outputs=instant, memoize=False)
    options = dict(
        model=model, max_samples=concurrency, max_connections=concurrency,
        display="none", log_dir=log_dir, log_level="error",
    )
    single = Task(dataset=[Sample(input=f"question {i}", target=TARGET) for i in range(samples)], solver=generate(), scorer=includes())
    talks = Task(
        dataset=[Sample(input=f"conversation {i}", target=TARGET) for i in range(conversations)],
        solver=conversation(), scorer=includes(), message_limit=4 * turns,
    )
    t0 = time.perf_counter()
    [log] = eval(single, **options)
    t1 = time.perf_counter()
    [chat] = eval(talks, **options)
    t2 = time.perf_counter()
    assert log.status == "success" and chat.status == "success", (log.status, chat.status)
    accuracy = log.results.scores[0].metrics["accuracy"].value
    assert accuracy == 1.0, f"inspect-ai single-turn samples should all score 1, got {accuracy}"
    return {"single_s": t1 - t0, "chat_s": t2 - t1, "turns": turns * conversations}


def inspect_side(args: argparse.Namespace) -> dict:
    best: dict = {}
    with tempfile.TemporaryDirectory(prefix="inspect-bench-") as tmp:
        _inspect_run(5, 1, 2, args.concurrency, os.path.join(tmp, "warm"))
        for round_ in range(args.rounds):
            run = _inspect_run(args.samples, args.conversations, args.turns, args.concurrency, os.path.join(tmp, f"r{round_}"))
            best = _best(best, run)
    return best | {"version": importlib.metadata.version("inspect-ai")}


# ---- driver ---------------------------------------------------------------------


def _best(best: dict, run: dict) -> dict:
    if not best:
        return dict(run)
    return {"single_s": min(best["single_s"], run["single_s"]), "chat_s": min(best["chat_s"], run["chat_s"]), "turns": run["turns"]}


def _venv() -> Path:
    return Path(os.environ.get("ROLLKIT_BENCH_VENV", Path.home() / ".cache" / "rollkit-bench" / "inspect-venv"))


def ensure_inspect_venv() -> Path:
    """The venv's python, with inspect-ai installed (created on first use)."""
    venv = _venv()
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import inspect_ai"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    print(f"creating {venv} with inspect-ai (once; about half a minute)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "inspect-ai"], check=True)
    return python


def _inspect_python() -> str:
    """This interpreter when it has inspect-ai, else the venv's (made once)."""
    import importlib.util

    return sys.executable if importlib.util.find_spec("inspect_ai") else str(ensure_inspect_venv())


def _run_inspect(args: argparse.Namespace) -> dict:
    python = _inspect_python()
    command = [
        str(python), __file__, "--inspect-side", "--samples", str(args.samples), "--conversations",
        str(args.conversations), "--turns", str(args.turns), "--concurrency", str(args.concurrency),
        "--rounds", str(args.rounds),
    ]
    # No keys or endpoints are needed: mockllm answers in-process.
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "INSPECT_LOG_LEVEL": "error"})
    if done.returncode != 0:
        raise SystemExit(f"the inspect-ai side failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report(args: argparse.Namespace, ours: dict, peer: dict) -> None:
    def figures(run: dict) -> tuple[float, float]:
        return args.samples / run["single_s"], 1000.0 * run["chat_s"] / run["turns"]

    our_rate, our_turn = figures(ours)
    peer_rate, peer_turn = figures(peer)
    print(
        f"workload: {args.samples} single-turn samples + {args.conversations} x {args.turns}-turn conversations, "
        f"instant model, concurrency {args.concurrency}, best of {args.rounds}, logs written by both"
    )
    print(f"{'':12}{'samples/s':>12}{'overhead/turn':>16}")
    print(f"{'rollkit':12}{our_rate:>12.1f}{our_turn:>13.3f} ms")
    print(f"{'inspect-ai':12}{peer_rate:>12.1f}{peer_turn:>13.3f} ms")
    print(f"ratio: rollkit {our_rate / peer_rate:.1f}x the samples/s; {peer_turn / our_turn:.1f}x less overhead per turn")
    results = Results("peers.py", f"the same workload in rollkit and in inspect-ai {peer['version']} ({args.samples} single-turn samples, "
                      f"{args.conversations} x {args.turns}-turn conversations, instant model, concurrency "
                      f"{args.concurrency}, best of {args.rounds})")
    results.add("single-turn samples, rollkit", our_rate, "samples/s", peer_rate, "inspect-ai")
    results.add("overhead per conversation turn, rollkit", our_turn, "ms", peer_turn, "inspect-ai")
    results.save(args.json)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--conversations", type=int, default=5)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inspect-side", action="store_true", help=argparse.SUPPRESS)
    json_option(parser)
    args = parser.parse_args()
    if args.inspect_side:
        print(json.dumps(inspect_side(args)))
        return
    ours = rollkit_side(args)
    peer = _run_inspect(args)
    _report(args, ours, peer)


if __name__ == "__main__":
    main()
