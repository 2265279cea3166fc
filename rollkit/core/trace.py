"""The trace: everything one rollout did, as data.

A `Trace` is the ledger of one rollout: the conversation (and which messages
the model sampled), every model call with its usage and timing, the rewrites
hooks made, the five phase spans (L2), the segments with the agent time each
was charged, rewards and metrics (seeded, L27), errors typed by boundary (L31),
the stop condition, and whether the run was ok. It round-trips through JSON
losslessly, so saved traces load back identical.

The trace only records; it decides nothing. The rollout and the session write
to it through the few `_record_*` methods below, which keep the running
aggregates that limits read on every turn (L11) in O(1). Nothing here imports
the rest of rollkit except the message vocabulary, the error model and the
plug points (how the notebook layer draws a trace).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from .errors import format_traceback
from .plugins import plugged
from .messages import AssistantMessage, Message, Response, ToolMessage, Usage, text_of

__all__ = ["Trace", "Span", "ModelCall", "Segment", "Rewrite", "ErrorInfo", "TaskRef", "UserTurn", "PHASES"]

PHASES = ("boot", "setup", "agent", "finalize", "scoring")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Span(_Record):
    """A phase's wall-clock start and end (seconds since the epoch)."""

    name: str
    start: float
    end: float | None = None

    @property
    def duration(self) -> float | None:
        return None if self.end is None else self.end - self.start


class ErrorInfo(_Record):
    """A failure as a trace keeps it: typed by the boundary that broke (L31)."""

    type: str
    boundary: str
    message: str
    phase: str | None = None
    status: int | None = None
    traceback: str = ""
    time: float = Field(default_factory=time.time)

    @classmethod
    def from_exception(cls, exc: BaseException, phase: str | None) -> ErrorInfo:
        return cls(
            type=type(exc).__name__,
            boundary=getattr(exc, "boundary", "unknown"),
            message=str(exc),
            phase=phase,
            status=getattr(exc, "status", None),
            traceback=format_traceback(exc),
        )


class ModelCall(_Record):
    """One model call. A committed call is a turn; its `cum_*` fields are the
    budget totals right after it, so budget burn can be drawn exactly."""

    index: int
    segment: int
    start: float
    end: float
    usage: Usage = Field(default_factory=Usage)
    new_input_tokens: int = 0
    finish_reason: str | None = None
    committed: bool = False
    error: ErrorInfo | None = None
    cum_turns: int = 0
    cum_input_tokens: int = 0
    cum_output_tokens: int = 0
    cum_total_tokens: int = 0
    cum_agent_time: float = 0.0
    # The wire format the call came in through the interception server
    # ("chat", "responses", "anthropic", "gemini"); None for a call made in process.
    dialect: str | None = None

    @property
    def latency(self) -> float:
        return self.end - self.start


class Segment(_Record):
    """One run of the harness until it yielded control. `charged` is the agent
    time billed to it; `remaining` the budget left after it (None: no budget)."""

    index: int
    start: float
    end: float | None = None
    turns_before: int = 0
    turns_added: int = 0
    user_messages: int = 0
    charged: float = 0.0
    remaining: float | None = None


class Rewrite(_Record):
    """An interceptor changed a request or a response. `call` is the model
    call's index, or None for the rewrite of the initial prompt (L7)."""

    hook: str
    boundary: str
    call: int | None = None


class TaskRef(_Record):
    """Which task ran: its class (`module` and qualified name `type`, so a
    fork of a saved trace can rebuild it), a stable key and its data."""

    type: str
    key: str
    data: dict[str, Any] = Field(default_factory=dict)
    module: str | None = None

    @classmethod
    def of(cls, task: Any) -> TaskRef:
        kind = type(task)
        return cls(type=kind.__qualname__, key=task.key, data=task.data.model_dump(mode="json"), module=kind.__module__)


class UserTurn(_Record):
    """One time the user spoke: the messages that opened segment `segment`.

    `by` says who spoke (a `rk.User`'s name, "person" for someone typing in a
    notebook, "caller" for code calling `step(...)`), `replying_to` the
    agent's last reply the user saw. A `RecordedUser` replaying a trace sets
    `similarity` (of `replying_to` with the recording's, see
    `rollkit.core.users.similarity`) and `diverged` (below its threshold)."""

    index: int
    segment: int
    by: str = "caller"
    messages: list[Message] = Field(default_factory=list)
    replying_to: str = ""
    similarity: float | None = None
    diverged: bool | None = None


