"""A task set where a rollout can get lost at a known turn: chained arithmetic.

`chain_tasks(n, steps=6)` builds problems like "Start with 17. Add 5, then
multiply by 3, then subtract 4. What is the result?"; the agent works them
one calculator call per step, carrying the running total. The reward is 1
when the final answer is right.

`slippery_calculator_model(slip=0.15)` is the stochastic toy for it: at each
step it slips with probability `slip` (it uses the operand off by one), and
a slip is never noticed, so from that turn on the rollout is lost (its
later steps are right arithmetic on a wrong total, and a wrong total stays
wrong); with
`recover` > 0 a lost rollout redoes the whole chain correctly at a step with
that probability. Its randomness is seeded per rollout and per call
(`seed`, the rollout's stable key `calling_rollout_key` — "task#repeat" in a
run, "task@tK#j" for the j-th continuation forked after turn K — and the
call's index), so every run reproduces exactly, and n continuations of one
fork differ from each other.

Because the chance of success from any point is known in closed form
(`success_chance`), the turn-value curves of rollkit.runs.turnvalues can be
checked against the truth. Nothing here needs a network or a key.
"""

from __future__ import annotations

import hashlib
import random
import re

from ..core.agent import Agent, RolloutLimits
from ..core.messages import Request
from ..core.models import ScriptedModel, calling_rollout_key
from ..core.task import TaskData
from .arithmetic import Arithmetic

__all__ = ["Chain", "ChainData", "chain_tasks", "slippery_calculator_model", "success_chance", "chain_agent"]

_OPS = (("Add", "+"), ("Subtract", "-"), ("Multiply by", "*"))
_STEP = re.compile(r"(add|subtract|multiply by) (\d+)", re.IGNORECASE)


class ChainData(TaskData):
    start: int
    steps: list[tuple[str, int]]
    answer: int


class Chain(Arithmetic):
    """Apply each step to the running total; the calculator is there to help
    (the arithmetic set's calculator, reward and metrics, on chain data)."""

    Data = ChainData


def chain_tasks(n: int = 8, steps: int = 6, seed: int = 0) -> list[Chain]:
    """n chained-arithmetic problems of `steps` steps each (numbers from `seed`)."""
    if n < 1 or steps < 1:
        raise ValueError(f"n and steps must be at least 1, got n={n}, steps={steps}")
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        total = start = rng.randint(2, 20)
        chosen: list[tuple[str, int]] = []
        for _ in range(steps):
            # No multiplying a total of 0: a slip there (0 * (k + 1) == 0)
            # would not be a mistake, and success_chance would be wrong.
            word, op = _OPS[rng.randrange(3)] if 0 < total < 500 else _OPS[rng.randrange(2)]
            operand = rng.randint(2, 9)
            chosen.append((op, operand))
            total = {"+": total + operand, "-": total - operand, "*": total * operand}[op]
        phrases = [f"{dict((o, w) for w, o in _OPS)[op].lower()} {operand}" for op, operand in chosen]
        prompt = f"Start with {start}. " + ", then ".join(phrases).capitalize() + ". What is the result?"
        tasks.append(Chain(
            id=f"chain-{seed}-{i:03d}", prompt=prompt, start=start, steps=chosen, answer=total,
            system_prompt="Work one step at a time with the calculator, then answer 'The answer is N.'",
        ))
    return tasks


def _draw(seed: int, key: str, call: int) -> float:
    digest = hashlib.blake2b(f"{seed}|{key}|{call}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _plan_of(question: str) -> tuple[int, list[tuple[str, int]]]:
    start = int(re.search(r"Start with (\d+)", question).group(1))  # type: ignore[union-attr]
    steps = [({"add": "+", "subtract": "-", "multiply by": "*"}[w.lower()], int(v)) for w, v in _STEP.findall(question)]
    return start, steps


def slippery_calculator_model(slip: float = 0.15, recover: float = 0.0, seed: int = 0) -> ScriptedModel:
    """The stochastic toy for `chain_tasks` (see the module docstring): each
    step slips with probability `slip`; a lost rollout recovers at a step with
    probability `recover`. Reproducible per (seed, rollout key, call)."""
    for name, value in (("slip", slip), ("recover", recover)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} is a probability from 0 to 1, got {value!r}")

    def reply(request: Request):  # type: ignore[no-untyped-def]
        question = next((m.content for m in request.messages if m.role == "user"), "") or ""
        start, steps = _plan_of(question)
        results = [m.content for m in request.messages if m.role == "tool"]
        done = len(results)
        call = sum(1 for m in request.messages if m.role == "assistant")
        key = calling_rollout_key.get() or "unnamed"
        if done >= len(steps):
            return f"The answer is {results[-1]}."
        total = int(results[-1]) if results else start
        right = _right_so_far(start, steps, done, total)
        if not right and recover and _draw(seed, key + "/recover", call) < recover:
            total, right = _true_total(start, steps, done), True  # it redoes the chain and finds its mistake
        op, operand = steps[done]
        # A lost rollout slips no more: a second slip could cancel the first
        # and make "lost" a state one can leave by luck, which the known
        # success chance (success_chance) does not allow for.
        if right and _draw(seed, key, call) < slip:
            operand += 1  # the slip: it misreads the operand
        return ScriptedModel.call("calculator", expression=f"{total} {op} {operand}")

    return ScriptedModel(reply, name="toy-slippery")


def _true_total(start: int, steps: list[tuple[str, int]], done: int) -> int:
    total = start
    for op, operand in steps[:done]:
        total = {"+": total + operand, "-": total - operand, "*": total * operand}[op]
    return total


def _right_so_far(start: int, steps: list[tuple[str, int]], done: int, total: int) -> bool:
    return _true_total(start, steps, done) == total


def success_chance(remaining: int, lost: bool, slip: float, recover: float = 0.0) -> float:
    """The true chance that a chain rollout ends right, given how many steps
    (calculator calls) are still to make and whether its running total is
    already wrong: a two-state chain, a right total slipping with `slip`
    per step, a wrong one recovering with `recover` (and then slipping or
    not on that same step)."""
    right = 0.0 if lost else 1.0
    for _ in range(remaining):
        back = (1.0 - right) * recover
        right = (right + back) * (1.0 - slip)
    return right


def chain_agent(slip: float = 0.15, recover: float = 0.0, seed: int = 0, steps: int = 6) -> Agent:
    """The slippery toy with the chat loop, turns enough for `steps` steps and the answer."""
    return Agent(model=slippery_calculator_model(slip, recover, seed), limits=RolloutLimits(max_turns=steps + 2))
