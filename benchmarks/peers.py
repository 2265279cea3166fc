"""Peer comparison: the same workload in rollkit, inspect-ai and verifiers, one run.

Workload, on an instant model, at the same concurrency for all (rollkit
`concurrency`, inspect-ai `max_samples` and `max_connections`, verifiers
`-c`), each writing its own log (rollkit a run folder, inspect-ai its eval
log, verifiers its run's traces.jsonl) into a temporary folder:

- single-turn: SAMPLES samples, one model call each, scored by "the reply
  contains the target";
- conversations: CONVERSATIONS conversations of TURNS turns each (the user
  says "go on" after every reply), all time being framework time.

Printed: samples per second on the single-turn part, and overhead per turn
(wall time of the conversation part / turns, the model being instant), for
each tool, and rollkit's ratios to each. Each figure is the best of
`--rounds` runs, after a warm-up run, with interpreter start-up and imports
excluded.

The models: rollkit's ScriptedModel and inspect-ai's built-in `mockllm/model`
answer in-process. verifiers' harness is a program of its own that speaks
HTTP to its relay, so its model is a scripted OpenAI-protocol server on
127.0.0.1 in this process (tests/helpers/scripted_provider.py): its CPU
time per call (each connection's thread clocked) is taken off verifiers'
time per turn. verifiers 0.4 (v1 tasksets, its `null` harness in the subprocess
runtime, benchmarks/_peers_verifiers.py the taskset) relaunches that program
on every user turn, so a third figure times a turn inside one running
conversation, each tool's conversations one at a time (model call start to
the next's): rollkit's and inspect-ai's user turns, and for verifiers a
tool-call loop in one chat program. Its single-turn part runs
`--verifiers-samples` samples (each starts the program).

The rollkit side runs in this process; each peer runs this same file in
another process (`--inspect-side`, `--verifiers-side`), so nothing here
imports rollkit, inspect-ai or verifiers at module level. inspect-ai's
process is this interpreter when it has inspect-ai (rollkit's `inspect`
extra installs it), else a virtual environment of its own:
`~/.cache/rollkit-bench/inspect-venv` (or $ROLLKIT_BENCH_VENV), created and
filled with `pip install inspect-ai` on first use. verifiers' is the venv
scripts/test.sh builds, ~/.cache/rollkit-oracles/verifiers (or
$ROLLKIT_PEERS_VERIFIERS_PYTHON); without it that side is skipped, saying so.

Run: python benchmarks/peers.py [--samples 300] [--conversations 5]
     [--turns 20] [--concurrency 16] [--rounds 3] [--verifiers-samples 30]
     [--peers inspect,verifiers] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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
    # The conversations again, one at a time: a turn's time inside one conversation, as the peers' are timed.
    alone = await evaluate_async(
        rk.Agent(model=model, harness=Conversation(turns)), talks, concurrency=1, out=folder / "alone", progress=False
    )
    return {"single_s": t1 - t0, "chat_s": t2 - t1, "turns": sum(t.num_turns for t in chat.traces),
            "in_program_turn_s": _turn_to_turn([[call.start for call in t.model_calls] for t in alone.traces])}


def _turn_to_turn(starts: list[list[float]]) -> float:
    """The median, over every conversation's model calls, of the time from a
    call's start to the next one's: a turn's time inside one running
    conversation (the median, as benchmarks/core.py's per-turn figure, so a
    collector's pause in one turn does not count)."""
    return statistics.median(b - a for s in starts for a, b in zip(s, s[1:]))


def rollkit_side(args: argparse.Namespace) -> dict:
    def run(samples: int, conversations: int, turns: int, concurrency: int, folder: str) -> dict:
        return asyncio.run(_rollkit_run(samples, conversations, turns, concurrency, Path(folder)))

    return _best_of_rounds(run, args.samples, args, "rollkit-bench-")


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
    # The conversations again, one at a time, as rollkit's (see _rollkit_run).
    [alone] = eval(talks, **(options | {"max_samples": 1, "max_connections": 1}))
    starts = [[event.timestamp.timestamp() for event in sample.events if event.event == "model"] for sample in alone.samples]
    assert all(len(s) == turns for s in starts), f"inspect-ai conversations should have {turns} model calls: {starts}"
    return {"single_s": t1 - t0, "chat_s": t2 - t1, "turns": turns * conversations, "in_program_turn_s": _turn_to_turn(starts)}


def inspect_side(args: argparse.Namespace) -> dict:
    best = _best_of_rounds(_inspect_run, args.samples, args, "inspect-bench-")
    return best | {"version": importlib.metadata.version("inspect-ai")}


# ---- verifiers side (runs under the verifiers venv's python) ---------------------


def _verifiers_eval(part: str, count: int, turns: int, concurrency: int, out: str, tools: bool = False) -> tuple[float, list]:
    """(seconds, traces) of one `vf-eval` of COUNT tasks of TURNS turns, as the
    CLI runs it (its config parsed from the CLI's options, then `run_eval`,
    which writes the run's traces.jsonl): verifiers' `null` harness (its own
    chat program and model relay) in the subprocess runtime, the scripted
    server at ROLLKIT_PEERS_BASE_URL as the model. With `tools`, each task is
    one segment (one chat program) in which the model calls a tool TURNS - 1
    times before it answers; else each turn after the first is a user turn."""
    from pydantic_config import cli
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.cli.resolve import narrow_config, with_positional_taskset
    from verifiers.v1.configs.cli.eval import EvalConfig

    argv = with_positional_taskset([
        "_peers_verifiers", "--env.taskset.count", str(count), "--env.taskset.prompt", part,
        "--env.turns", "1" if tools else str(turns), "--env.taskset.task.tools", str(tools),
        "-m", "scripted", "--client.base-url", os.environ["ROLLKIT_PEERS_BASE_URL"], "--client.api-key-var",
        "ROLLKIT_PEERS_KEY", "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
        "-c", str(concurrency), "-o", out, "--no-push", "--no-rich",
    ])
    sys.argv = [sys.argv[0], *argv]  # the CLI parser reads them there
    config = cli(narrow_config(EvalConfig, argv))
    t0 = time.perf_counter()
    episodes = asyncio.run(run_eval(config))
    elapsed = time.perf_counter() - t0
    traces = [trace for episode in episodes for trace in episode.traces]
    assert len(traces) == count, f"verifiers ran {len(traces)} of {count} {part} tasks"
    assert all(t.reward == 1.0 for t in traces), f"verifiers {part} tasks should all score 1: {[t.reward for t in traces]}"
    assert all(t.num_turns == turns for t in traces), (
        f"verifiers {part}s should have {turns} turns each: {[(t.num_turns, t.errors) for t in traces]}")
    return elapsed, traces


def _verifiers_run(samples: int, conversations: int, turns: int, concurrency: int, folder: str) -> dict:
    """verifiers' figures. Its user turn relaunches its chat program (its
    `Harness.resume` runs the program anew on the conversation so far), so the
    conversation part's time per turn is mostly process starts; the tool loop,
    one conversation at a time, times a turn inside one running program
    (_turn_to_turn, as rollkit's conversations one at a time are timed)."""
    single_s, _ = _verifiers_eval("question", samples, 1, concurrency, os.path.join(folder, "single"))
    chat_s, chat = _verifiers_eval("conversation", conversations, turns, concurrency, os.path.join(folder, "chat"))
    _, loops = _verifiers_eval(f"tool loop of {turns} turns,", conversations, turns, 1, os.path.join(folder, "tools"),
                               tools=True)
    in_program = _turn_to_turn([[call.time.start for call in t.calls] for t in loops])
    return {"single_s": single_s, "chat_s": chat_s, "turns": sum(t.num_turns for t in chat), "in_program_turn_s": in_program}


def verifiers_side(args: argparse.Namespace) -> dict:
    import logging

    from verifiers.v1.runtimes.base import Runtime

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from helpers.verifiers_native_eval import prepare_uv_script_here

    # verifiers would install its chat program's packages with uv from the
    # network; this interpreter holds them already.
    Runtime.prepare_uv_script = prepare_uv_script_here
    logging.basicConfig(level=logging.ERROR)
    best = _best_of_rounds(_verifiers_run, args.verifiers_samples, args, "verifiers-bench-")
    return best | {"version": importlib.metadata.version("verifiers")}


# ---- driver ---------------------------------------------------------------------


def _best_of_rounds(run: Callable[[int, int, int, int, str], dict], samples: int, args: argparse.Namespace,
                    prefix: str) -> dict:
    """The best of `args.rounds` runs of the workload (`run(samples,
    conversations, turns, concurrency, folder)`), after a small warm-up run,
    each in a folder of its own under one temporary folder."""
    best: dict = {}
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        run(5, 1, 2, args.concurrency, os.path.join(tmp, "warm"))
        for round_ in range(args.rounds):
            best = _best(best, run(samples, args.conversations, args.turns, args.concurrency, os.path.join(tmp, f"r{round_}")))
    return best


def _best(best: dict, run: dict) -> dict:
    """Each time (a key ending in _s) the shorter of the two."""
    return {key: min(value, best[key]) if best and key.endswith("_s") else value for key, value in run.items()}


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


def _run_side(python: str, side: str, args: argparse.Namespace, env: dict[str, str]) -> dict:
    command = [
        python, __file__, f"--{side}-side", "--samples", str(args.samples), "--conversations",
        str(args.conversations), "--turns", str(args.turns), "--concurrency", str(args.concurrency),
        "--rounds", str(args.rounds), "--verifiers-samples", str(args.verifiers_samples),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    if done.returncode != 0:
        raise SystemExit(f"the {side} side failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_inspect(args: argparse.Namespace) -> dict:
    # No keys or endpoints are needed: mockllm answers in-process.
    return _run_side(_inspect_python(), "inspect", args, {"INSPECT_LOG_LEVEL": "error"})


def _verifiers_python() -> Path:
    default = Path.home() / ".cache" / "rollkit-oracles" / "verifiers" / "bin" / "python"
    return Path(os.environ.get("ROLLKIT_PEERS_VERIFIERS_PYTHON", default))


def _run_verifiers(args: argparse.Namespace) -> dict | None:
    """verifiers' figures, its model being the scripted server on 127.0.0.1
    (its chat program speaks only HTTP); None, said on stderr, without the
    venv. The server's CPU time per request (its connection threads' clocks)
    is the model's share of each turn."""
    python = _verifiers_python()
    if not python.exists():
        print(f"verifiers side skipped: no python at {python} (scripts/test.sh builds that venv with "
              "verifiers 0.4.0; or set ROLLKIT_PEERS_VERIFIERS_PYTHON to one that has it)", file=sys.stderr)
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from helpers.scripted_provider import ScriptedProvider, text

    def reply(messages: list[dict]) -> object:
        # The tool-loop part's tasks ("tool loop of N turns, i"): the tool
        # until N turns are made, then the reply.
        words = text(next(m for m in messages if m["role"] == "user").get("content")).split()
        if words[:3] == ["tool", "loop", "of"] and sum(m["role"] == "tool" for m in messages) < int(words[3]) - 1:
            return {"tool": "peers_go_on", "arguments": {}}
        return REPLY

    with ScriptedProvider(reply) as server:
        # benchmarks/ on the path: verifiers serves the taskset's toolset as
        # `python -m _peers_verifiers`.
        here = str(Path(__file__).resolve().parent)
        run = _run_side(str(python), "verifiers", args, {"ROLLKIT_PEERS_BASE_URL": server.url,
                                                         "ROLLKIT_PEERS_KEY": server.secret, "PYTHONPATH": here})
    return run | {"server_ms_per_call": 1000.0 * server.cpu_s / len(server.requests)}


def _figures(run: dict, samples: int) -> tuple[float, float]:
    """(samples per second, ms of overhead per conversation turn) of one
    tool's best run: wall time per turn, less the scripted server's CPU per
    model call when the tool's model was that server (all of it, as if none
    of it ran beside the tool: the peer's figure is if anything too small)."""
    return samples / run["single_s"], 1000.0 * run["chat_s"] / run["turns"] - run.get("server_ms_per_call", 0.0)


def _report(args: argparse.Namespace, ours: dict, inspect: dict | None, verifiers: dict | None) -> None:
    our_rate, our_turn = _figures(ours, args.samples)
    print(
        f"workload: {args.samples} single-turn samples + {args.conversations} x {args.turns}-turn conversations, "
        f"instant model, concurrency {args.concurrency}, best of {args.rounds}, logs written by all"
    )
    print(f"{'':12}{'samples/s':>12}{'overhead/turn':>16}")
    print(f"{'rollkit':12}{our_rate:>12.1f}{our_turn:>13.3f} ms")
    tools = ", ".join(["rollkit"] + [peer for peer, run in (("inspect-ai", inspect), ("verifiers", verifiers)) if run])
    results = Results("peers.py", f"the same workload in {tools} ({args.samples} single-turn "
                      f"samples, {args.conversations} x {args.turns}-turn conversations, instant model, concurrency "
                      f"{args.concurrency}, best of {args.rounds})")
    ratios = []
    for peer, run, samples in (("inspect-ai", inspect, args.samples), ("verifiers", verifiers, args.verifiers_samples)):
        if not run:
            continue
        rate, turn = _figures(run, samples)
        name = f"{peer} {run['version']}"
        if peer == "verifiers":
            how = (f"null harness, subprocess runtime, {samples} samples; model: a scripted server on 127.0.0.1, "
                   f"{run['server_ms_per_call']:.3f} ms CPU per call, taken off")
        else:
            how = "mockllm in-process"
        print(f"{peer:12}{rate:>12.1f}{turn:>13.3f} ms   ({name}, {how})")
        results.add("single-turn samples, rollkit", our_rate, "samples/s", rate, f"{name}, {samples} samples")
        # The peer's overhead as the row, rollkit's the baseline: the ratio is how many times rollkit's it is.
        results.add(f"overhead per conversation turn, {name}", turn, "ms", our_turn, "rollkit")
        ratios.append(f"ratio to {peer}: rollkit {our_rate / rate:.1f}x the samples/s; {turn / our_turn:.1f}x less "
                      "overhead per turn")
    _report_in_program(args, results, ours, {"inspect-ai": inspect, "verifiers": verifiers})
    for line in ratios:
        print(line)
    results.save(args.json)


def _report_in_program(args: argparse.Namespace, results: Results, ours: dict, peers: dict[str, dict | None]) -> None:
    """A turn inside one running conversation (model call start to the next
    one's, each tool's conversations one at a time): verifiers' user turn
    relaunches its chat program, so its conversation figure is mostly process
    starts; its figure here is a tool-call loop in one chat program, against
    rollkit's and inspect-ai's user turns."""
    ours_inside = 1000.0 * ours["in_program_turn_s"]
    said = [f"rollkit {ours_inside:.3f} ms (user turns)"]
    for peer, run in peers.items():
        if not run:
            continue
        inside = 1000.0 * run["in_program_turn_s"] - run.get("server_ms_per_call", 0.0)
        how = "a tool-call loop in one chat program, server's CPU taken off" if peer == "verifiers" else "user turns"
        said.append(f"{peer} {inside:.3f} ms ({how}): {inside / ours_inside:.1f}x")
        results.add(f"a turn inside one running conversation, {peer} {run['version']} ({how})", inside, "ms",
                    ours_inside, "rollkit, user turns")
    print(f"a turn inside one running conversation, {args.conversations} conversations one at a time (model call to "
          f"model call): " + "; ".join(said))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--conversations", type=int, default=5)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verifiers-samples", type=int, default=30,
                        help="verifiers' single-turn samples (each starts its chat program: seconds of CPU)")
    parser.add_argument("--peers", default="inspect,verifiers", help="which peers to run, comma-separated")
    parser.add_argument("--inspect-side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--verifiers-side", action="store_true", help=argparse.SUPPRESS)
    json_option(parser)
    args = parser.parse_args()
    if args.inspect_side:
        print(json.dumps(inspect_side(args)))
        return
    if args.verifiers_side:
        print(json.dumps(verifiers_side(args)))
        return
    peers = args.peers.split(",")
    ours = rollkit_side(args)
    inspect = _run_inspect(args) if "inspect" in peers else None
    verifiers = _run_verifiers(args) if "verifiers" in peers else None
    _report(args, ours, inspect, verifiers)


if __name__ == "__main__":
    main()