class Trace(_Record):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    task: TaskRef
    agent: dict[str, Any] = Field(default_factory=dict)
    limits: dict[str, int | None] = Field(default_factory=dict)
    timeouts: dict[str, float | None] = Field(default_factory=dict)
    messages: list[Message] = Field(default_factory=list)
    sampled: list[int] = Field(default_factory=list)
    model_calls: list[ModelCall] = Field(default_factory=list)
    request_rewrites: list[Rewrite] = Field(default_factory=list)
    response_rewrites: list[Rewrite] = Field(default_factory=list)
    rewards: dict[str, float | None] = Field(default_factory=dict)
    reward_weights: dict[str, float] = Field(default_factory=dict)
    metrics: dict[str, float | None] = Field(default_factory=dict)
    signal_errors: dict[str, str] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    errors: list[ErrorInfo] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    stop_condition: str | None = None
    ok: bool | None = None
    completed: bool = False
    aborted: bool = False
    # Where an abort (or a cancellation) cut the run: the phase then running
    # ("boot", "setup", "agent", "finalize", "scoring", or "teardown" for the
    # harness session's close), None when it came between segments.
    aborted_in: str | None = None
    phases: dict[str, Span] = Field(default_factory=dict)
    segments: list[Segment] = Field(default_factory=list)
    user_turns: list[UserTurn] = Field(default_factory=list)

    # Running totals over committed turns; derived from model_calls, kept so
    # that the limit check before every call is O(1).
    # No defaults here: pydantic resolves a private default per instance
    # through inspect.signature (90% of loading a trace); model_post_init,
    # which every way of building a trace runs, sets them all.
    _num_turns: int = PrivateAttr()
    _num_input: int = PrivateAttr()
    _num_output: int = PrivateAttr()
    _num_total: int = PrivateAttr()
    # The traces of an AgentUser that played the user in this run (kept in
    # memory only; saved traces link them by info["user_trace_id"]).
    _user_traces: list[Trace] = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self.__pydantic_private__["_user_traces"] = []  # type: ignore[index]
        self._recount()

    def _recount(self) -> None:
        """Running totals from the recorded calls (after loading, or after a
        fork installed a prefix). Written to the private dict directly: this
        runs for every trace loaded, and pydantic's setattr is slow."""
        turns = input_ = output = total = 0
        for call in self.model_calls:
            if call.committed:
                turns, input_, output, total = (
                    call.cum_turns, call.cum_input_tokens, call.cum_output_tokens, call.cum_total_tokens)
        private = self.__pydantic_private__
        private["_num_turns"] = turns  # type: ignore[index]
        private["_num_input"] = input_  # type: ignore[index]
        private["_num_output"] = output  # type: ignore[index]
        private["_num_total"] = total  # type: ignore[index]

    # ---- aggregates (L11 reads these by name) ---------------------------
    @property
    def num_turns(self) -> int:
        return self._num_turns

    @property
    def num_input_tokens(self) -> int:
        """New input fed to the model, each token counted once: a turn adds
        the part of its prompt that the previous turn's sequence did not hold."""
        return self._num_input

    @property
    def num_output_tokens(self) -> int:
        return self._num_output

    @property
    def num_total_tokens(self) -> int:
        """The final sequence length: the last turn's prompt plus its reply."""
        return self._num_total

    @property
    def reward(self) -> float:
        """Weighted sum of the rewards that have a value (L30)."""
        return sum(
            value * self.reward_weights.get(name, 1.0)
            for name, value in self.rewards.items()
            if value is not None
        )

    @property
    def scored(self) -> bool:
        """Whether scoring ran: the rollout opened, closed and did not fail (L23)."""
        return "scoring" in self.phases

    @property
    def scored_reward(self) -> float | None:
        """The reward, or None when the run was not scored or every reward
        came back missing: a missing reward is never a 0 (L23)."""
        if not self.scored or all(v is None for v in self.rewards.values()):
            return None
        return self.reward

    @property
    def user_traces(self) -> list[Trace]:
        """The own traces of a model that played the user in this run
        (`rk.AgentUser`), when it ran in this process."""
        return self._user_traces

    @property
    def failed(self) -> bool:
        return bool(self.errors)

    @property
    def error(self) -> ErrorInfo | None:
        """The failure that ended the run, if any."""
        return self.errors[0] if self.errors else None

    @property
    def turns(self) -> list[ModelCall]:
        return [call for call in self.model_calls if call.committed]

    @property
    def agent_time(self) -> float:
        """Agent time charged across all segments (L9)."""
        return sum(segment.charged for segment in self.segments)

    @property
    def model_time(self) -> float:
        """The part of the agent time spent waiting for the model (L2)."""
        return sum(call.latency for call in self.model_calls)

    @property
    def harness_time(self) -> float:
        """The part of the agent time spent in the harness itself (L2)."""
        return max(0.0, self.agent_time - self.model_time)

    @property
    def last_reply(self) -> str:
        """The text of the last assistant message ("" when there is none)."""
        for message in reversed(self.messages):
            if isinstance(message, AssistantMessage) and message.content:
                return message.content
        return ""

    @property
    def transcript(self) -> str:
        lines = []
        for message in self.messages:
            if isinstance(message, AssistantMessage) and message.tool_calls:
                calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
                text = text_of(message)
                lines.append(f"assistant: {text + ' ' if text else ''}[calls {calls}]")
            elif isinstance(message, ToolMessage):
                lines.append(f"tool[{message.name or message.tool_call_id}]: {message.content}")
            else:
                lines.append(f"{message.role}: {text_of(message)}")
        return "\n".join(lines)

    @property
    def stop(self) -> str | None:
        """What ended the run: the error type, or the stop condition."""
        return self.error.type if self.error else self.stop_condition

    def _repr_html_(self) -> str | None:
        """How a notebook shows a trace: summary, transcript, signals, phases,
        with everything a model or user wrote escaped. Drawn by the notebook
        layer (plugged in at `trace_html`); without it, the plain repr."""
        render = plugged("trace_html")
        return None if render is None else render(self)

    def summary(self) -> str:
        scored = self.scored_reward  # a missing reward is "-", never 0
        reward = f"{scored:.3f}" if scored is not None else "-"
        return (
            f"trace {self.id} task={self.task.key} ok={self.ok} reward={reward} "
            f"turns={self.num_turns} tokens={self.num_total_tokens} stop={self.stop}"
        )

    # ---- recording (called by the rollout and the session only) ---------
    def _open_span(self, name: str, now: float | None = None) -> Span:
        span = self.phases.get(name)
        if span is None:
            span = self.phases[name] = Span(name=name, start=now or time.time())
        return span

    def _close_open_spans(self, now: float) -> None:
        for span in self.phases.values():
            if span.end is None:
                span.end = now

    def _record_call(
        self,
        *,
        index: int,
        segment: int,
        start: float,
        end: float,
        response: Response | None,
        error: ErrorInfo | None,
        agent_time: float,
        usage: Usage | None = None,
        continues_prompt: bool = True,
        dialect: str | None = None,
    ) -> ModelCall:
        """Record one model call; a call with a response is a committed turn.
        `continues_prompt` is False when the prompt did not extend the previous
        sequence (the harness rewrote history): then all of it is new input."""
        call = ModelCall.model_construct(
            index=index,
            segment=segment,
            start=start,
            end=end,
            usage=response.usage if response else (usage or Usage()),
            new_input_tokens=0,
            finish_reason=response.finish_reason if response else None,
            committed=response is not None,
            error=error,
            cum_turns=self._num_turns,
            cum_input_tokens=self._num_input,
            cum_output_tokens=self._num_output,
            cum_total_tokens=self._num_total,
            cum_agent_time=agent_time,
            dialect=dialect,
        )
        if response is not None:
            usage = response.usage
            # Only the part of the prompt the previous sequence did not hold is new.
            if self._num_turns and continues_prompt:
                new_input = max(0, usage.input_tokens - self._num_total)
            else:
                new_input = usage.input_tokens
            self._num_turns += 1
            self._num_input += new_input
            self._num_output += usage.output_tokens
            self._num_total = usage.input_tokens + usage.output_tokens
            call.new_input_tokens = new_input
            call.cum_turns = self._num_turns
            call.cum_input_tokens = self._num_input
            call.cum_output_tokens = self._num_output
            call.cum_total_tokens = self._num_total
        self.model_calls.append(call)
        return call

    def _record_conversation(self, sent: list[Any], reply: AssistantMessage | None) -> bool:
        """Bring the ledger up to what the model saw, then add its reply.

        Harnesses usually extend one list, so the ledger is a prefix of what was
        sent: checked by identity first (O(1)), then message by message,
        identity before equality. A message equal but not identical (a
        program's history parsed by the interception server) takes the place
        of the ledger's: the server reuses what it parsed, so the next call's
        check is by identity and costs no time in the conversation's length. A harness
        that rewrote history replaces the ledger with what the model saw.
        Returns whether what was sent extended the ledger."""
        ledger = self.messages
        n = len(ledger)
        extended = len(sent) >= n and (n == 0 or sent[n - 1] is ledger[n - 1] or _adopt_prefix(sent, ledger))
        if extended:
            ledger.extend(sent[n:])
        else:
            keep = [i for i in self.sampled if i < len(sent) and sent[i] == ledger[i]]
            self.messages = ledger = list(sent)
            self.sampled = keep
        if reply is not None:
            self.sampled.append(len(ledger))
            ledger.append(reply)
        return extended


def _adopt_prefix(sent: list[Any], ledger: list[Any]) -> bool:
    """Whether `ledger` is a prefix of `sent`; each equal message of `sent`
    replaces its twin in the ledger (same value, one object from now on)."""
    for i, (mine, theirs) in enumerate(zip(sent, ledger)):
        if mine is theirs:
            continue
        if mine != theirs:
            return False
        ledger[i] = mine
    return True
