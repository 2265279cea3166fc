"""A ready example task set: arithmetic word problems with a calculator tool.

`arithmetic_tasks(n)` builds n deterministic problems; `toy_calculator_model()`
is a toy built on `ScriptedModel` that reads the problem, calls the calculator
and answers. It is wrong on purpose on some tasks, deterministically: it
reads "gives away" as adding, so subtraction problems fail and rewards vary
across tasks (plots show something). Nothing here needs a network or a key.
"""

from __future__ import annotations

import ast
import operator
import random
import re

from ..core.agent import Agent, RolloutLimits
from ..core.hooks import metric, reward
from ..core.messages import Request
from ..core.models import ScriptedModel
from ..core.task import Task, TaskData
from ..core.tools import tool
from ..core.trace import Trace

__all__ = ["Arithmetic", "ArithmeticData", "arithmetic_tasks", "toy_calculator_model", "careful_calculator_model",
           "demo_agent"]

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("only numbers and + - * / are allowed")


class ArithmeticData(TaskData):
    answer: int
    operation: str


class Arithmetic(Task):
    """Solve a word problem; the calculator is there to help."""

    Data = ArithmeticData

    @tool
    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression with + - * / and parentheses."""
        value = _evaluate(ast.parse(expression, mode="eval"))
        return str(int(value)) if float(value).is_integer() else str(value)

    @reward(weight=1.0)
    def correct(self, trace: Trace) -> float:
        """1 when the last number in the final reply is the answer."""
        numbers = re.findall(r"-?\d+(?:\.\d+)?", trace.last_reply)
        return float(bool(numbers) and float(numbers[-1]) == self.data.answer)

    @metric
    def used_calculator(self, trace: Trace) -> float:
        return float(any(m.role == "tool" and m.name == "calculator" for m in trace.messages))

    @metric
    def reply_words(self, trace: Trace) -> float:
        return float(len(trace.last_reply.split()))


_TEMPLATES = {
    "add": ("{name} has {a} apples and buys {b} more. How many apples does {name} have now?", "+"),
    "sub": ("{name} has {a} marbles and gives away {b}. How many marbles are left?", "-"),
    "mul": ("{name} packs {a} boxes with {b} pens each. How many pens is that?", "*"),
}
_NAMES = ["Ann", "Bo", "Chen", "Dara", "Eli", "Fatma", "Gus", "Hana"]


def arithmetic_tasks(n: int = 12, seed: int = 0) -> list[Arithmetic]:
    """n word problems cycling through add, sub and mul, numbers from `seed`."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = random.Random(seed)
    tasks = []
    kinds = list(_TEMPLATES)
    for i in range(n):
        kind = kinds[i % len(kinds)]
        a, b = rng.randint(10, 60), rng.randint(2, 9)
        template, op = _TEMPLATES[kind]
        answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        prompt = template.format(name=_NAMES[i % len(_NAMES)], a=a, b=b)
        tasks.append(
            Arithmetic(
                id=f"arith-{seed}-{i:03d}",
                prompt=prompt,
                system_prompt="Solve the problem. Use the calculator tool, then answer 'The answer is N.'",
                answer=answer,
                operation=kind,
            )
        )
    return tasks


def _toy_reply(request: Request, careful: bool = False):  # type: ignore[no-untyped-def]
    last = request.messages[-1]
    if last.role == "tool":
        return f"The answer is {last.content}."
    question = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    numbers = re.findall(r"\d+", question)
    if len(numbers) < 2:
        return "I need two numbers to work with."
    a, b = numbers[0], numbers[1]
    # The toy's deliberate flaw: it treats "gives away" as adding (the careful one does not).
    op = "*" if "each" in question else "-" if careful and "gives away" in question else "+"
    return ScriptedModel.call("calculator", expression=f"{a} {op} {b}")


def toy_calculator_model() -> ScriptedModel:
    """The deterministic toy for the example set: right on add and mul, wrong on sub."""
    return ScriptedModel(_toy_reply, name="toy-calculator")


def careful_calculator_model() -> ScriptedModel:
    """The same toy without its flaw: right on add, sub and mul (a second
    model to compare the first against, rk.compare)."""
    return ScriptedModel(lambda request: _toy_reply(request, careful=True), name="toy-careful")


def demo_agent(**overrides) -> Agent:  # type: ignore[no-untyped-def]
    """The agent the README's main job runs: the toy model with the chat loop."""
    options = {"model": toy_calculator_model(), "limits": RolloutLimits(max_turns=6)}
    options.update(overrides)
    return Agent(**options)
