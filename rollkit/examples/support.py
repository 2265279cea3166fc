"""A multi-turn example task set whose reward needs the user: order status.

A customer asks where their order is; only the customer knows the order
number, so the agent must ask for it, look it up with the `lookup_order`
tool and tell the status. The reward is 1 when the agent told the customer
the status of *their* order.

Everything is deterministic and offline:

- `support_tasks(n)`: n orders (shipped, delivered, delayed, ...). On every
  third task the customer is chatty and names another number first ("I
  ordered 2 things, the number is 4711").
- `toy_support_model(careful=False)`: the toy shop assistant. It takes the
  first number the customer says, so it looks up the wrong order on the
  chatty tasks (reward 0); `careful=True` takes the last number and gets
  them right. Its replies differ from the careless one only there, which is
  where a `RecordedUser` replay flags the divergence.
- `toy_customer()`: the customer as a `ScriptedUser` (reads the order from
  the task data); `toy_customer_model()` and `customer_persona(data)`: the
  same customer as a model, for `rk.AgentUser`.
- `support_agent(careful=False)`: the toy assistant with the chat loop.

A conversation: the agent asks for the number, the customer gives it, the
agent looks it up and tells the status, the customer says thanks, the agent
says goodbye, the customer is done: 4 agent turns, 2 user turns.
"""

from __future__ import annotations

import random
import re
from typing import Any

from ..core.agent import Agent, RolloutLimits
from ..core.hooks import metric, reward
from ..core.messages import Request
from ..core.models import ScriptedModel
from ..core.task import Task, TaskData
from ..core.tools import tool
from ..core.trace import Trace
from ..core.users import ScriptedUser

__all__ = [
    "OrderData", "OrderStatus", "support_tasks", "toy_support_model", "toy_customer", "toy_customer_model",
    "customer_persona", "support_agent",
]

_STATUSES = ("shipped", "delivered", "delayed", "packed", "returned")
_ASK = "Could you tell me your order number?"
_MORE = "Anything else I can help with?"
_BYE = "You're welcome, goodbye!"


class OrderData(TaskData):
    order: str
    status: str
    chatty: bool = False


class OrderStatus(Task):
    """Tell the customer the status of their order; they hold its number."""

    Data = OrderData

    @tool
    def lookup_order(self, number: str) -> str:
        """The status of the order with this number."""
        if number.strip() == self.data.order:
            return self.data.status
        return f"no order with number {number.strip()}"

    @reward(weight=1.0)
    def told_status(self, trace: Trace) -> float:
        """1 when the agent told the status of the customer's own order."""
        wanted = f"order {self.data.order}: {self.data.status}"
        return float(any(m.role == "assistant" and wanted in (m.content or "").lower() for m in trace.messages))

    @metric
    def asked_for_number(self, trace: Trace) -> float:
        return float(any(m.role == "assistant" and _ASK in (m.content or "") for m in trace.messages))

    @metric
    def user_turns(self, trace: Trace) -> float:
        return float(len(trace.user_turns))


def support_tasks(n: int = 12, seed: int = 0) -> list[OrderStatus]:
    """n order-status tasks; every third customer is chatty."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = random.Random(seed)
    return [
        OrderStatus(
            id=f"order-{seed}-{i:03d}",
            prompt="Hi, I would like to know where my order is.",
            system_prompt=(
                "You are a shop assistant. Ask the customer for their order number, look it up with "
                "the lookup_order tool, and tell them its status as 'Order N: STATUS.'"
            ),
            order=str(rng.randint(1000, 9999)),
            status=_STATUSES[i % len(_STATUSES)],
            chatty=i % 3 == 2,
        )
        for i in range(n)
    ]


def _assistant_reply(request: Request, careful: bool) -> Any:
    last = request.messages[-1]
    if last.role == "tool":
        called = next(m for m in reversed(request.messages) if m.role == "assistant" and m.tool_calls)
        number = called.tool_calls[0].args()["number"]
        return f"Order {number}: {last.content}. {_MORE}"
    said = last.content if last.role == "user" else ""
    numbers = re.findall(r"\d+", said)
    if numbers:
        return ScriptedModel.call("lookup_order", number=numbers[-1] if careful else numbers[0])
    if re.search(r"\b(thanks|thank you|bye|that's all)\b", said, re.IGNORECASE):
        return _BYE
    return _ASK


def toy_support_model(careful: bool = False) -> ScriptedModel:
    """The toy assistant: asks, looks up the first number it hears (the last
    with careful=True), tells the status, says goodbye."""
    return ScriptedModel(lambda request: _assistant_reply(request, careful),
                         name="toy-support-careful" if careful else "toy-support")


def _customer_says(agent_said: str, order: str, chatty: bool) -> str | None:
    if _ASK in agent_said or "order number" in agent_said.lower():
        return f"I ordered 2 things, the number is {order}." if chatty else f"It's {order}."
    if _MORE in agent_said:
        return "No, that's all, thanks!"
    return None  # a goodbye, or something the toy customer cannot answer: done


def toy_customer() -> ScriptedUser:
    """The customer as a ScriptedUser: knows the order number from the task
    data, answers the assistant's questions, and is done after the goodbye."""

    def speak(trace: Trace) -> str | None:
        data = trace.task.data
        return _customer_says(trace.last_reply, data["order"], data.get("chatty", False))

    return ScriptedUser(speak, name="toy-customer")


def customer_persona(data: OrderData) -> str:
    """The AgentUser persona of a task's customer (what toy_customer_model reads)."""
    chatty = " You like to mention that you ordered 2 things." if data.chatty else ""
    return f"You are a customer waiting for order number {data.order}.{chatty}"


def _customer_model_reply(request: Request) -> str:
    persona = request.messages[0].content if request.messages and request.messages[0].role == "system" else ""
    order = re.search(r"order number (\d+)", persona or "")
    said = request.messages[-1].content or ""
    answer = _customer_says(said, order.group(1) if order else "?", "ordered 2 things" in (persona or ""))
    return answer if answer is not None else "<<done>>"


def toy_customer_model() -> ScriptedModel:
    """The customer as a model, for rk.AgentUser(agent, persona=customer_persona)."""
    return ScriptedModel(_customer_model_reply, name="toy-customer-model")


def support_agent(careful: bool = False, **overrides: Any) -> Agent:
    """The toy assistant with the chat loop, at most 10 turns and 5 user turns."""
    options: dict[str, Any] = {
        "model": toy_support_model(careful),
        "limits": RolloutLimits(max_turns=10, max_user_turns=5),
    }
    options.update(overrides)
    return Agent(**options)
