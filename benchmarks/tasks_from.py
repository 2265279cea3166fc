"""rk.tasks_from: what building tasks from another framework costs, and what
scoring through the framework's own scorer adds per rollout.

Prints:
- `rk.tasks_from("reasoning_gym:chain_sum", size=10_000)` against
  reasoning-gym generating the same 10,000 entries itself (`dataset[i]`), in
  the same process, import excluded;
- `rk.tasks_from(task)` of an inspect task of 10,000 samples (system_message,
  prompt_template, generate; match and includes) against building that
  inspect Task itself;
- scoring per rollout: the scoring phase of rk.evaluate's traces (the
  rollkit hook, the solver replayed on the conversation, the scorers) against
  the framework's own scoring of the same replies called directly
  (`extract_answer` + `score_answer`; inspect's scorers `await scorer(state,
  target)` on a TaskState), median microseconds.

Run: python benchmarks/tasks_from.py [--n 10000] [--rollouts 300] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import rollkit as rk
from _common import Results, json_option


def _best(fn, repeats: int = 3) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def reasoning_gym_build(n: int, results: Results) -> None:
    import reasoning_gym

    def native():
        dataset = reasoning_gym.create_dataset("chain_sum", size=n, seed=1)
        return [dataset[i] for i in range(n)]

    native_s, _ = _best(native)
    ours_s, tasks = _best(lambda: rk.tasks_from("reasoning_gym:chain_sum", size=n, seed=1))
    assert len(tasks) == n
    print(f"reasoning-gym chain_sum, {n:,} items: rk.tasks_from {ours_s:.2f} s; reasoning-gym generating them "
          f"{native_s:.2f} s; ratio {ours_s / native_s:.2f}x ({(ours_s - native_s) / n * 1e6:.1f} us per task added)")
    results.add(f"rk.tasks_from reasoning_gym:chain_sum, {n:,} items (best of 3)", ours_s, "s", native_s,
                "reasoning-gym generating them")


def _inspect_task(n: int):
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes, match
    from inspect_ai.solver import generate, prompt_template, system_message

    return Task(name="sums", dataset=[Sample(input=f"What is {i} + 1?", target=str(i + 1)) for i in range(n)],
                solver=[system_message("Reply with the number only."), prompt_template("Question: {prompt}"),
                        generate()], scorer=[match(), includes()])


def inspect_build(n: int, results: Results) -> None:
    from rollkit.interop.tasks.inspect_tasks import shape

    native_s, task = _best(lambda: _inspect_task(n))
    ours_s, tasks = _best(lambda: rk.tasks_from(task))
    assert len(tasks) == n

    async def solvers() -> None:
        for index, sample in enumerate(task.dataset):
            await shape(task, sample, index + 1)

    solver_s, _ = _best(lambda: asyncio.run(solvers()))
    print(f"inspect task, {n:,} samples: rk.tasks_from {ours_s:.2f} s ({ours_s / n * 1e6:.0f} us per sample), of "
          f"which inspect's TaskState and solver up to its generate {solver_s:.2f} s ({solver_s / ours_s:.0%}); "
          f"building the inspect Task itself {native_s:.2f} s")
    results.add(f"rk.tasks_from an inspect task of {n:,} samples (best of 3)", ours_s, "s", native_s,
                "building the inspect Task itself")


def _scoring_us(traces) -> list[float]:
    return [(t.phases["scoring"].end - t.phases["scoring"].start) * 1e6 for t in traces]


def reasoning_gym_scoring(rollouts: int, results: Results) -> None:
    from reasoning_gym.utils import extract_answer

    tasks = rk.tasks_from("reasoning_gym:chain_sum", size=rollouts, seed=2)
    agent = rk.Agent(rk.ScriptedModel(lambda r: "Adding up: <answer>7</answer>"))
    traces = rk.evaluate(agent, tasks, progress=False).traces
    ours = statistics.median(_scoring_us(traces))
    native = []
    for task in tasks:
        t0 = time.perf_counter()
        task.dataset.score_answer(extract_answer("Adding up: <answer>7</answer>"), task.entry)
        native.append((time.perf_counter() - t0) * 1e6)
    print(f"reasoning-gym scoring per rollout, median of {rollouts}: rollkit's scoring phase {ours:.0f} us; "
          f"extract_answer + score_answer called directly {statistics.median(native):.0f} us")
    results.add(f"reasoning-gym scoring phase per rollout (median of {rollouts})", ours, "µs",
                statistics.median(native), "extract_answer + score_answer called directly")


def inspect_scoring(rollouts: int, results: Results) -> None:
    from inspect_ai.model import ChatMessageAssistant, ModelOutput
    from inspect_ai.scorer import Target
    from rollkit.interop.tasks.inspect_tasks import shape

    task = _inspect_task(rollouts)
    tasks = rk.tasks_from(task)
    agent = rk.Agent(rk.ScriptedModel(lambda r: "It is 7"))
    traces = rk.evaluate(agent, tasks, progress=False).traces
    ours = statistics.median(_scoring_us(traces))

    async def native() -> list[float]:
        out = []
        for t in tasks:
            state = await shape(task, t.sample, t.data.sample_id)
            state.messages.append(ChatMessageAssistant(content="It is 7"))
            state.output = ModelOutput.from_content("rollkit/scripted", "It is 7")
            t0 = time.perf_counter()
            for scorer in task.scorer:
                await scorer(state, Target(t.sample.target))
            out.append((time.perf_counter() - t0) * 1e6)
        return out

    direct = statistics.median(asyncio.run(native()))
    print(f"inspect scoring per rollout (match + includes), median of {rollouts}: rollkit's scoring phase "
          f"{ours:.0f} us (solver replayed on the conversation, then the scorers); the two scorers called "
          f"directly on a TaskState {direct:.0f} us")
    results.add(f"inspect scoring phase per rollout, match + includes (median of {rollouts})", ours, "µs", direct,
                "the two scorers called directly")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rollouts", type=int, default=300)
    json_option(parser)
    args = parser.parse_args()
    results = Results("tasks_from.py", "building tasks from another framework, and scoring through its own scorer")
    import inspect_ai  # noqa: F401 - imports are not what is measured
    import reasoning_gym  # noqa: F401

    reasoning_gym_build(args.n, results)
    inspect_build(args.n, results)
    reasoning_gym_scoring(args.rollouts, results)
    inspect_scoring(args.rollouts, results)
    results.save(args.json)


if __name__ == "__main__":
    main()
