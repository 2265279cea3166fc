"""What a widget may ask of a rollout: the `RolloutView` protocol.

The panel (rollkit.notebook.panel) and the agent's seat
(rollkit.notebook.seat) draw one rollout and forward what the person does.
They type against this protocol, which the facade
(`rollkit.notebook.stepping.NotebookRollout`) implements, and never reach
into the core rollout behind it: every question about the lifecycle (can a
step run now, is a limit used up, which tools are there) is answered by the
facade in one place. So the facade may build the panel, and the widgets need
not import the facade: the notebook package reads bottom-up, with no circle
(tests/test_layers.py).

This module holds types only; it must not import the widgets or the facade,
and nothing of the core at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..core.trace import Trace

__all__ = ["RolloutView", "Status"]


@dataclass(frozen=True)
class Status:
    """Where a rollout stands. `kind` is one of: new, opening, running,
    asked (a HumanModel waits for the person's answer), waiting, stopped,
    ended, closing, closed, failed, aborted."""

    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


class RolloutView(Protocol):
    """One rollout as the widgets see it: state to draw, intents to forward."""

    # ---- what to draw --------------------------------------------------------
    @property
    def id(self) -> str: ...
    @property
    def task_name(self) -> str: ...
    @property
    def agent_name(self) -> str: ...
    @property
    def trace(self) -> Trace: ...
    @property
    def status(self) -> Status: ...
    @property
    def agent_time(self) -> float: ...
    @property
    def current_phase(self) -> str | None: ...
    @property
    def forecast(self) -> str: ...
    @property
    def tools(self) -> dict[str, Any]: ...
    @property
    def asked(self) -> Any: ...
    @property
    def last_error(self) -> BaseException | None: ...

    # ---- what can be done now --------------------------------------------------
    @property
    def is_open(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def busy(self) -> bool: ...
    @property
    def needs_message(self) -> bool: ...
    @property
    def can_step(self) -> bool: ...
    @property
    def can_close(self) -> bool: ...
    @property
    def can_abort(self) -> bool: ...
    @property
    def can_fork(self) -> bool: ...
    @property
    def no_turn_left(self) -> str | None: ...

    # ---- intents (each returns at once) ------------------------------------------
    def step_soon(self, message: Any = None) -> Any: ...
    def close_soon(self) -> Any: ...
    def abort_soon(self) -> Any: ...
    def fork_soon(self, turn: int) -> Any: ...
    def answer(self, reply: Any) -> None: ...
    def call(self, tool: str, **arguments: Any) -> None: ...
    def panel(self, *, chart: bool = True, seat: str = "user") -> Any: ...

    # ---- hearing of changes -------------------------------------------------------
    def watch(self, callback: Callable[[], Any]) -> Callable[[], None]: ...
    def subscribe(self, subscriber: Callable[..., Any]) -> Callable[[], None]: ...
