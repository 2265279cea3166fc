"""The rollout: one execution of one task by one agent, open to close.

`Rollout` owns the lifecycle of LIFECYCLE.md and nothing else: `open()` builds
the world (runtime, prompt check, setup under one deadline, services, network
policy, the initial prompt rewrite), `step()` runs one segment and charges its
agent time, `close()` closes the harness session, finalizes, scores and tears
down, `abort()` frees everything without finalizing or scoring. Every failure
lands on the trace typed by its boundary; only lifetime bugs of the caller
(L3) and cancellations propagate. Model calls go through the `Session`,
scoring through `scoring.score`; this module only sequences them.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Callable
from typing import Any

from .cancellation import deadline, finish
from .context import RolloutContext, new_secret
from .errors import (HarnessError, LifetimeError, Refused, RolloutBusy, RolloutError, RolloutStateError, SandboxError,
                     TaskError, ToolsetError, crossing)
from .events import EventBus
from .hooks import HookSet, collect_hooks
from .messages import Request, opening_messages, to_messages, unvalidated
from .outcome import Outcome
from .prefix import ForkError, Prefix, prefix_of
from .prices import model_card, require_price
from .runtime import Runtime
from .scoring import score
from .session import Session
from .spec import RolloutSpec, SpecSource
from .task import Task
from .tools import ToolResult
from .trace import PHASES, ErrorInfo, Segment, TaskRef, Trace, UserTurn

__all__ = ["Rollout", "RolloutState", "open_fork"]

log = logging.getLogger("rollkit")


class RolloutState(enum.StrEnum):
    """Where a rollout is in its lifecycle (`Rollout.state`):
    new -> opening -> open <-> stepping -> ended -> closing/aborting -> closed.
    A str enum: each state equals its name ("open"), as before it was typed."""

    NEW = "new"
    OPENING = "opening"
    OPEN = "open"  # between segments: step() runs one
    STEPPING = "stepping"
    ENDED = "ended"  # the exchange is over (a stop, a failure, a step that added no turn); close() scores
    CLOSING = "closing"
    ABORTING = "aborting"
    CLOSED = "closed"


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _check_signal_names(signals: list[Any]) -> None:
    # Two signals under one name would silently overwrite each other's row (L27).
    owners: dict[str, str] = {}
    for hook in signals:
        where = f"{hook.owner} {hook.kind}"
        if hook.name in owners:
            raise TypeError(
                f"two signals are named {hook.name!r} ({owners[hook.name]} and {where}); "
                "rename one, e.g. @rk.reward(name=...)"
            )
        owners[hook.name] = where


class Rollout:
    """One task, one agent, one execution. Build it with `agent.rollout(task)`.

    `user=True` says a user will speak between segments (a person in a
    notebook, a script, another agent); it lets a task without a prompt open.
    """

    def __init__(self, spec: RolloutSpec, task: Task, runtime: Runtime | None = None, *, user: bool = False) -> None:
        if not isinstance(spec, RolloutSpec):
            raise TypeError(f"build a rollout with agent.rollout(task); Rollout() takes a RolloutSpec, got {type(spec).__name__}")
        if not isinstance(task, Task):
            raise TypeError(f"a rollout needs a rk.Task, got {type(task).__name__}")
        self.spec = spec
        self._clock = spec.clock
        self.task = task
        self.harness = spec.harness
        self.user = user
        if runtime is None and spec.lends_runtime:
            runtime = spec.runtime  # type: ignore[assignment]
        self.owns_runtime = runtime is None
        self.runtime = runtime if runtime is not None else spec.make_runtime()
        self.events = EventBus()
        self.phase: str | None = None  # the phase started last (what a watcher that polls shows)
        self.limits = spec.limits
        self.timeouts = spec.timeouts
        # Routing and shape checks happen here, at build time (L16, L17).
        self.hooks = HookSet.build(collect_hooks(task, "task"))
        self._signals = [*self.hooks.rewards, *self.hooks.metrics, *spec.signals]
        _check_signal_names(self._signals)
        self._made_by: Any = None  # the agent that built it: a fork is built by the same one
        self.trace = Trace(
            task=TaskRef.of(task),
            agent=spec.describe(),
            limits=self.limits.model_dump(),
            timeouts=self.timeouts.model_dump(),
        )
        self.id = self.trace.id
        self._state = RolloutState.NEW
        self._failed = False
        self._opened = False
        self._pending: list[Any] | None = None
        self._prefix: Prefix | None = None  # set by start_from before open
        self._remaining = self.timeouts.agent
        self._charged = 0.0
        self._segment_t0: float | None = None
        # Who runs a step or a close (abort cancels and awaits it); cleanups run once, to their end.
        self._step_task: asyncio.Task[Any] | None = None
        self._close_task: asyncio.Task[Any] | None = None
        self._step_done = self._close_done = None  # type: asyncio.Event | None
        self._releasing = self._aborting = None  # type: asyncio.Future[Any] | None
        self._setup_started = False
        self.toolsets = task.all_toolsets()
        self._wire()

    def _wire(self) -> None:
        """The session (model calls under the limits and hooks) and the
        context the harness sees, then the task's tools on it."""
        task = self.task
        self._values: dict[str, Any] = {"trace": self.trace, "task": task, "data": task.data, "runtime": self.runtime}
        self.session = Session(
            trace=self.trace,
            model=self.spec.model,
            clock=self._clock,
            hooks=self.hooks,
            limits=self.limits,
            values=self._values,
            emit=self._emit,
            agent_time=self._agent_time,
            segment=lambda: len(self.trace.segments) - 1,
        )
        self.ctx = RolloutContext(
            id=self.id,
            task=task,
            data=task.data,
            trace=self.trace,
            runtime=self.runtime,
            session=self.session,
            secret=new_secret(),
        )
        self._values["ctx"] = self.ctx
        self._gather_tools()

    def _gather_tools(self) -> None:
        """Every tool of every tool set on the context; two with one name are
        refused at build time, before anything runs."""
        for toolset in self.toolsets:
            for name, tool in toolset.tools.items():
                if name in self.ctx.tools:
                    raise TypeError(f"task {self.task.name}: two tools are named {name!r}; rename one")
                self.ctx.tools[name] = tool
                self.ctx.tool_specs.append(tool.spec)
        # The schemas the agent was offered, on the trace: a training row
        # needs them beside the messages (rk.export format="sft").
        self.trace.record_info(tools=list(self.ctx.tool_specs))

    # ---- state ------------------------------------------------------------
    @property
    def ok(self) -> bool | None:
        return self.trace.ok

    @property
    def closed(self) -> bool:
        return self._state == RolloutState.CLOSED

    @property
    def is_open(self) -> bool:
        """True while `step()` can run a segment."""
        return self._state == RolloutState.OPEN

    @property
    def state(self) -> RolloutState:
        return self._state

    @property
    def waiting_for_user(self) -> bool:
        """Open, and the next move is the user's: the agent yielded (its last
        message is a reply without tool calls), or nobody has spoken in a
        task without a prompt. False when the agent has work left: the
        prompt not answered yet, or tool results (a fork after a tool call)."""
        if self._state != RolloutState.OPEN:
            return False
        if self._pending is not None:
            return not self.task.data.prompt
        messages = self.trace.messages
        return bool(messages) and messages[-1].role == "assistant" and not messages[-1].tool_calls

    def subscribe(self, subscriber: Any, kinds: Any = None) -> Any:
        """Receive this rollout's events (every kind, or `kinds`); returns a
        function that unsubscribes."""
        return self.events.subscribe(subscriber, kinds)

    def _emit(self, kind: str, **data: Any) -> None:
        # Asked first: a handful of events a turn, mostly heard by no one.
        if self.events.wants(kind):
            self.events.emit(kind, self.id, **data)
        run_events = self.spec.events
        if run_events.wants(kind):
            run_events.emit(kind, self.id, **data)

    @property
    def agent_time(self) -> float:
        """Agent time charged so far, the running segment included (L9)."""
        return self._agent_time()

    def _agent_time(self) -> float:
        running = self._clock.monotonic() - self._segment_t0 if self._segment_t0 is not None else 0.0
        return self._charged + running

    def _phase_start(self, name: str) -> None:
        self.trace.open_span(name, self._clock.time(), reopen=True)
        self.phase = name
        self._emit("phase_start", phase=name)

    def _phase_end(self, name: str) -> None:
        if self.trace.close_span(name, self._clock.time()):
            self._emit("phase_end", phase=name)

    def _fail(self, exc: BaseException, phase: str) -> None:
        """Record a failure on the trace (L8, L31) and end the exchange."""
        self._failed = True
        self.trace.record_error(ErrorInfo.from_exception(exc, phase))
        self._phase_end(phase)
        self._emit("failure", phase=phase, error=type(exc).__name__, message=str(exc))
        log.debug("rollout %s failed in %s: %s", self.id, phase, exc)

    def fail(self, error: RolloutError, phase: str = "user") -> None:
        """Record a failure found outside the rollout's own code, between
        segments (a user that broke, see rollkit.core.users): the exchange
        ends and the run will not be scored (L23)."""
        if not isinstance(error, RolloutError):
            raise TypeError(f"fail() records a rk.RolloutError (e.g. rk.TaskError), got {type(error).__name__}")
        if self._state not in (RolloutState.OPEN, RolloutState.ENDED):
            raise RolloutBusy(f"rollout {self.id} is {self._state}: a failure is recorded between segments only")
        self._fail(error, phase)
        self._state = RolloutState.ENDED

    def stop(self, condition: str) -> None:
        """End the exchange cleanly between segments, as a limit does (L13):
        `condition` becomes `trace.stop_condition` and the run is scored."""
        if self._state not in (RolloutState.OPEN, RolloutState.ENDED):
            raise RolloutBusy(f"rollout {self.id} is {self._state}: it can be stopped between segments only")
        self.session.stop(condition)
        self._state = RolloutState.ENDED

    # ---- open -------------------------------------------------------------
    async def open(self) -> bool:
        """Build the world up to "able to run". Returns False when something
        failed; the failure is on the trace (L8)."""
        if self._state != RolloutState.NEW:
            raise RolloutStateError(f"rollout {self.id} was already opened; build a new one with agent.rollout(task)")
        # A model that cannot answer at all (a HumanModel with nobody to ask)
        # is the caller's setup mistake: refused before anything starts.
        self.spec.model.check(self.id)
        if self.limits.max_cost_usd is not None:
            require_price(self.spec.model, hard=self.limits.cost_cap == "hard")
        # Read now, so the price table never loads inside a segment's agent
        # time; the session prices every call by these rates, looking up none.
        self.session.rates = model_card(self.spec.model)
        self._state = RolloutState.OPENING
        phase = "boot"
        try:
            self._phase_start("boot")
            await self._boot()
            self._phase_end("boot")
            phase = "setup"
            self._check_prompt()
            self._setup_started = True
            self._phase_start("setup")
            await self._setup()
            await self._serve()
            if self._prefix is not None:
                self._install_prefix(self._prefix)
            else:
                self._pending = await self._initial_messages()
            self._phase_end("setup")
        except asyncio.CancelledError:
            await self.abort()
            raise
        except LifetimeError:
            await self.abort()
            raise
        except Exception as exc:
            self._fail(exc, phase)
            self._state = RolloutState.ENDED
            return False
        self._opened = True
        self._state = RolloutState.OPEN
        return True

    async def _boot(self) -> None:
        if self.owns_runtime:
            with crossing(SandboxError, f"{self.runtime.kind} runtime start"):
                await self.runtime.start()
        elif self.runtime.stopped or not self.runtime.started:
            # The owner's lifetime bug, not the rollout's failure (L3).
            raise LifetimeError(
                f"the borrowed runtime {self.runtime!r} is not running; its owner must start it "
                "before lending it and keep it alive until the rollout closes"
            )

    def _check_prompt(self) -> None:
        # Fail before any setup runs rather than let the rollout spin (L4).
        if not self.task.data.prompt and not self.user:
            raise TaskError(
                f"task {self.task.name} ({self.task.key}) has no prompt and no user to open the "
                "conversation; give its TaskData a prompt, or run it with a user "
                "(agent.interaction(task), agent.rollout(task, user=True))"
            )

    async def _setup(self) -> None:
        # task.setup and harness.setup share one deadline (L5).
        limit = self.timeouts.setup
        running = "task.setup"
        try:
            async with asyncio.timeout(limit):
                with crossing(TaskError, "task.setup"):
                    await _maybe_await(self.task.setup(self.ctx))
                running = "harness.setup"
                with crossing(HarnessError, "harness.setup"):
                    await _maybe_await(self.harness.setup(self.ctx))
        except TimeoutError as exc:
            error = TaskError if running == "task.setup" else HarnessError
            raise error(
                f"setup timeout: {running} was still running when the shared {limit}s setup "
                "deadline of task.setup and harness.setup passed"
            ) from exc

    async def _serve(self) -> None:
        for toolset in self.toolsets:
            with crossing(ToolsetError, f"toolset {toolset.name!r} start"):
                self.ctx.services.update(await toolset.start(self.ctx) or {})
        with crossing(HarnessError, "harness.serve"):
            self.ctx.services.update(await self.harness.serve(self.ctx))
        with crossing(SandboxError, "network policy"):
            self.trace.record_info(network=await self.runtime.apply_network_policy(
                self.spec.network, keep=list(self.ctx.services.values())
            ))

    async def _initial_messages(self) -> list[Any]:
        data = self.task.data
        messages: list[Any] = opening_messages(data.system_prompt, data.prompt)
        if data.prompt and self.hooks.request_interceptors:
            # The harness sees the prompt only after the interceptors rewrote it (L7).
            request = Request(messages=messages, tools=self.ctx.tool_specs)
            messages = list((await self.session.rewrite_request(request, call=None)).messages)
        return messages

    def _install_prefix(self, prefix: Prefix) -> None:
        """Start from where a forked rollout stood (rollkit.core.forks): its
        record up to the turn, the budgets spent by then, and the harness's
        view of the conversation."""
        trace = self.trace
        trace.record_prefix(prefix)
        self._charged = prefix.agent_time  # agent time is a budget of the whole trajectory (L9)
        if self._remaining is not None:
            self._remaining = max(0.0, self._remaining - prefix.agent_time)
        self.session.next_call = prefix.next_call
        # What run_tool counted, recounted from the results the conversation kept.
        results = [m for m in trace.messages if m.role == "tool"]
        self.ctx.tool_calls = len(results)
        self.ctx.tool_failures = sum(1 for m in results if ToolResult.is_error(m.content))
        self.harness.restore(self.ctx, list(trace.messages))
        if prefix.stop_condition is not None:
            self.session.stop(prefix.stop_condition)

    def start_from(self, prefix: Prefix) -> None:
        """Start, when opened, where `prefix` stood (rollkit.core.prefix);
        refused when this rollout's runtime cannot be copied."""
        if self._state != RolloutState.NEW:
            raise RolloutStateError(f"rollout {self.id} was already opened; a fork starts from a new rollout")
        if not self.runtime.forkable:
            raise ForkError(
                f"cannot fork trace {prefix.source} at turn {prefix.turn} into a {type(self.runtime).__name__}: "
                f"{self.runtime.unforkable_reason}; fork rollouts that run in a LocalRuntime"
            )
        self._prefix = prefix

    async def fork(self, turn: int, *, agent: SpecSource | None = None, runtime: Runtime | None = None,
                   before_open: Callable[[Rollout], Any] | None = None) -> Rollout:
        """A new rollout, opened, that starts where this one stood after turn
        `turn` (see rollkit.core.forks); `agent` may differ (another model or
        sampling). This rollout and its trace are not touched."""
        if self._state in (RolloutState.STEPPING, RolloutState.OPENING):
            raise ForkError(f"rollout {self.id} is {self._state}; fork it once that has finished")
        if not self.runtime.forkable:
            raise ForkError(
                f"cannot fork rollout {self.id}: it runs in a {type(self.runtime).__name__}, and "
                f"{self.runtime.unforkable_reason}; fork rollouts that run in a LocalRuntime"
            )
        spec = self.spec if agent is None else agent.spec
        if not isinstance(spec, RolloutSpec):
            raise TypeError(f"fork(agent=...) takes a rk.Agent, got {type(agent).__name__}")
        return await open_fork(self.trace, turn, spec, self.task, runtime, before_open=before_open,
                               made_by=self._made_by if agent is None else agent)

    # ---- step -------------------------------------------------------------
    async def step(self, messages: Any = None, *, by: str = "caller") -> bool:
        """Run one segment on `messages` (the user's turn, recorded on
        `trace.user_turns` as spoken `by` whoever passes them). Returns
        whether the exchange can continue (L15)."""
        if self._state == RolloutState.STEPPING:
            raise RolloutBusy(
                f"rollout {self.id} is already running a step; await it before stepping again"
            )
        if self._state != RolloutState.OPEN:
            return False
        await self._check_borrowed_runtime()
        new = self._take_messages(messages, by)
        self.trace.record_messages(new)
        segment = unvalidated(
            Segment, index=len(self.trace.segments), start=self._clock.time(), end=None,
            turns_before=self.trace.num_turns, turns_added=0,
            user_messages=sum(1 for m in new if m.role == "user"), charged=0.0, remaining=None,
        )
        self.trace.record_segment(segment)
        self._state = RolloutState.STEPPING
        self._step_task = asyncio.current_task()
        self._step_done = asyncio.Event()
        self._phase_start("agent")
        self._emit("segment_start", segment=segment.index)
        self._segment_t0 = self._clock.monotonic()
        lifetime_error: LifetimeError | None = None
        try:
            await self._run_segment(new)
        except LifetimeError as exc:
            lifetime_error = exc
        except asyncio.CancelledError:
            # A segment cut off midway left a half-updated conversation (a
            # reply without its tool results); scoring it would mean nothing.
            self._fail(HarnessError("the step was cancelled before the agent yielded; the trajectory is incomplete"), "agent")
            self._mark_cut("agent")
            raise
        finally:
            self._end_segment(segment)
            if self._state == RolloutState.STEPPING:
                self._state = RolloutState.OPEN
            self._step_task = None
            self._step_done.set()
        if lifetime_error is not None:
            await self.abort()
            raise lifetime_error
        await self._check_borrowed_runtime()
        return self._continues(segment)

    def _take_messages(self, messages: Any, by: str) -> list[Any]:
        """What the segment starts on: what is pending from open (the
        prompt), then the user's turn, which is recorded as one."""
        new = to_messages(messages)
        if self._pending is not None and not self.task.data.prompt and not any(m.role == "user" for m in new):
            raise ValueError(
                f"task {self.task.name} has no prompt, so the user speaks first: "
                "pass the opening message, e.g. step('hello')"
            )
        trace = self.trace
        if new:
            trace.record_user_turn(unvalidated(
                UserTurn, index=len(trace.user_turns), segment=len(trace.segments), by=by, messages=list(new),
                replying_to=trace.last_reply, similarity=None, diverged=None,
            ))
        if self._pending is not None:
            new = [*self._pending, *new]
            self._pending = None
        return new

    def _continues(self, segment: Segment) -> bool:
        """Whether the exchange can go on after `segment` (L15)."""
        if self._state != RolloutState.OPEN:
            return False  # aborted or closed while the segment ran
        if self._failed or self.session.stopped or segment.turns_added == 0:
            # A segment that committed nothing cannot be waiting on the user;
            # treating it as continuable would hand the user a conversation
            # that never moved, forever (L14).
            self._state = RolloutState.ENDED
            return False
        return True

    async def _check_borrowed_runtime(self) -> None:
        # A borrowed runtime stopped by its owner is the owner's bug, never the
        # rollout's failure (L3): free what we hold, raise to the caller,
        # record nothing.
        if not self.owns_runtime and self.runtime.stopped:
            await self.abort()
            raise LifetimeError(f"the borrowed runtime {self.runtime!r} was stopped by its owner while the rollout ran")

    async def _run_segment(self, new: list[Any]) -> None:
        timer = asyncio.timeout(self._remaining)
        try:
            async with timer:
                with crossing(HarnessError, f"harness {self.harness.name!r}"):
                    await self.harness.segment(self.ctx, new)
        except Refused as refused:
            # Usually the session already stopped; a harness may also relay a
            # refusal from elsewhere, which ends the exchange the same way.
            self.session.stop(refused.condition)
        except LifetimeError:
            raise
        except Exception as exc:
            if not self.owns_runtime and self.runtime.stopped:
                raise LifetimeError(
                    f"the borrowed runtime {self.runtime!r} was stopped by its owner while the rollout ran"
                ) from exc
            if not timer.expired():
                self._fail(exc, "agent")
        if timer.expired() and not self._failed:
            # Checked after every exit path: a harness that swallowed the
            # cancellation, or turned it into another error, still ran out (L10).
            error = HarnessError(f"agent timeout: the agent used its whole {self.timeouts.agent}s agent-time budget")
            self._fail(error, "agent")

    def _end_segment(self, segment: Segment) -> None:
        now = self._clock.monotonic()
        spent = now - (self._segment_t0 if self._segment_t0 is not None else now)
        self._segment_t0 = None
        self._charged += spent
        if self._remaining is not None:
            self._remaining = max(0.0, self._remaining - spent)
        segment = self.trace.record_segment_end(
            segment.index, end=self._clock.time(), charged=spent, remaining=self._remaining)
        self._phase_end("agent")
        self._emit("segment_end", segment=segment.index, turns_added=segment.turns_added)

    async def _abort_closing(self) -> Trace:
        """Abort a close() running in another task: cancel it (its teardown
        still runs), which marks the trace aborted rather than scored. Once
        the score is written the run is whole: the abort only waits for the
        teardown."""
        task, done = self._close_task, self._close_done
        if task is not None and task is not asyncio.current_task() and done is not None:
            task.cancel()
            await done.wait()
        return self.trace

    async def _cancel_running_step(self) -> None:
        """Cancel a step running in another task and wait until it has ended."""
        task, done = self._step_task, self._step_done
        if task is not None and task is not asyncio.current_task() and done is not None:
            task.cancel()
            await done.wait()

    # ---- close ------------------------------------------------------------
    async def close(self) -> Trace:
        """Close the harness session, finalize, score, tear down (L21).
        Idempotent; always returns the trace. A step still running is
        cancelled first, and then the run counts as failed (L23). A close
        cancelled before its score is written (in finalize or scoring) still
        tears everything down, and marks the trace aborted where it was cut
        (`trace.aborted_in`): an unscored run must not pass for a whole one."""
        if self._state in (RolloutState.CLOSED, RolloutState.CLOSING):
            return self.trace
        if self._state == RolloutState.STEPPING:
            await self._cancel_running_step()
        if self._opened:
            await self._check_borrowed_runtime()
        self._state = RolloutState.CLOSING
        self._close_task = asyncio.current_task()
        self._close_done = asyncio.Event()
        try:
            await self._release_harness()
            if self._opened and not self._failed:
                await self._finalize()
                if not self._failed:
                    await self._score()
        except asyncio.CancelledError:
            self._mark_cut(self._running_phase() or "teardown")
            raise
        finally:
            try:
                await self._teardown_runtime()  # runs to its end, even when cancelled (Runtime.stop)
            finally:
                self.trace.close_open_spans(self._clock.time())
                self.trace.record_outcome(self._outcome())  # L25, decided last
                self._state = RolloutState.CLOSED
                self._close_done.set()
                self._emit("closed", ok=self.trace.ok, **({"aborted": True} if self.trace.aborted else {}))
        log.info(self._done_line())
        return self.trace

    def _running_phase(self) -> str | None:
        """The phase whose span is open now (the one a cancellation cuts)."""
        running = [name for name in PHASES if (span := self.trace.phases.get(name)) is not None and span.end is None]
        return running[-1] if running else None

    def _outcome(self) -> Outcome:
        """How the run ended, from what it recorded (L25): a failure first,
        then a cut; a rollout never opened did not run; else its stop
        condition, or ok. Scored when scoring ran."""
        trace = self.trace
        if not (self._opened or trace.errors or trace.aborted):
            return Outcome.incomplete()
        return Outcome.of(trace, closed=True)

    def _mark_cut(self, where: str | None) -> None:
        """The run was cut short by a cancellation or an abort: not ok, not
        scored as a whole run, and the trace says in which phase."""
        self.trace.record_cut(where)

    def _done_line(self) -> str:
        trace = self.trace
        reward = None if self._failed or not trace.rewards else round(trace.reward, 6)
        return f"rollout done: id={trace.id} reward={reward} turns={trace.num_turns} stop={trace.stop}"

    async def _bounded(self, what: str, action: Any) -> None:
        """Run a teardown action under the teardown deadline; failures only warn.

        A failed teardown must not throw away a trajectory that can be scored
        (L22), and a hung one must not hang close()."""
        try:
            # Both bounds: the timeout cuts a plain await, the deadline reaches
            # the cleanups that run to their end whoever cancels them (finish).
            with deadline(self.timeouts.teardown):
                async with asyncio.timeout(self.timeouts.teardown):
                    await action()
        except TimeoutError:
            self._warn(f"{what} did not finish within the {self.timeouts.teardown}s teardown deadline: "
                       "abandoned (its processes killed)")
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise asyncio.CancelledError() from None  # the caller's cancellation, held while the stop ran
        except Exception as exc:
            self._warn(f"{what} failed: {type(exc).__name__}: {exc}")

    async def _release_harness(self) -> None:
        """Close the harness session and stop the tool sets, once. It runs to
        its end even if the caller is cancelled meanwhile (each step under
        the teardown deadline): a cleanup cut in half would leave a program
        running or a server listening."""
        if not self._setup_started:
            return  # nothing was brought up
        if self._releasing is None:
            self._releasing = asyncio.ensure_future(self._release_all())
        await finish(self._releasing)

    async def _release_all(self) -> None:
        await self._bounded("harness cleanup", lambda: self.harness.cleanup(self.ctx))
        for toolset in self.toolsets:
            await self._bounded(f"toolset {toolset.name!r} stop", toolset.stop)

    async def _finalize(self) -> None:
        self._phase_start("finalize")
        try:
            async with asyncio.timeout(self.timeouts.finalize):
                with crossing(TaskError, "task.finalize"):
                    await _maybe_await(self.task.finalize(self.ctx))
        except TimeoutError:
            self._fail(TaskError(f"task.finalize timed out after {self.timeouts.finalize}s"), "finalize")
        except Exception as exc:  # Refused included: finalize may not call the model
            self._fail(exc if isinstance(exc, RolloutError) else TaskError(f"task.finalize: {exc}"), "finalize")
        self._phase_end("finalize")

    async def _score(self) -> None:
        self._phase_start("scoring")
        await score(self.trace, self._signals, self._values, self.timeouts.scoring)
        self._phase_end("scoring")
        self._emit("scored", reward=self.trace.reward)

    async def _teardown_runtime(self) -> None:
        # Last, and only if owned: cross-trace judging needs traces, not a live box.
        if self.owns_runtime and self.runtime.started:
            await self._bounded("runtime stop", self.runtime.stop)

    def _warn(self, message: str) -> None:
        self.trace.record_warning(message)
        log.warning("rollout %s: %s", self.id, message)

    async def abort(self) -> Trace:
        """Free everything without finalizing or scoring. Idempotent: a
        second call waits for the first one's cleanup. A step running in
        another task is cancelled first. The cleanup runs to its end even if
        the caller is cancelled meanwhile; `trace.aborted_in` says which
        phase the abort cut (None between segments)."""
        if self._state == RolloutState.CLOSED:
            return self.trace
        if self._state == RolloutState.CLOSING:
            return await self._abort_closing()
        if self._aborting is None:
            self._aborting = asyncio.ensure_future(self._abort())
        return await finish(self._aborting)

    async def _abort(self) -> Trace:
        where = "agent" if self._state == RolloutState.STEPPING else self._running_phase()
        if self._state == RolloutState.STEPPING:
            await self._cancel_running_step()
        self._state = RolloutState.ABORTING
        try:
            await self._release_harness()
            await self._teardown_runtime()
        finally:
            self.trace.close_open_spans(self._clock.time())
            self._mark_cut(where)
            self.trace.record_outcome(self._outcome())
            self._state = RolloutState.CLOSED
        self._emit("closed", ok=False, aborted=True)
        return self.trace


async def open_fork(
    trace: Trace, turn: int, spec: RolloutSpec, task: Task, runtime: Runtime | None = None, *,
    before_open: Callable[[Rollout], Any] | None = None, made_by: Any = None,
) -> Rollout:
    """A new rollout of `spec` on `task`, opened where `trace` stood after
    turn `turn` (rollkit.core.forks); a fork that cannot open is closed and
    refused with a ForkError naming why."""
    prefix = prefix_of(trace, turn)
    rollout = Rollout(spec, task, runtime, user=True)
    rollout._made_by = made_by
    rollout.start_from(prefix)
    if before_open is not None:
        before_open(rollout)
    if not await rollout.open():
        error = rollout.trace.error
        await rollout.close()
        raise ForkError(
            f"the fork of trace {trace.id} at turn {turn} could not open: "
            f"{error.type}: {error.message}" if error else f"the fork of trace {trace.id} at turn {turn} could not open"
        )
    return rollout
