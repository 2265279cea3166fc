"""Trace files of other tools, made here so the notebooks can load them.

`inspect_log(folder)` runs a small arithmetic eval with inspect-ai itself
(four samples, its `mockllm` model answering through an `add` tool, two
epochs; the last sample's target is off by one, so it scores 0) and returns
the `.eval` (or `.json`) log inspect wrote; it needs the `rollkit[inspect]` extra.
`verifiers_run(folder)` writes a `results.jsonl` and `metadata.json` the
way verifiers' evaluation writes them (verifiers is not a dependency: the
records follow its `state_to_output`), from a deterministic toy that gets
every third problem wrong. Both are small and offline. This module only
writes files; reading them is `rk.load`'s (rollkit.interop.formats).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from ..core.dependencies import (
    inspect_ai,
    inspect_ai_dataset,
    inspect_ai_model,
    inspect_ai_scorer,
    inspect_ai_solver,
    inspect_ai_tool,
)

__all__ = ["inspect_log", "verifiers_run"]

_PROBLEMS = [(2, 3), (4, 4), (10, 7), (6, 9), (12, 30), (8, 8)]


def _inspect_eval(folder: Path, log_format: str) -> Path:
    @inspect_ai_tool.tool
    def add() -> Any:
        async def execute(a: int, b: int) -> int:
            """Add two numbers.

            Args:
                a: the first number
                b: the second number
            """
            return a + b

        return execute

    def outputs(messages: Any, tools: Any, tool_choice: Any, config: Any) -> Any:
        last = messages[-1]
        if last.role == "tool":
            out = inspect_ai_model.ModelOutput.from_content(model="mockllm", content=f"The answer is {last.text}.")
        else:
            a, b = [int(word) for word in last.text.split() if word.isdigit()]
            out = inspect_ai_model.ModelOutput.for_tool_call(model="mockllm", tool_name="add", tool_arguments={"a": a, "b": b})
        # Usage given, so mockllm counts no tokens (it would fetch a tokenizer).
        out.usage = inspect_ai_model.ModelUsage(input_tokens=12 * len(messages), output_tokens=6, total_tokens=12 * len(messages) + 6)
        return out

    samples = [inspect_ai_dataset.Sample(input=f"Add {a} and {b}", target=str(a + b + (i == 3)), id=f"add-{i}")
               for i, (a, b) in enumerate(_PROBLEMS[:4])]
    task = inspect_ai.Task(dataset=samples, solver=[inspect_ai_solver.use_tools(add()), inspect_ai_solver.generate()], scorer=inspect_ai_scorer.includes(), name="adding")
    [log] = inspect_ai.eval(task, model=inspect_ai_model.get_model("mockllm/model", custom_outputs=outputs), log_dir=str(folder),
                         log_format=log_format, display="none", epochs=2)
    if log.status != "success":
        raise RuntimeError(f"the inspect eval ended {log.status}: {log.error}")
    return Path(log.location)


def inspect_log(folder: str | os.PathLike[str], log_format: str = "eval") -> Path:
    """Run the small inspect-ai eval into `folder`; the path of its log
    (`log_format` "eval" or "json")."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # In a thread: there is no event loop there, so inspect does not patch
    # the notebook's asyncio with nest-asyncio.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollkit-inspect-eval") as pool:
        return pool.submit(_inspect_eval, folder, log_format).result()


def verifiers_run(folder: str | os.PathLike[str]) -> Path:
    """Write a verifiers results.jsonl (2 rollouts of 6 problems) into
    `folder`; its path."""
    run = Path(folder) / "arith--toy-verifier" / "run-1"
    run.mkdir(parents=True, exist_ok=True)
    (run / "metadata.json").write_text(json.dumps({"env_id": "arith", "model": "toy-verifier", "num_examples": 6,
                                                   "rollouts_per_example": 2}))
    lines = []
    for repeat in range(2):
        for i, (a, b) in enumerate(_PROBLEMS):
            answer = a + b + (1 if (i + repeat) % 3 == 2 else 0)  # every third answer is off by one
            correct = float(answer == a + b)
            start = 1_750_000_000.0 + 10 * (repeat * len(_PROBLEMS) + i)
            lines.append({
                "example_id": i, "task": "arith", "answer": str(a + b),
                "prompt": [{"role": "system", "content": "Answer with the number only."},
                           {"role": "user", "content": f"What is {a} + {b}?"}],
                "completion": [{"role": "assistant", "content": str(answer)}],
                "reward": correct, "metrics": {"correct": correct}, "correct": correct, "error": None,
                "timing": {"start_time": start, "generation_ms": 400.0 + 50 * i, "scoring_ms": 5.0,
                           "total_ms": 405.0 + 50 * i},
                "is_completed": True, "is_truncated": False, "stop_condition": None,
                "token_usage": {"input_tokens": 20.0 + i, "output_tokens": 2.0},
            })
    path = run / "results.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
