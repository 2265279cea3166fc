"""The session: the interception point every model call of a rollout passes.

One `Session` per rollout. `await session.complete(request)` runs, in order:
the limits and the trace `@stop`s (refusing before the call, L12, L13), the
request interceptors, the request `@stop`s, the model, the response
interceptors, the response `@stop`s, and then records the call and commits
the turn. A refusal raises `Refused`, a clean stop for the harness, never an
error. Once stopped, every later call is refused with the same condition.

The in-process harness calls this directly; the HTTP interception server is a
thin adapter over the same method. The session owns nothing else: it does not
start segments, charge agent time or score.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .clock import SYSTEM_CLOCK, Clock
from .errors import ProviderError, Refused, crossing
from .hooks import HookSet, check_stop, rewrite
from .messages import Request, Response, sampling_of
from .models import calling_rollout, calling_rollout_key
from .prices import dollars, model_card, output_bound, worst_case_cost
from .trace import ErrorInfo, Rewrite

if TYPE_CHECKING:
    from .budgets import RolloutLimits
    from .models import Model
    from .trace import Trace

__all__ = ["Session", "Refused", "LIMIT_NAMES", "LIMIT_STOPS", "active_limits"]

# Each limit reads the trace aggregate of the same name (L11).
LIMIT_NAMES = {
    "max_turns": "num_turns",
    "max_input_tokens": "num_input_tokens",
    "max_output_tokens": "num_output_tokens",
    "max_total_tokens": "num_total_tokens",
    "max_cost_usd": "cost_usd",
}

# Stop conditions set by a limit rather than a hook: the five above, the
# user-turn cap, and a prompt that outgrew the model's context window.
LIMIT_STOPS = frozenset({*LIMIT_NAMES, "max_user_turns", "context_length"})


def active_limits(limits: RolloutLimits) -> list[tuple[str, float, str]]:
    """(name, value, trace aggregate) of each limit that is set."""
    return [(name, getattr(limits, name), attr) for name, attr in LIMIT_NAMES.items() if getattr(limits, name) is not None]


_UNREAD = object()  # Session.rates before they are read


class Session:
    def __init__(
        self,
        *,
        trace: Trace,
        model: Model,
        hooks: HookSet,
        limits: RolloutLimits,
        values: dict[str, Any],
        emit: Callable[..., None],
        agent_time: Callable[[], float],
        segment: Callable[[], int],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.trace = trace
        self.model = model
        self.hooks = hooks
        self.values = values  # what hooks may ask for: trace, task, data, runtime, ctx
        self._emit = emit
        self._agent_time = agent_time
        self._segment = segment
        self._clock = clock
        self._limits = active_limits(limits)
        self._hard_cost = limits.max_cost_usd if limits.cost_cap == "hard" else None
        self._reserved = 0.0  # the worst cases of calls in flight, under a hard cap
        self.stop_condition: str | None = None
        # The index the next model call gets (a fork starts after its prefix's).
        self.next_call = 0
        self._in_flight = 0
        # The model's rates (rollkit.core.prices), read once for the rollout
        # (Rollout.open sets them) and never per call; _UNREAD until then.
        self.rates: Any = _UNREAD

    @property
    def stopped(self) -> bool:
        return self.stop_condition is not None

    def stop(self, condition: str) -> None:
        """End the exchange cleanly (L13); the first condition wins."""
        if self.stop_condition is None:
            self.stop_condition = condition
            self.trace.record_stop(condition)
            self._emit("stop", condition=condition)

    def _refuse(self, condition: str) -> Refused:
        self.stop(condition)
        return Refused(self.stop_condition or condition)

    async def check_before_turn(self) -> str | None:
        """Limits, then trace @stops: checked between turns (L12)."""
        trace = self.trace
        for name, limit, attr in self._limits:
            used = getattr(trace, attr)
            if name == "max_turns":
                used += self._in_flight  # calls running side by side count as turns already
            elif used is None:  # a turn whose usage the provider did not report: no price, no count
                self._unknown(name)
                continue
            if used >= limit:
                return name
        for hook in self.hooks.trace_stops:
            if await check_stop(hook, self.values):
                return hook.name
        return None

    def _cost(self, response: Response) -> float | None:
        """The dollars of a call that answered (rollkit.core.prices); the
        trace says once where its rates came from (`info["cost_from"]`)."""
        card = self.rates
        if card is None:
            return None
        if card is _UNREAD:
            card = self.rates = model_card(self.model)
            if card is None:
                return None
        if "cost_from" not in self.trace.info:
            self.trace.record_info(cost_from=f"computed from the usage: {card.source}")
            if card.estimate:
                name = self.model.name
                self.trace.record_info(cost_estimated=True)
                self.trace.record_warning(
                    f"cost_usd is an estimate ({card.source}): give the real price with rk.prices({{{name!r}: "
                    f"{{'input': ..., 'output': ...}}}}), or none with rk.prices({{{name!r}: False}})")
        return card.cost(response.usage)

    def _sampling(self, request: Request) -> dict[str, Any] | None:
        """The sampling parameters the call goes out with (the model's own
        defaults under the request's; a duck-typed model without
        `sent_params` sends the request's)."""
        sent = getattr(self.model, "sent_params", None)
        return sampling_of(sent(request) if sent is not None else request.params)

    def _unknown(self, name: str) -> None:
        """Say once on the trace that a limit can no longer be checked
        (Rollout.open made sure the model has a price, so only a turn
        without reported usage leads here)."""
        what = "cost" if name == "max_cost_usd" else "token count"
        note = f"{name} is no longer checked: a turn's {what} is unknown (its usage was not reported)"
        if note not in self.trace.warnings:
            self.trace.record_warning(note)

    async def complete(self, request: Request, *, dialect: str | None = None) -> Response:
        """Run one model call through the pipeline. `dialect` names the wire
        format it came in (the interception server's; None in process), for
        the trace."""
        if self.stop_condition is not None:
            # A harness that retries every refusal in a loop must still let the
            # event loop run (the agent deadline, other rollouts).
            await asyncio.sleep(0)
            raise Refused(self.stop_condition)
        condition = await self.check_before_turn()
        if condition is not None:
            raise self._refuse(condition)
        index = self.next_call
        self.next_call += 1
        hooks = self.hooks
        if hooks.request_interceptors:
            request = await self.rewrite_request(request, call=index)
        for hook in hooks.request_stops:
            if await check_stop(hook, {**self.values, "request": request}):
                raise self._refuse(hook.name)

        worst = self._check_worst_case(request) if self._hard_cost is not None else 0.0
        self._in_flight += 1
        self._reserved += worst
        try:
            return await self._call_model(index, request, dialect)
        finally:
            self._in_flight -= 1
            self._reserved -= worst

    def _check_worst_case(self, request: Request) -> float:
        """Under a hard cap: refuse the call whose worst case (RolloutLimits'
        docstring) could cross `max_cost_usd`; its worst case otherwise."""
        card, bound, spent = model_card(self.model), output_bound(self.model, request), self.trace.cost_usd
        if card is None or bound is None or spent is None:
            # Open checked the price and the model's bound; an unknown spend is _cost_unknown's.
            return 0.0
        last = self.trace.model_calls[-1].usage if self.trace.model_calls else None
        prompt = (last.input_tokens or 0) + (last.output_tokens or 0) if last is not None else 0
        worst = worst_case_cost(card, bound, prompt)
        limit = self._hard_cost or 0.0
        if spent + self._reserved + worst > limit:
            self.trace.record_warning(
                f"max_cost_usd (hard cap): a call was refused: it could cost up to {dollars(worst)} ({bound} output "
                f"tokens after a prompt of about {prompt}, at {card.source}), and {dollars(spent + self._reserved)} "
                f"of {dollars(limit)} is spent or held by calls in flight")
            raise self._refuse("max_cost_usd")
        return worst

    async def _call_model(self, index: int, request: Request, dialect: str | None = None) -> Response:
        self._emit("call_start", call=index)
        # The wall clock dates the call; a monotonic clock measures it, so a
        # clock step while waiting never makes a negative latency.
        start, began = self._clock.time(), self._clock.monotonic()
        try:
            token = calling_rollout.set(self.trace.id)
            key_token = calling_rollout_key.set(self.trace.info.get("rollout_id") or self.trace.id)
            try:
                with crossing(ProviderError, f"model {self.model.name!r}"):
                    response = await self.model.complete(request)
            finally:
                calling_rollout_key.reset(key_token)
                calling_rollout.reset(token)
        except BaseException as exc:
            # Cancelled calls too: their time was spent waiting for the model.
            self._record_failed_call(index, start, exc, request=request, end=start + self._clock.monotonic() - began,
                                     dialect=dialect)
            condition = getattr(exc, "stop_condition", None)
            if condition:  # e.g. the prompt outgrew the context window: a clean stop
                raise self._refuse(condition) from exc
            raise
        end = start + self._clock.monotonic() - began

        stop_after: str | None = None
        try:
            for hook in self.hooks.response_interceptors:
                new = await rewrite(hook, {**self.values, "response": response}, response)
                if new is not None and new != response:
                    response = new
                    self.trace.record_rewrite(Rewrite(hook=hook.name, boundary="response", call=index))
            for hook in self.hooks.response_stops:
                if await check_stop(hook, {**self.values, "response": response}):
                    stop_after = hook.name
                    break
        except BaseException as exc:
            # The model answered and its tokens were spent: keep the call on record.
            self._record_failed_call(index, start, exc, request=request, end=end, response=response, dialect=dialect)
            raise

        extended = self.trace.record_conversation(request.messages, response.message)
        self.trace.record_call(
            index=index, segment=self._segment(), start=start, end=end, response=response,
            error=None, agent_time=self._agent_time(), continues_prompt=extended, dialect=dialect,
            request_messages=len(request.messages), cost_usd=self._cost(response),
            sampling=self._sampling(request),
        )
        self._emit("call_end", call=index, ok=True)
        self._emit("turn", turn=self.trace.num_turns)
        if stop_after is not None:
            # The reply was sampled and is kept; the exchange ends after it.
            self.stop(stop_after)
        return response

    def _record_failed_call(
        self, index: int, start: float, exc: BaseException, *, request: Request, end: float,
        response: Response | None = None, dialect: str | None = None,
    ) -> None:
        """Record a call that raised; its reply is kept when the model did
        answer, its request when the conversation already holds it (a
        failed call adds nothing to the conversation)."""
        if isinstance(exc, asyncio.CancelledError):
            exc = ProviderError("the model call was cancelled before it answered (agent timeout, abort or close)")
        trace = self.trace
        trace.record_call(
            index=index, segment=self._segment(), start=start, end=end, response=None,
            error=ErrorInfo.from_exception(exc, "agent"), agent_time=self._agent_time(),
            usage=response.usage if response is not None else None, dialect=dialect,
            reply=response.message if response is not None else None,
            request_messages=len(request.messages) if trace.holds_prefix(request.messages) else None,
            # The model answered: its tokens were spent and billed.
            cost_usd=self._cost(response) if response is not None else None,
            sampling=self._sampling(request),
        )
        self._emit("call_end", call=index, ok=False)

    async def rewrite_request(self, request: Request, call: int | None) -> Request:
        """Run the request interceptors over `request`, recording each change
        (L7 for the initial prompt with call=None, L19 for every call)."""
        for hook in self.hooks.request_interceptors:
            new = await rewrite(hook, {**self.values, "request": request}, request)
            if new is not None and new != request:
                request = new
                self.trace.record_rewrite(Rewrite(hook=hook.name, boundary="request", call=call))
        return request
