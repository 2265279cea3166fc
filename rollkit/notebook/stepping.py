"""Stepping a rollout by hand from a notebook: the synchronous facade.

`ro = rk.notebook.open(agent, task)` opens a rollout and hands back a
`NotebookRollout`; then `ro.step()`, `ro.step("user text")`, `ro.close()` and
`ro.abort()` work in a cell, in a plain script and inside a running loop.
Each has an async twin named with `_async` (`await ro.step_async(...)`, as
`rk.evaluate_async`) and a non-blocking one named with `_soon`
(`ro.step_soon(...)`, what the panel's buttons call), so everything the
panel does, code can do without it.

A rollout lives on one event loop, its home: rollkit's own loop thread when
it was opened by `rk.notebook.open` / `ro.open()` (rollkit.notebook.sync_loop),
the awaiting loop when it was opened by `await ro.open_async()`. Every form runs
its work there, whoever calls it: a sync call blocks its thread until that
work ends, an async one awaits it from its own loop, a `*_soon` one returns a
future at once. So a cell never re-enters the kernel's loop.

Views are redrawn on one thread only, the one that built the rollout (the
kernel's): watchers (`ro.watch`) and event subscribers (`ro.subscribe`) are
handed to that thread's loop when the rollout runs on another. A widget
written from two threads at once can lose an update (ipywidgets queues a
change made while the other thread holds the widget's sync, and plotly
sends each edit as a value set and reset at once). The price: while a cell
blocks in `ro.step()` the kernel's loop waits too, so the views catch up
when the cell ends; the panel's buttons never block, so they stay live.

This module turns user mistakes into clear errors before they reach the
core (an empty message, a step on a closed or ended rollout, a step while
one is running) and says in words where the rollout stands (`ro.status`).
The lifecycle itself stays in `rollkit.Rollout`: this facade only forwards
to it and reads its trace.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.errors import RolloutBusy, RolloutEnded, RolloutStateError
from ..core.human import HumanModel, check_reply
from ..core.messages import AssistantMessage, to_messages
from ..core.rollout import RolloutState
from ..core.trace import Trace
from . import sync_loop
from ._view import Status
from .display import chat_html

if TYPE_CHECKING:
    from ..core.agent import Agent
    from ..core.rollout import Rollout
    from ..core.runtime import Runtime
    from ..core.task import Task
    from .panel import RolloutPanel  # the facade builds the panel; the panel knows only the view module

__all__ = ["NotebookRollout", "RolloutEnded", "Status", "StepResult", "open"]


@dataclass
class StepResult:
    """What one step did: the messages it added, the agent's last reply, and
    whether the exchange can go on (`bool(result)`, L15)."""

    more: bool
    messages: list[Any] = field(default_factory=list)
    status: Status | None = None

    @property
    def reply(self) -> str | None:
        for message in reversed(self.messages):
            if isinstance(message, AssistantMessage) and message.content:
                return message.content
        return None

    def __bool__(self) -> bool:
        return self.more

    def __repr__(self) -> str:
        return f"StepResult(more={self.more}, reply={self.reply!r}, status={str(self.status)!r})"

    def _repr_html_(self) -> str:
        status = html.escape(str(self.status)) if self.status else ""
        return f'{chat_html(self.messages)}<p class="rk-status"><i>{status}</i></p>'


class NotebookRollout:
    """A rollout driven from a notebook. Build it with `rk.notebook.open`.

    `rollout` is the core `rk.Rollout`, `trace` its trace. Its resources
    belong to the loop it runs on: for one opened by `rk.notebook.open`,
    rollkit's loop, so await `ro.step_async()` (which runs there), not
    `ro.rollout.step()`. The prompt-less case works: the rollout is built with
    a user, and the first step must carry the user's opening message.
    """

    def __init__(self, agent: Agent, task: Task, runtime: Runtime | None = None, *, rollout: Rollout | None = None) -> None:
        # In a notebook there is always someone to play the user, which is
        # what lets a task without a prompt open (L4).
        self.rollout: Rollout = rollout if rollout is not None else agent.rollout(task, runtime, user=True)
        self.agent = agent
        self.task = task
        self._steps = 0
        self._action: str | None = None  # what is running right now: "open", "step", ...
        self._inflight: Any = None  # the future of the last *_soon action
        # The loop this rollout lives on (set when it opens): its resources
        # are bound to it, so every action runs there.
        self._home: asyncio.AbstractEventLoop | None = None
        self._watchers: list[Callable[[], Any]] = []
        # The loop of the thread that built this (the kernel's), where views redraw.
        self._view: asyncio.AbstractEventLoop | None = sync_loop.running_loop()
        self.last_error: BaseException | None = None
        # The person in the agent's seat: a HumanModel with nobody else to
        # ask is answered here (ro.answer, or the panel's agent seat).
        # Requests wait here in the order the model was asked (parallel calls
        # of a program each wait for their own answer).
        self._asking: list[tuple[Any, asyncio.Future[Any]]] = []
        model = self.rollout.spec.model
        self.seat_is_yours = isinstance(model, HumanModel) and model.ask is None
        if self.seat_is_yours:
            model.attach(self._ask, rollout=self.id)

    # ---- what it is ---------------------------------------------------------
    @property
    def trace(self) -> Trace:
        return self.rollout.trace

    @property
    def id(self) -> str:
        return self.rollout.id

    @property
    def closed(self) -> bool:
        return self.rollout.closed

    @property
    def ok(self) -> bool | None:
        return self.rollout.ok

    @property
    def busy(self) -> bool:
        """An action (open, step, close) is running right now."""
        return self._action is not None

    @property
    def needs_message(self) -> bool:
        """The task has no prompt and the user has not spoken yet: the next
        step must carry the user's opening message."""
        return not self.task.data.prompt and self._steps == 0

    @property
    def can_step(self) -> bool:
        return self.rollout.is_open and not self.busy

    @property
    def can_close(self) -> bool:
        return not self.rollout.closed and not self.busy and self.rollout.state != RolloutState.OPENING

    @property
    def can_abort(self) -> bool:
        return not self.rollout.closed

    @property
    def is_open(self) -> bool:
        """Open and not ended: the exchange can go on (a step may run when not busy)."""
        return self.rollout.is_open

    @property
    def can_fork(self) -> bool:
        """A fork can start now: a turn to fork after, nothing running, no
        failure, and a runtime that can be copied."""
        return (self.trace.num_turns > 0 and not self.busy and not self.trace.errors
                and self.rollout.runtime.forkable)

    @property
    def no_turn_left(self) -> str | None:
        """Which limit leaves the open rollout no next turn, in words, or None.

        The core refuses a model call once a limit is used up (L12): at 6 of
        6 turns the next step is refused, stops the rollout and adds nothing.
        The forecast reads the same state, so the panel turns Send and Step
        off before anyone clicks into a refusal. (A `@stop` on the trace
        cannot be foreseen without running it; that one still ends the step
        that asks.)"""
        if not self.can_step:
            return None
        from ..core.forecast import forecast

        for row in forecast(self.trace, agent_time=self.agent_time):
            if row.reached:
                unit = {"max_turns": " turns", "agent_time": " s"}.get(row.limit, " tokens")
                digits = 2 if row.limit == "agent_time" else 0
                return (f"{row.limit} reached ({row.used:.{digits}f} of {row.value:.{digits}f}{unit} used): "
                        "the next turn would be refused")
        return None

    @property
    def forecast(self) -> str:
        """When each limit will be used up at the pace so far, in words."""
        from ..core.forecast import forecast_text

        return forecast_text(self.trace, agent_time=self.agent_time)

    @property
    def task_name(self) -> str:
        return self.task.name

    @property
    def agent_name(self) -> str:
        return str(self.agent.name)

    @property
    def tools(self) -> dict[str, Any]:
        """The task's tools by name (what the model may call)."""
        return self.rollout.ctx.tools

    @property
    def current_phase(self) -> str | None:
        """The phase running now (None between phases, e.g. while the
        rollout waits for the user)."""
        for name, span in self.trace.phases.items():
            if span.end is None:
                return name
        return None

    @property
    def agent_time(self) -> float:
        """Agent time used so far, including the segment running now."""
        # The rollout's own clock, the one its budget is charged on (L9), so
        # the gauge never disagrees with what the rollout will bill.
        return self.rollout.agent_time

    @property
    def status(self) -> Status:
        trace, state = self.trace, self.rollout.state
        if state == RolloutState.CLOSED:
            if trace.aborted:
                return Status("aborted", "aborted: resources freed, not finalized or scored")
            if trace.errors:
                return Status("failed", _failure(trace))
            reward = _reward_text(trace)
            stop = f", stopped by {trace.stop_condition}" if trace.stop_condition else ""
            return Status("closed", f"closed: ok{stop}, reward {reward}")
        if self._action == "abort":
            return Status("closing", "aborting: cancelling and freeing resources")
        if state == RolloutState.CLOSING or self._action == "close":
            return Status("closing", "closing: finalizing and scoring")
        if state == RolloutState.OPENING or self._action == "open":
            return Status("opening", "opening: booting the runtime and running setup")
        if state == RolloutState.NEW:
            return Status("new", "not opened yet: call ro.open()")
        if trace.errors:
            return Status("failed", _failure(trace) + " (close to end it; a failed run is not scored)")
        if self._action == "step" and self._pending() is not None:
            return Status("asked", f"your turn as the model: answer the request ({_turns(trace.num_turns)} so far)")
        if self._action == "step":
            return Status("running", f"running: the agent is working ({_turns(trace.num_turns)} so far)")
        if state == RolloutState.ENDED:
            if trace.stop_condition:
                return Status("stopped", f"stopped by {trace.stop_condition} after {_turns(trace.num_turns)}: close to score it")
            return Status("ended", "ended: the last step added no turn, so the exchange is over: close to score it")
        if self.needs_message:
            return Status("waiting", "waiting for the user: this task has no prompt, so type the opening message")
        if self._steps == 0:
            return Status("waiting", "open: step to let the agent answer the prompt")
        return Status("waiting", f"waiting for the user after {_turns(trace.num_turns)} (this wait costs no agent time)")

    # ---- watchers (the panel refreshes on these) ---------------------------
    def watch(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Call `callback()` whenever an action starts or ends. Rollout events
        (`ro.subscribe`) say what happens inside an action."""
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    def subscribe(self, subscriber: Callable[..., Any]) -> Callable[[], None]:
        """Receive the rollout's events (see rollkit.core.events), on the
        thread that built this rollout."""
        return self.rollout.subscribe(lambda event: self._to_view(subscriber, event))

    def _to_view(self, callback: Callable[..., Any], *args: Any) -> None:
        view = self._view
        if view is None or view is sync_loop.running_loop():
            callback(*args)
            return
        try:
            view.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # that loop has closed: nobody else will draw
            callback(*args)

    def _notify(self) -> None:
        self._to_view(self._notify_now)

    def _notify_now(self) -> None:
        for callback in tuple(self._watchers):
            try:
                callback()
            except Exception:  # a broken view must not break the rollout
                import logging

                logging.getLogger("rollkit").exception("notebook watcher %r raised", callback)

    # ---- checks: user mistakes become clear errors -------------------------
    def _check_step(self, message: Any) -> None:
        if self.busy:
            raise RolloutBusy(
                f"rollout {self.id} is busy ({self._action}); wait for it to finish "
                "(await ro.wait()) before stepping again"
            )
        state = self.rollout.state
        if state == RolloutState.CLOSED:
            raise RolloutEnded(
                f"rollout {self.id} is closed ({self.status.text}); nothing more can run in it. "
                "Open a new one: rk.notebook.open(agent, task)"
            )
        if state == RolloutState.ENDED:
            raise RolloutEnded(
                f"the exchange of rollout {self.id} is over ({self.status.text}); "
                "call ro.close() to finalize and score it"
            )
        if state != RolloutState.OPEN:
            raise RolloutEnded(f"rollout {self.id} is not open (state {str(state)!r}); call ro.open() first")
        if isinstance(message, str) and not message.strip():
            raise ValueError(
                "empty message: type what the user says, or call step() with no message "
                "to let the agent go on without one"
            )
        if self.needs_message and not any(m.role == "user" for m in to_messages(message)):
            raise ValueError(
                f"task {self.task.name} has no prompt, so the user speaks first: "
                "pass the opening message, e.g. ro.step('hello')"
            )

    # ---- async forms -------------------------------------------------------
    async def _guarded(self, action: str, coro: Any) -> Any:
        self._action = action
        self._notify()
        try:
            return await coro
        finally:
            if self._action == action:  # an abort may have taken over meanwhile
                self._action = None
            if self.rollout.closed:
                self._leave_seat()
            self._notify()

    async def open_async(self) -> bool:
        """Open the rollout. False means it failed; the failure is on the trace."""
        if self.rollout.state != RolloutState.NEW:
            raise RolloutStateError(f"rollout {self.id} is already opened; open a new one with rk.notebook.open(agent, task)")
        if self._home is None:
            self._home = asyncio.get_running_loop()
        return await sync_loop.on(self._home, self._guarded("open", self.rollout.open()))

    async def step_async(self, message: Any = None) -> StepResult:
        """Run one segment on `message` (the user's words, or None)."""
        self._check_step(message)
        return await sync_loop.on(self._home, self._run_step(message))

    async def _run_step(self, message: Any) -> StepResult:
        before = len(self.trace.messages)
        more = await self._guarded("step", self._step(message))
        return StepResult(more=more, messages=list(self.trace.messages[before:]), status=self.status)

    async def _step(self, message: Any) -> bool:
        # Someone typed this: recorded as the person's turn, which a
        # rk.RecordedUser(ro.trace) replays later.
        more = await self.rollout.step(message, by="person")
        self._steps += 1
        return more

    async def close_async(self) -> Trace:
        """Finalize, score and tear down; returns the trace. Idempotent."""
        if self.rollout.closed:
            return self.trace
        if self.busy:
            raise RolloutBusy(f"rollout {self.id} is busy ({self._action}); wait for it (await ro.wait()) or abort it")
        return await sync_loop.on(self._home, self._close())

    async def _close(self) -> Trace:
        return await self._guarded("close", self.rollout.close())

    async def abort_async(self) -> Trace:
        """Free everything without finalizing or scoring; cancels a running
        step first. Idempotent."""
        return await sync_loop.on(self._home, self._abort())

    async def _abort(self) -> Trace:
        # The core cancels a running step and waits for it to end
        # (Rollout.abort); the facade only marks itself busy aborting, so the
        # status says so meanwhile.
        return await self._guarded("abort", self.rollout.abort())

    async def wait(self) -> None:
        """Wait until the actions started by `*_soon` calls have ended. Their
        failures are kept on `ro.last_error`, not raised here."""
        while True:
            inflight = self._inflight
            if inflight is None or inflight.done():
                return
            try:
                await asyncio.shield(sync_loop.awaitable(inflight))
            except asyncio.CancelledError:
                if not inflight.cancelled():
                    raise  # it is this wait that was cancelled
            except Exception:
                pass

    # ---- synchronous forms ---------------------------------------------------
    def open(self) -> bool:
        return sync_loop.run(self.open_async(), self._home)

    def step(self, message: Any = None) -> StepResult:
        """Run one segment and return what it did (true while the exchange can go on)."""
        self._check_step(message)  # fail before touching the loop
        if self.seat_is_yours:
            # The segment would wait for an answer only this kernel can give.
            raise RolloutStateError(
                "you are the model of this rollout (a HumanModel): a blocking ro.step() would wait for you "
                "forever; start it with ro.step_soon() and answer with ro.answer(...) / ro.call(...), "
                "or use ro.panel(seat='agent')"
            )
        return sync_loop.run(self.step_async(message), self._home)

    def close(self) -> Trace:
        return sync_loop.run(self.close_async(), self._home)

    def abort(self) -> Trace:
        return sync_loop.run(self.abort_async(), self._home)

    # ---- the old async spellings, one more release ------------------------------

    # ---- non-blocking forms (widget callbacks) ---------------------------------
    def _soon(self, coro: Any, action: str) -> Any:
        # Busy from the click on, not from when the task first runs: a second
        # click in between must not start a second step.
        self._action = action
        self.last_error = None
        future = sync_loop.schedule(coro, self._home)
        self._inflight = future
        if future.done():
            self._settle(action, future)
        else:
            future.add_done_callback(lambda done: self._settle(action, done))
        return future

    def _settle(self, action: str, future: Any) -> None:
        # Retrieve the outcome so no "exception was never retrieved" warning
        # escapes, and keep a failure where the panel can show it.
        if not future.cancelled() and future.exception() is not None:
            self.last_error = future.exception()
        # Not busy any more, also when the task was cancelled before it ran;
        # but an abort awaited meanwhile (abort_async) has taken over and is still running.
        if self._inflight is future and self._action == action:
            self._action = None
        self._notify()

    def step_soon(self, message: Any = None) -> Any:
        """Start a step and return at once: a future of its StepResult
        (`done()`, `result()`, `add_done_callback()`; `await ro.wait()` waits
        for it). Mistakes (an empty message, a closed rollout) raise here, at once."""
        self._check_step(message)
        return self._soon(self._run_step(message), "step")

    def close_soon(self) -> Any:
        """Start closing and return at once (a future of the trace)."""
        if self.busy:
            raise RolloutBusy(f"rollout {self.id} is busy ({self._action}); wait for it or abort it")
        return self._soon(self._close(), "close")

    def abort_soon(self) -> Any:
        """Start an abort and return at once; a running step is cancelled."""
        return self._soon(self._abort(), "abort")

    # ---- the agent's seat (a HumanModel answered here) -----------------------
    def _leave_seat(self) -> None:
        if self.seat_is_yours:
            self.rollout.spec.model.detach(self.id)  # type: ignore[attr-defined]

    async def _ask(self, request: Any) -> Any:
        asking = (request, asyncio.get_running_loop().create_future())
        self._asking.append(asking)
        self._notify()
        try:
            return await asking[1]
        finally:
            self._asking.remove(asking)
            self._notify()

    def _pending(self) -> tuple[Any, asyncio.Future[Any]] | None:
        """The oldest unanswered (request, future): a cancelled one stays
        listed until its step has unwound."""
        return next((a for a in self._asking if not a[1].done()), None)

    @property
    def asked(self) -> Any:
        """The request the model (you) is asked to answer now (the oldest
        unanswered one when a program asked several at once), or None."""
        pending = self._pending()
        return pending[0] if pending else None

    def answer(self, reply: Any) -> None:
        """Answer the pending request as the model: a str (text), an
        `rk.AssistantMessage` (`rk.HumanModel.call("tool", **arguments)` for
        a tool call). A tool call is checked against the tool's schema first:
        a bad one raises ValueError and nothing is sent."""
        pending = self._pending()
        if pending is None:
            raise RolloutStateError(
                "nothing to answer: the model is not being asked right now; start a step "
                "(ro.step_soon(), or Step in the panel) and answer when it asks"
            )
        problem = check_reply(reply, self.rollout.ctx.tools)
        if problem is not None:
            raise ValueError(problem)
        waiting = pending[1]
        if waiting.get_loop() is sync_loop.running_loop():
            waiting.set_result(reply)
        else:  # a widget callback on the kernel's thread answers a rollout on rollkit's
            waiting.get_loop().call_soon_threadsafe(_answer, waiting, reply)

    def call(self, tool: str, **arguments: Any) -> None:
        """Answer the pending request with a call of `tool` (checked first)."""
        self.answer(HumanModel.call(tool, **arguments))

    # ---- forks ------------------------------------------------------------------
    async def fork_async(self, turn: int, *, agent: Agent | None = None) -> NotebookRollout:
        """A new NotebookRollout, opened, starting where this one stood after
        turn `turn` (rollkit.core.forks); step it with another message, or
        pass another `agent`. This rollout is not touched."""
        if self.busy:
            raise RolloutBusy(f"rollout {self.id} is busy ({self._action}); wait for it before forking")
        return await sync_loop.on(self._home, self._fork(turn, agent))

    async def _fork(self, turn: int, agent: Agent | None) -> NotebookRollout:
        seated: list[NotebookRollout] = []

        def seat(rollout: Rollout) -> None:
            # Built before the fork opens, so a HumanModel has its seat when
            # the fork checks there is someone to ask; it lives where this one does.
            fork = NotebookRollout(agent or self.agent, rollout.task, rollout=rollout)
            fork._home, fork._view = asyncio.get_running_loop(), self._view
            seated.append(fork)

        try:
            await self.rollout.fork(turn, agent=agent, before_open=seat)
        except BaseException:
            for ro in seated:
                ro._leave_seat()
            raise
        [ro] = seated
        ro._steps = max(1, self._steps)
        return ro

    def fork(self, turn: int, *, agent: Agent | None = None) -> NotebookRollout:
        """`ro.fork(2)`: the synchronous form of `fork_async`."""
        return sync_loop.run(self.fork_async(turn, agent=agent), self._home)


    def fork_soon(self, turn: int) -> Any:
        """Start a fork and return at once (a future of the new
        NotebookRollout); what the panel's "Fork here" calls."""
        if self.busy:
            raise RolloutBusy(f"rollout {self.id} is busy ({self._action}); wait for it before forking")
        return sync_loop.schedule(self._fork(turn, None), self._home)

    # ---- views ------------------------------------------------------------------
    def panel(self, *, chart: bool = True, seat: str = "user") -> RolloutPanel:
        """The widget panel for this rollout. `seat="agent"` adds the agent's
        seat: the request the model is asked, the task's tools with their
        schemas, and a reply box and a tool-call form to answer as the model
        (for a `rk.HumanModel`). Showing it again in another cell reuses the
        same one; a closed panel, or other options, get a new one."""
        if seat not in ("user", "agent"):
            raise ValueError(f"seat must be 'user' or 'agent', got {seat!r}")
        options = {"chart": chart, "seat": seat}
        existing = getattr(self, "_panel", None)
        if existing is None or existing.closed or existing.options != options:
            from .panel import RolloutPanel

            existing = self._panel = RolloutPanel(self, chart=chart, seat=seat)
        return existing

    def __repr__(self) -> str:
        return f"NotebookRollout(id={self.id!r}, task={self.task.key!r}, status={self.status.text!r})"

    def _repr_html_(self) -> str:
        return f'{chat_html(self.trace.messages)}<p class="rk-status"><i>{html.escape(self.status.text)}</i></p>'


def _answer(waiting: asyncio.Future[Any], reply: Any) -> None:
    if not waiting.done():  # cancelled meanwhile: the step has moved on
        waiting.set_result(reply)


def _turns(n: int) -> str:
    return "1 turn" if n == 1 else f"{n} turns"


def _failure(trace: Trace) -> str:
    error = trace.errors[0]
    return f"failed in {error.phase}: {error.type}: {error.message}"


def _reward_text(trace: Trace) -> str:
    if not any(v is not None for v in trace.rewards.values()):
        return "missing" if trace.rewards else "none (the task has no rewards)"
    return f"{trace.reward:.3f}"


def open(agent: Agent, task: Task, runtime: Runtime | None = None) -> NotebookRollout:  # noqa: A001 - the API name
    """Open a rollout to step by hand: `ro = rk.notebook.open(agent, task)`,
    then `ro.step()`, `ro.step("user text")`, `ro.close()`. Works in a cell,
    a script, or inside a running loop. If opening failed, `ro.status` says
    why (the failure is on `ro.trace`)."""
    from ..core import agent as agents, task as tasks

    if not isinstance(agent, agents.Agent):
        raise TypeError(f"rk.notebook.open needs an rk.Agent first, got {type(agent).__name__}")
    if not isinstance(task, tasks.Task):
        raise TypeError(f"rk.notebook.open needs an rk.Task second, got {type(task).__name__}")
    ro = NotebookRollout(agent, task, runtime)
    ro.open()
    return ro
