"""A big run, made up: the JSON lines of hundreds of thousands of rollouts in seconds.

`big_run(n, folder)` writes a run folder (manifest.json and traces.jsonl)
of `n` rollouts of a template trace, each with its own id, task (one of
`tasks` arithmetic questions), repeat, answer and reward, as if an RL run
had written them: single-turn by default, or `turns` turns each calling a
calculator tool. Running real rollouts that many times would take hours;
the lines are formatted straight from one validated template instead, so
every line is a trace `rk.load` reads. For notebooks, tests and
benchmarks of big runs (notebook 07, benchmarks/bigrun.py).
`cached_big_run` writes one once into the user cache folder and reuses it.

This module only writes files; it runs no rollout.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from ..core.cache_folder import user_cache_folder

__all__ = ["big_run", "cached_big_run"]

_SYSTEM = "Solve the problem. Use the calculator tool, then answer 'The answer is N.'"
# Words the questions draw from, so searches have something to find.
_NAMES = ("Ann", "Bo", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana")
_THINGS = ("apples", "marbles", "stamps", "coins", "shells", "cards", "pens", "books")


def _turns(turns: int, t0: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    """The messages and model calls of `turns` turns (a calculator call
    each, then the answer), and when the last one ended."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": "@@PROMPT@@"},
    ]
    calls = []
    cum_in = cum_out = 0
    now = t0 + 0.01
    for turn in range(turns):
        last = turn == turns - 1
        input_tokens = 30 + 9 * turn
        new_input = input_tokens - (cum_in + cum_out if turn else 0) if turn else input_tokens
        cum_in += max(0, new_input)
        cum_out += 7
        start, end = now, now + 0.2
        now = end + 0.01
        calls.append({
            "index": turn, "segment": 0, "start": start, "end": end,
            "usage": {"input_tokens": input_tokens, "output_tokens": 7}, "new_input_tokens": max(0, new_input),
            "finish_reason": "stop" if last else "tool_calls", "committed": True, "error": None,
            "cum_turns": turn + 1, "cum_input_tokens": cum_in, "cum_output_tokens": cum_out,
            "cum_total_tokens": input_tokens + 7, "cum_agent_time": end - t0, "dialect": None,
        })
        if last:
            messages.append({"role": "assistant", "content": "The answer is @@ANSWER@@.", "tool_calls": []})
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{turn}", "name": "calculator", "arguments": json.dumps({"expression": f"@@EXPR@@ + {turn}"})}]})
            messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": f"@@RESULT{turn}@@",
                             "name": "calculator"})
    return messages, calls, now


def _template(turns: int) -> str:
    """One trace as a format string: validated once as a `Trace`, then its
    varying values replaced by named fields."""
    from ..core.trace import Trace

    t0 = 1_700_000_000.0
    messages, calls, now = _turns(turns, t0)
    trace = {
        "id": "@@ID@@",
        "task": {"type": "Arithmetic", "key": "@@KEY@@", "module": "rollkit.examples.arithmetic",
                 "data": {"prompt": "@@PROMPT@@", "system_prompt": _SYSTEM, "id": "@@KEY@@", "answer": 0,
                          "operation": "add"}},
        "agent": {"name": "toy-calculator", "model": "toy-calculator", "type": "ChatHarness", "harness": "chat"},
        "limits": {"max_turns": max(6, turns), "max_input_tokens": None, "max_output_tokens": None,
                   "max_total_tokens": None},
        "timeouts": {"setup": 120.0, "agent": None, "finalize": 120.0, "scoring": 120.0, "teardown": 30.0},
        "messages": messages,
        "sampled": [i for i, m in enumerate(messages) if m["role"] == "assistant"],
        "model_calls": calls,
        "rewards": {"correct": 0.5}, "reward_weights": {"correct": 1.0},
        "metrics": {"reply_words": 4.0, "used_calculator": 1.0 if turns > 1 else 0.0},
        "info": {"example_id": "@@KEY@@", "repeat": 12345678, "rollout_id": "@@KEY@@#@@REPEAT@@"},
        "stop_condition": None, "ok": True, "completed": True, "aborted": False,
        "phases": {name: {"name": name, "start": t0 + i * 0.001, "end": t0 + i * 0.001 + 0.0005}
                   for i, name in enumerate(("boot", "setup"))}
        | {"agent": {"name": "agent", "start": t0 + 0.01, "end": now},
           "finalize": {"name": "finalize", "start": now, "end": now + 0.001},
           "scoring": {"name": "scoring", "start": now + 0.001, "end": now + 0.002}},
        "segments": [{"index": 0, "start": t0 + 0.01, "end": now, "turns_before": 0, "turns_added": turns,
                      "charged": now - t0 - 0.01}],
    }
    text = Trace.model_validate(trace).model_dump_json()
    text = text.replace("{", "{{").replace("}", "}}")
    text = text.replace('"correct":0.5', '"correct":{reward}').replace('"repeat":12345678', '"repeat":{repeat}')
    for marker, field in (("@@ID@@", "id"), ("@@KEY@@", "key"), ("@@PROMPT@@", "prompt"), ("@@ANSWER@@", "answer"),
                          ("@@EXPR@@", "expr"), ("@@REPEAT@@", "repeat")):
        text = text.replace(marker, "{" + field + "}")
    for turn in range(turns):
        text = text.replace(f"@@RESULT{turn}@@", "{result" + str(turn) + "}")
    return text + "\n"


