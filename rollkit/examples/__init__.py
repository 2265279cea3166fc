"""Examples: ready task sets and toy models, so everything runs offline.

What this package owns: the arithmetic task set (word problems with a
calculator tool) and its deterministic toy model, which gets subtraction
wrong on purpose so rewards vary (`arithmetic`), and the agent the README's
main job runs (`demo_agent`); the order-status task set, multi-turn, whose
reward needs the user (the customer holds the order number), with a toy
assistant, a toy customer as a scripted user and as a model (`support`);
an answer-in-a-file task set for agent programs that work in a folder, with
a toy model that drives any program's shell tool (`workspace`); other
tools' trace files made offline for the notebooks, an inspect-ai log and a
verifiers run (`peers`); a chained-arithmetic set whose stochastic toy
slips at a known rate, so per-turn success curves have something to find
(`chain`).

It sits on top: it may import every layer, and no layer imports it.
Importing it registers the model names "toy-calculator", "toy-careful",
"toy-support", "toy-slippery" and "toy-shell"
and plugs in the task set of `rollkit demo` (see `rollkit.core.plugins`).
"""

from __future__ import annotations

from typing import Any

from ..core.models import register_model
from ..core.plugins import plug
from .arithmetic import (
    Arithmetic, ArithmeticData, arithmetic_tasks, careful_calculator_model, demo_agent, toy_calculator_model,
)
from .chain import Chain, ChainData, chain_agent, chain_tasks, slippery_calculator_model, success_chance
from .workspace import AnswerFile, AnswerFileData, answer_file_tasks, toy_shell_model
from .bigrun import big_run, cached_big_run
from .support import (
    OrderData, OrderStatus, customer_persona, support_agent, support_tasks, toy_customer, toy_customer_model,
    toy_support_model,
)

__all__ = [
    "Arithmetic", "ArithmeticData", "arithmetic_tasks", "demo_agent", "toy_calculator_model", "careful_calculator_model",
    "OrderData", "OrderStatus", "customer_persona", "support_agent", "support_tasks", "toy_customer",
    "toy_customer_model", "toy_support_model",
    "AnswerFile", "AnswerFileData", "answer_file_tasks", "toy_shell_model",
    "Chain", "ChainData", "chain_tasks", "chain_agent", "slippery_calculator_model", "success_chance",
    "big_run", "cached_big_run",
]


def _demo(n_tasks: int) -> tuple[Any, list[Any]]:
    return demo_agent(), arithmetic_tasks(n_tasks)


register_model("toy-calculator", lambda name: toy_calculator_model(),
               help="the example set's toy, right on add and mul, wrong on sub")
register_model("toy-careful", lambda name: careful_calculator_model(),
               help="the example set's toy without its flaw: right on add, sub and mul")
register_model("toy-slippery", lambda name: slippery_calculator_model(),
               help="the chain set's stochastic toy: slips at each step with probability 0.15, seeded per rollout")
register_model("toy-shell", lambda name: toy_shell_model(),
               help="the embedded model for shell-using agent programs (rollkit.examples.workspace)")
register_model("toy-support", lambda name: toy_support_model(),
               help="the order-status toy assistant (rollkit.examples.support)")
plug("demo", _demo)
