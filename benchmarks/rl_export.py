"""Benchmark: the "rl" export (issue 35, item 2) and what token ids cost a trace file.

Runs N rollouts of T turns on a ScriptedModel whose replies carry token ids
and logprobs of K tokens (what `OpenAIModel(logprobs=True, token_ids=True)`
records from vLLM; the prompt's ids grow with the conversation), saves them,
then, each in a fresh process so its peak memory is its own: the export to
Parquet and to JSON lines from the saved run (time, peak memory, size).
Also the trace file's size with and without the tokens.

Run: PYTHONPATH=. python benchmarks/rl_export.py [--n 2000] [--turns 4] [--k 256] [--json PATH]
Prints one line per number.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from _common import Results, in_fresh_python, json_option


def _replies(turns: int, k: int, with_tokens: bool):
    """Replies of k tokens; a prompt's ids are its messages' ids in order, a
    reply's being those it was sampled as (as a chat template makes them:
    each turn's prompt extends the last prompt and reply)."""
    import rollkit as rk

    def reply_ids(turn: int) -> list[int]:
        return [(turn * 7 + i) % 32000 for i in range(k)]

    def reply(request):
        turn, prompt = 0, []
        for message in request.messages:
            if message.role == "assistant":
                prompt += reply_ids(turn)
                turn += 1
            else:
                prompt += [hash(w) % 32000 for w in (message.content or "").split()] * 16
        tokens = rk.TokenLogprobs(prompt_ids=prompt, ids=reply_ids(turn), text=["tok"] * k,
                                  logprobs=[-0.01 * (i % 50) for i in range(k)])
        return rk.Response(message=rk.AssistantMessage(content=" ".join(["tok"] * k)),
                           tokens=tokens if with_tokens else None,
                           usage=rk.Usage(input_tokens=len(prompt), output_tokens=k))
    return rk.ScriptedModel(reply)


async def _write(folder: Path, n: int, turns: int, k: int, with_tokens: bool) -> Path:
    import rollkit as rk

    agent = rk.Agent(model=_replies(turns, k, with_tokens))
    traces = []
    for i in range(n):
        users = rk.ScriptedUser([f"go on {j}" for j in range(turns - 1)])
        traces.append(await agent.run(rk.Task(prompt=f"task {i} please"), user=users))
    return rk.save(traces, folder / ("with.jsonl" if with_tokens else "without.jsonl"))


# The first export opens the run (rk.export reads a path through the
# columnar store, whose first open builds its tables); the second finds them.
_CHILD = """
import json, resource, sys, time
import rollkit as rk
times = []
for _ in range(2):
    start = time.perf_counter()
    rk.export(sys.argv[1], sys.argv[2], format="rl")
    times.append(time.perf_counter() - start)
print(json.dumps({"first": times[0], "seconds": times[1],
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--k", type=int, default=256)
    json_option(parser)
    args = parser.parse_args()
    results = Results("rl_export.py", f"the rl export of {args.n:,} rollouts x {args.turns} turns with token ids "
                      f"({args.k} completion tokens per turn), each export in a fresh process")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with_tokens = asyncio.run(_write(folder, args.n, args.turns, args.k, True))
        without = asyncio.run(_write(folder, args.n, args.turns, args.k, False))
        rows = args.n * args.turns
        print(f"rollouts {args.n}, turns {rows}, completion tokens per turn {args.k}")
        print(f"trace file with tokens: {with_tokens.stat().st_size / 1e6:.1f} MB; "
              f"without: {without.stat().st_size / 1e6:.1f} MB")
        results.add("trace file with token ids", with_tokens.stat().st_size / 1e6, "MB",
                    without.stat().st_size / 1e6, "without them")
        for suffix in ("parquet", "jsonl"):
            out = folder / f"rl.{suffix}"
            numbers = in_fresh_python(_CHILD, str(with_tokens), str(out))
            print(f"export rl .{suffix}: {numbers['seconds']:.2f} s ({rows / numbers['seconds']:.0f} turns/s; "
                  f"{numbers['first']:.2f} s with the first open's table build), peak {numbers['peak_mb']:.0f} MB, "
                  f"file {out.stat().st_size / 1e6:.1f} MB")
            results.add(f"export rl .{suffix} (tables built)", numbers["seconds"], "s")
            results.add(f"export rl .{suffix}, first (building the tables)", numbers["first"], "s")
            results.add(f"export rl .{suffix}: peak RSS", numbers["peak_mb"], "MB")
            results.add(f"export rl .{suffix}: file", out.stat().st_size / 1e6, "MB")
    results.save(args.json)


if __name__ == "__main__":
    main()