def big_run(n: int, folder: str | os.PathLike[str], *, turns: int = 1, tasks: int = 1000, seed: int = 0) -> Path:
    """Write a run folder of `n` made-up rollouts (`turns` turns each, over
    `tasks` tasks, repeats numbered per task) and return it. The folder is
    replaced if it holds a run of the same size; writing is a few seconds
    per 100,000 single-turn rollouts."""
    if not isinstance(n, int) or n < 1 or not isinstance(turns, int) or turns < 1:
        raise ValueError(f"big_run needs n >= 1 and turns >= 1 (whole numbers), got n={n!r}, turns={turns!r}")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    template = _template(turns)
    rng = random.Random(seed)
    questions = []
    for k in range(tasks):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        who, what = _NAMES[k % len(_NAMES)], _THINGS[(k // len(_NAMES)) % len(_THINGS)]
        # Each task has its own difficulty: how often the toy gets it right.
        questions.append((f"{who} has {a} {what} and gets {b} more. How many {what} does {who} have now?",
                          a + b, f"{a} + {b}", rng.random()))
    repeats = [0] * tasks
    tmp = out / "traces.jsonl.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        chunk = []
        for i in range(n):
            k = rng.randrange(tasks)
            prompt, answer, expr, skill = questions[k]
            right = rng.random() < skill
            results = {f"result{t}": str(answer + t) for t in range(turns - 1)}
            chunk.append(template.format(
                id=f"{i:012x}", key=f"arith-{k:05d}", prompt=prompt, expr=expr, repeat=repeats[k],
                answer=answer if right else answer + 1 + rng.randrange(9), reward="1.0" if right else "0.0",
                **results))
            repeats[k] += 1
            if len(chunk) >= 10_000:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))
    os.replace(tmp, out / "traces.jsonl")
    manifest = {"rollkit": "big_run", "run_id": f"big-{n}-{turns}-{seed}", "tasks": {"count": tasks}, "repeats": None,
                "group_scorers": []}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def cached_big_run(n: int = 100_000, *, turns: int = 1, seed: int = 0,
                   cache: str | os.PathLike[str] | None = None) -> Path:
    """`big_run(n)` written once into `cache` and reused after (with its
    tables, built on first open): notebooks and test sessions that ask again
    get the same run in no time. `cache` defaults to $ROLLKIT_BIG_RUN_CACHE,
    else `big-run` in rollkit's user cache folder (~/.cache/rollkit): each
    run is a subfolder `<n>-<turns>-<seed>` of it (a big run and its
    tables take hundreds of megabytes). Never the temporary
    folder, which a test session must leave as it found it."""
    root = Path(cache) if cache is not None else _big_run_cache()
    folder = root / f"{n}-{turns}-{seed}"
    manifest = folder / "manifest.json"
    try:
        done = json.loads(manifest.read_text())["run_id"] == f"big-{n}-{turns}-{seed}"
    except (OSError, ValueError, KeyError):
        done = False
    if not done:
        big_run(n, folder, turns=turns, seed=seed)
    return folder


def _big_run_cache() -> Path:
    given = os.environ.get("ROLLKIT_BIG_RUN_CACHE")
    return Path(given) if given else user_cache_folder() / "big-run"
