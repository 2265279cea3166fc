"""The trace: everything one rollout did, as data.

A `Trace` is the ledger of one rollout: the conversation (and which messages
the model sampled), every model call with its usage and timing, the rewrites
hooks made, the five phase spans (L2), the segments with the agent time each
was charged, rewards and metrics (seeded, L27), errors typed by boundary (L31),
the stop condition, and whether the run was ok. It round-trips through JSON
losslessly, so saved traces load back identical.

The trace only records; it decides nothing. Whoever writes a trace once it
is built (the rollout, the session, the scorers, the runner, the agent
user's conversation, the importers of other tools' records) writes through
its recorder, the `record_*` methods and the span methods below; nothing
else assigns a field of it (tests/test_recorder.py scans the package). How
the run ended is written by one call, `record_outcome`, which keeps the
stored fields (`ok`, `completed`, the abort mark, the stop condition, the
errors, the scoring span) in agreement with `Outcome.of`. The
running aggregates that limits read on every turn (L11) are the totals of
the last committed call, found from the end in O(1). Nothing here imports
the rest of rollkit except the message vocabulary, the error model and the
plug points (how the notebook layer draws a trace).
"""

from __future__ import annotations

import copy
import math
import time
import uuid
import weakref
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import ErrorInfo  # defined with the error model; kept importable from here
from .sums import sum_in_order
from .plugins import plugged
from .prices import dollars
from .messages import (AssistantMessage, Message, Response, TokenLogprobs, ToolMessage, Usage, is_absent, text_of,
                       unvalidated)
from .outcome import Outcome
from . import totals

__all__ = ["Trace", "Span", "ModelCall", "Segment", "Rewrite", "ErrorInfo", "TaskRef", "UserTurn", "PHASES",
           "SCHEMA_VERSION", "BY_TURN", "info_as_of", "mended_times"]

PHASES = ("boot", "setup", "agent", "finalize", "scoring")

# The traces of an AgentUser that played the user in a run, by the id() of
# the trace it played in (memory only; `Trace.record_user_traces`). Kept
# beside the trace rather than in a private attribute: pydantic runs Python
# code per instance for a model with one, a fifth of loading a trace.
_USER_TRACES: dict[int, list[Trace]] = {}

# The version of the trace format this rollkit writes (`Trace.schema_version`).
# 1: traces before the field existed; 2: model calls keep their reply and
# request, usage counts may be None (not reported), cache tokens; 3: messages
# keep their content parts (`parts`), usage its reasoning tokens; 4: model
# calls may keep their token ids and logprobs (`ModelCall.tokens`) and
# keep their dollars (`cost_usd`, `cum_cost_usd`; left out when unknown).
SCHEMA_VERSION = 4

BY_TURN = "by_turn"  # info key: values recorded per turn (Trace.record_turn_info)


def info_as_of(info: dict[str, Any], turn: int) -> dict[str, Any]:
    """The values of `info` recorded per turn (`Trace.record_turn_info`) as
    they stood after turn `turn`, with their history up to then; a value
    first recorded later is absent."""
    kept = {key: [s for s in stamps if s[0] <= turn] for key, stamps in info.get(BY_TURN, {}).items()}
    kept = {key: stamps for key, stamps in kept.items() if stamps}
    if not kept:
        return {}
    return {**{key: copy.deepcopy(stamps[-1][1]) for key, stamps in kept.items()}, BY_TURN: kept}


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


class ModelCall(_Record):
    """One model call: which request it answered, what the model returned,
    what it cost and how long it took. A committed call is a turn; its
    `cum_*` fields are the budget totals right after it, so budget burn can
    be drawn exactly.

    What the model returned:

    - `reply`: the assistant message it answered with (content, tool calls,
      reasoning), as the harness received it (after any response
      interceptor; `Trace.response_rewrites` says which calls one changed).
      None when no answer came back (`error` says why) or the trace was
      written before rollkit kept replies. Kept even when the program later
      rewrites it out of its history (smolagents re-sends each tool call as
      assistant text), so the model's structured tool calls are never lost.
    - `tokens`: the prompt's and the reply's token ids and the reply's
      logprobs, where the endpoint returned them (`TokenLogprobs`; None:
      it returned none, e.g. no `OpenAIModel(logprobs=True)`). They are
      the tokens the model sampled, also when a response interceptor then
      rewrote the reply (`Trace.response_rewrites` says which). On disk a
      call's prompt ids leave out the part that repeats the previous call's
      prompt and reply ids (`TokenLogprobs.prompt_shared`): a rollout does
      not hold its growing prompt once per turn.
    - `finish_reason`, `usage` (None counts: not reported), and the latency
      `end - start` (never negative: `Trace.record_call` refuses it; an
      importer whose source has one mends it with `mended_times`, which
      says why in `timing_issue`).

    Which request it answered, stored compactly (a 500-turn rollout does not
    hold its conversation 500 times): `request_messages` is how many
    messages the request held (None: not recorded), and `request` says where
    they are in the trace's ledger of messages. The ledger is
    `Trace.messages` (the conversation as the model last saw it) plus
    `Trace.replaced_messages` (the messages it was sent earlier that a
    rewrite of the history has since replaced). A reference `r >= 0` names
    `trace.messages[r]`, a reference `r < 0` names
    `trace.replaced_messages[-1 - r]`. `request` is None when the request
    was the first `request_messages` messages of `trace.messages` (every
    call of a program that only appends); otherwise it is a flat list of
    runs `[first, count, first, count, ...]`, each run `count` consecutive
    references from `first` (`first, first + 1, ...` into the messages, or
    `first, first - 1, ...` into the replaced ones). `Trace.request_of(call)`
    rebuilds the request's messages.

    On disk, a committed call with `request` None whose reply is the
    message right after its request (`trace.messages[request_messages]`)
    is written without `reply`; loading a trace puts that message back as
    the call's reply (a reader of the raw JSON does the same)."""

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
    reply: AssistantMessage | None = None
    request_messages: int | None = None
    request: list[int] | None = Field(default=None, exclude_if=is_absent)
    # Why `start`/`end` are not the call's own times, when an importer had
    # to mend them (see `mended_times`); None when they are.
    timing_issue: str | None = Field(default=None, exclude_if=is_absent)
    # Token ids and logprobs of the call, where the endpoint gave them (see above).
    tokens: TokenLogprobs | None = Field(default=None, exclude_if=is_absent)
    # What the call cost in dollars (rollkit.core.prices: the tier and the
    # cache rates applied; an importer's source's own figure), None (NA,
    # never 0) when its model has no price or its usage was not reported;
    # `cum_cost_usd` the rollout's cost up to and with it (None once a turn's
    # cost is unknown: a partial sum would understate it).
    cost_usd: float | None = Field(default=None, exclude_if=is_absent)
    cum_cost_usd: float | None = Field(default=None, exclude_if=is_absent)
    # The sampling parameters the call was sent with (temperature, top_p,
    # max_tokens, seed: `messages.SAMPLING_KEYS`), those set only; None when
    # it set none (the provider's defaults) or the trace predates the field.
    sampling: dict[str, Any] | None = Field(default=None, exclude_if=is_absent)
    # The model that answered as its provider named it, when that is not
    # the model asked for (a dated snapshot of it: gpt-4o-mini-2024-07-18),
    # and the provider's id of the answer; None when it named none.
    response_model: str | None = Field(default=None, exclude_if=is_absent)
    response_id: str | None = Field(default=None, exclude_if=is_absent)

    @property
    def latency(self) -> float:
        """end - start; NaN (unknown, never 0) for an imported call whose
        source did not record when it started or ended (`UNTIMED`)."""
        return math.nan if self.timing_issue == UNTIMED else self.end - self.start


# The timing issue of an imported call its source did not time: its start
# and end are set equal, and its latency reads NaN (NA) everywhere.
UNTIMED = "the source did not record when this call started or ended; its latency is unknown"


def mended_times(start: float, end: float) -> tuple[float, float, str | None]:
    """A source's (start, end) of a model call, made possible: an end before
    the start (a clock bug in the tool that wrote it) becomes a call of no
    length, with the reason to record in `ModelCall.timing_issue`.
    Importers use this; rollkit's own recording refuses such a call."""
    if end < start:
        return start, start, f"the source ends this call {start - end:.3f} s before it starts; latency set to 0"
    return start, end, None


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
    limits: dict[str, int | float | str | None] = Field(default_factory=dict)
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
    # Messages the model was sent that a rewrite of the history has since
    # replaced in `messages`; model calls' requests refer to them (ModelCall).
    replaced_messages: list[Message] = Field(default_factory=list, exclude_if=is_absent)
    # The trace format the line was written in (SCHEMA_VERSION). A file of
    # a newer rollkit loads here with one warning naming the fields this
    # one does not know (rollkit.core.store); the trace then follows this
    # rollkit's format and says so.
    schema_version: int = SCHEMA_VERSION

    def model_post_init(self, context: Any) -> None:
        self._resolve_replies()
        self._expand_prompt_ids()

    def _expand_prompt_ids(self) -> None:
        """Prompt ids written without their shared part (see
        `_shared_prompt_ids`) become whole again."""
        previous: list[int] | None = None
        for call in self.model_calls:
            tokens = call.tokens
            if tokens is None:
                continue
            if tokens.prompt_shared is not None and tokens.prompt_ids is not None and previous is not None:
                whole = previous[:tokens.prompt_shared] + tokens.prompt_ids
                call.tokens = tokens = tokens.model_copy(update={"prompt_ids": whole, "prompt_shared": None})
            previous = _sequence(tokens, previous)

    def _shared_prompt_ids(self) -> Trace:
        """This trace, or a shallow copy of it to write whose calls' prompt
        ids leave out the ids the previous call's prompt and reply already
        hold (`TokenLogprobs.prompt_shared`)."""
        previous: list[int] | None = None
        calls = None
        for i, call in enumerate(self.model_calls):
            tokens = call.tokens
            if tokens is None:
                continue
            shared = _common_prefix(previous, tokens.prompt_ids) if previous and tokens.prompt_ids else 0
            if shared:
                calls = calls or list(self.model_calls)
                compact = tokens.model_copy(update={"prompt_ids": tokens.prompt_ids[shared:], "prompt_shared": shared})
                calls[i] = call.model_copy(update={"tokens": compact})
            previous = _sequence(tokens, previous)
        return self if calls is None else self.model_copy(update={"model_calls": calls})

    def _resolve_replies(self) -> None:
        """A reply written as "the message after its request" (see
        `model_dump_json`) becomes that message again: the same object, so
        a loaded trace holds each reply once."""
        messages = self.messages
        for call in self.model_calls:
            count = call.request_messages
            if (call.reply is None and count is not None and call.committed and call.request is None
                    and count < len(messages) and messages[count].role == "assistant"):
                call.reply = messages[count]

    def model_dump_json(self, **options: Any) -> str:  # type: ignore[override]
        """The trace as JSON. A committed call's reply that is the message
        right after its request in `messages` (every reply of a program that
        only appends) is not written twice: its `reply` is left out, and
        loading puts that message back (`ModelCall` says so). Pass
        `exclude=` to choose what is left out yourself."""
        if "exclude" not in options:
            options["exclude"] = self._replies_shared()
        return super(Trace, self._shared_prompt_ids()).model_dump_json(**options)

    def json_line(self) -> bytes:
        """The trace's line in a JSON lines file: `model_dump_json()`'s text
        in UTF-8 and a newline, serialized straight to bytes (a run with a
        folder writes one per rollout)."""
        written = self._shared_prompt_ids()
        return written.__pydantic_serializer__.to_json(written, exclude=self._replies_shared()) + b"\n"

    def _replies_shared(self) -> dict[str, Any] | None:
        """What `model_dump_json` leaves out by default: the replies that
        are the message right after their request."""
        messages = self.messages
        shared = {}
        for i, call in enumerate(self.model_calls):
            count = call.request_messages
            if (call.reply is not None and count is not None and call.committed and call.request is None
                    and count < len(messages) and messages[count] is call.reply):
                shared[i] = {"reply"}
        return {"model_calls": shared} if shared else None

    # ---- aggregates (L11 reads these by name) ---------------------------
    def _last_turn(self) -> ModelCall | None:
        """The last committed call: its `cum_*` fields are the running
        totals. Found from the end, so O(1) but for failed calls after it."""
        for call in reversed(self.model_calls):
            if call.committed:
                return call
        return None

    @property
    def num_turns(self) -> int:
        last = self._last_turn()
        return 0 if last is None else last.cum_turns

    def _token_totals(self) -> tuple[int | None, int | None, int | None]:
        """(input, output, total) tokens by the one rule (rollkit.core.totals),
        from one pass over the calls: a live run asks at every turn."""
        last = None
        unreported_input = unreported_output = False
        for call in self.model_calls:
            if call.committed:
                last, usage = call, call.usage
                unreported_input = unreported_input or usage.input_tokens is None
                unreported_output = unreported_output or usage.output_tokens is None
        return totals.token_totals(None if last is None else (last.cum_input_tokens, last.cum_output_tokens,
                                                              last.cum_total_tokens),
                                   unreported_input, unreported_output)

    @property
    def num_input_tokens(self) -> int | None:
        """New input fed to the model, each token counted once: a turn adds
        the part of its prompt that the previous turn's sequence did not hold.
        None (NA, never 0) when a turn did not report its input, as in the frames."""
        return self._token_totals()[0]

    @property
    def num_output_tokens(self) -> int | None:
        """The replies' tokens; None when a turn did not report its output."""
        return self._token_totals()[1]

    @property
    def num_total_tokens(self) -> int | None:
        """The final sequence length: the last turn's prompt plus its reply;
        None when a turn did not report its input or output."""
        return self._token_totals()[2]

    @property
    def cost_usd(self) -> float | None:
        """What the rollout cost in dollars: the source's own total when an
        importer recorded one (`info["cost_usd"]`), else its model calls'
        sum; None (NA, never 0) when a turn's price is unknown, 0.0 before
        any call. O(1): the last call carries the running total."""
        calls = self.model_calls
        return totals.cost_total(self.info.get("cost_usd"), calls[-1].cum_cost_usd if calls else None, bool(calls))

    @property
    def cost_by_phase(self) -> dict[str, float | None]:
        """Dollars per phase that started. Model calls go through the
        session, which runs in the agent phase only (segments, L2): the
        agent phase carries the rollout's cost, the others none of it (a
        judge a scorer calls itself is not a call of the trace)."""
        return {name: self.cost_usd if name == "agent" else 0.0 for name in self.phases}

    @property
    def reward(self) -> float:
        """Weighted sum of the rewards that have a value (L30), 0.0 when none
        has one (`scored_reward` says None then)."""
        value = totals.scored_reward(True, self.rewards, self.reward_weights)
        return 0.0 if value is None else value

    @property
    def scored(self) -> bool:
        """Whether scoring ran: the rollout opened, closed and did not fail (L23)."""
        return "scoring" in self.phases

    @property
    def scored_reward(self) -> float | None:
        """The reward, or None when the run was not scored or every reward
        came back missing: a missing reward is never a 0 (L23)."""
        return totals.scored_reward(self.scored, self.rewards, self.reward_weights)

    @property
    def user_traces(self) -> list[Trace]:
        """The own traces of a model that played the user in this run
        (`rk.AgentUser`), when it ran in this process."""
        return _USER_TRACES.get(id(self), [])

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
        return sum_in_order(segment.charged for segment in self.segments)

    @property
    def model_time(self) -> float:
        """The part of the agent time spent waiting for the model (L2)."""
        return sum_in_order(call.latency for call in self.model_calls)

    @property
    def harness_time(self) -> float:
        """The part of the agent time spent in the harness itself (L2)."""
        model = self.model_time
        return math.nan if model != model else max(0.0, self.agent_time - model)

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
    def outcome(self) -> Outcome:
        """How the run ended: ok, stopped, failed, aborted or incomplete, and
        whether it was scored (the one definition, `rollkit.core.outcome`)."""
        return Outcome.of(self)

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
        cost = self.cost_usd  # an unknown price is "-", never $0
        return (
            f"trace {self.id} task={self.task.key} ok={self.ok} reward={reward} "
            f"turns={self.num_turns} tokens={self.num_total_tokens} cost={dollars(cost)} stop={self.stop}"
        )

    # ---- the recorder: what the rollout, the session, the runner, the
    # conversation with a user, the importers and the exports write through;
    # nothing else assigns a field of a trace once it is built
    # (tests/test_recorder.py scans the package for it) ---------------------
    def record_outcome(self, outcome: Outcome, at: float | None = None) -> None:
        """How the run ended, written in one place: `ok`, `completed`, the
        abort mark, the stop condition, a first error and the scoring span
        are set so that `Outcome.of(self)` reads `outcome` back.

        - ok / stopped: no error, no abort mark; the stop condition is the
          outcome's reason (None for ok).
        - failed: the errors recorded stay (a first one is added from the
          outcome when there is none); a cut the run also suffered
          (`record_cut`) and a stop it had reached stay as facts.
        - aborted: marked aborted in the outcome's phase; not completed.
        - incomplete: not completed.

        `ok` is true for ok and stopped only; `completed` for every kind
        but aborted and incomplete. A scored outcome gets a scoring span
        (at `at`, or of no length at the end of the last phase: the source
        did not time it) when there is none; an unscored one has none."""
        kind = outcome.kind
        if kind == "failed":
            if not self.errors:
                self.errors.append(ErrorInfo(type=outcome.error_type or "Error", boundary=outcome.boundary or "unknown",
                                             message=outcome.message or "", phase=outcome.phase))
        else:
            self.errors.clear()
            self.aborted = kind == "aborted"
            self.aborted_in = outcome.phase if kind == "aborted" else None
        if kind in ("ok", "stopped"):
            self.stop_condition = outcome.reason
        self.completed = kind not in ("incomplete", "aborted")
        if not outcome.scored:
            self.phases.pop("scoring", None)
        elif "scoring" not in self.phases:
            when = at if at is not None else max(
                (span.end if span.end is not None else span.start for span in self.phases.values()), default=0.0)
            self.phases["scoring"] = Span(name="scoring", start=when, end=when)
        self.ok = kind in ("ok", "stopped")

    def record_error(self, error: ErrorInfo) -> None:
        """A failure found while the run goes on (L31); the first one is
        the one that ended it. The outcome is written at the end."""
        self.errors.append(error)

    def record_cut(self, phase: str | None) -> None:
        """The run was cut short by an abort or a cancellation, in `phase`
        (None: between segments); the first cut's phase is kept."""
        self.aborted = True
        if self.aborted_in is None:
            self.aborted_in = phase

    def record_stop(self, condition: str) -> None:
        """A limit, a `@stop` or a user ended the exchange cleanly (L13)."""
        self.stop_condition = condition

    def record_warning(self, message: str) -> None:
        self.warnings.append(message)

    def record_info(self, values: dict[str, Any] | None = None, /, **more: Any) -> None:
        """Add to `info` (what the run or its source said besides the rest)."""
        self.info.update(values or {}, **more)

    def record_turn_info(self, values: dict[str, Any]) -> None:
        """Add to `info` values that change as the rollout goes (a toolset's
        state, which stop fired) and that a fork or a replay takes as they
        stood after its turn: each is also kept in `info[BY_TURN]`, stamped
        with the turns committed now (see `info_as_of`). The history is
        replaced, not changed in place: forks of one prefix share it."""
        turn = self.num_turns
        history = dict(self.info.get(BY_TURN, {}))
        for key, value in values.items():
            kept = [stamp for stamp in history.get(key, []) if stamp[0] < turn]
            history[key] = [*kept, [turn, copy.deepcopy(value)]]
        self.info.update(values)
        self.info[BY_TURN] = history

    def forget_info(self, *keys: str) -> None:
        """Drop keys of `info` (a note kept only while a report is built)."""
        for key in keys:
            self.info.pop(key, None)

    def record_messages(self, messages: list[Message]) -> None:
        """Messages a segment starts on (the prompt, a user's turn)."""
        self.messages.extend(messages)

    def record_segment(self, segment: Segment) -> None:
        self.segments.append(segment)

    def record_segment_end(self, index: int, *, end: float, charged: float, remaining: float | None) -> Segment:
        """Segment `index` yielded at `end` after `charged` seconds of agent
        time, with `remaining` left (None: no budget); the turns it added are
        counted here, from the trace, so no caller can get them wrong."""
        segment = self.segments[index]
        segment.end, segment.charged, segment.remaining = end, charged, remaining
        segment.turns_added = self.num_turns - segment.turns_before
        return segment

    def record_user_turn(self, turn: UserTurn) -> None:
        self.user_turns.append(turn)

    def record_user_turn_similarity(self, index: int, similarity: float, diverged: bool | None) -> None:
        """How close the agent's reply that user turn `index` answered came
        to the recording's (a `RecordedUser`'s replay), and whether it diverged."""
        turn = self.user_turns[index]
        turn.similarity, turn.diverged = similarity, diverged

    def record_rewrite(self, rewrite: Rewrite) -> None:
        """An interceptor changed a request or a response (by `rewrite.boundary`)."""
        (self.request_rewrites if rewrite.boundary == "request" else self.response_rewrites).append(rewrite)

    def record_signal(self, kind: str, name: str, value: float | None, weight: float | None = None) -> None:
        """A reward (`kind` "reward", with its `weight`) or a metric; None
        seeds it as missing (L27)."""
        (self.rewards if kind == "reward" else self.metrics)[name] = value
        if kind == "reward" and weight is not None:
            self.reward_weights[name] = weight

    def drop_signal(self, kind: str, name: str) -> None:
        """Unseed a signal whose function returned a mapping of other names (L28)."""
        (self.rewards if kind == "reward" else self.metrics).pop(name, None)
        if kind == "reward":
            self.reward_weights.pop(name, None)

    def record_signal_error(self, name: str, why: str) -> None:
        """Why signal `name` has no value (see `MissingSignal.of_error`)."""
        self.signal_errors[name] = why

    def record_signals(self, *, rewards: dict[str, float | None] | None = None,
                       weights: dict[str, float] | None = None, metrics: dict[str, float | None] | None = None,
                       signal_errors: dict[str, str] | None = None) -> None:
        """An importer's signals, each given mapping replacing the trace's."""
        if rewards is not None:
            self.rewards = dict(rewards)
        if weights is not None:
            self.reward_weights = dict(weights)
        if metrics is not None:
            self.metrics = dict(metrics)
        if signal_errors is not None:
            self.signal_errors = dict(signal_errors)

    def record_layout(self, *, messages: list[Message], sampled: list[int], segments: list[Segment],
                      user_turns: list[UserTurn]) -> None:
        """An importer's conversation, which replies the model sampled, and
        its segments and user turns (rollkit messages already: not
        validated again)."""
        self.__dict__["messages"] = messages
        self.__pydantic_fields_set__.add("messages")
        self.sampled = sampled
        self.segments = segments
        self.user_turns = user_turns

    def record_span(self, name: str, start: float, end: float | None) -> None:
        """A phase the source timed (importers)."""
        self.phases[name] = Span(name=name, start=start, end=end)

    def record_prefix(self, prefix: Any) -> None:
        """Start from where a forked rollout stood (`rollkit.core.prefix.
        Prefix`): its record up to the turn, and where it came from."""
        self.messages = prefix.messages
        self.sampled = prefix.sampled
        self.model_calls = prefix.model_calls
        self.request_rewrites = prefix.request_rewrites
        self.response_rewrites = prefix.response_rewrites
        self.segments = prefix.segments
        self.user_turns = prefix.user_turns
        self.info.update(prefix.info)
        self.info["forked_from"] = [prefix.source, prefix.turn]

    def record_user_traces(self, traces: list[Trace]) -> None:
        """Keep the own traces of the model that played the user (in memory
        only, see `user_traces`): not a field, so a trace equals its saved
        copy, which links them by info["user_trace_id"]."""
        key = id(self)
        if key not in _USER_TRACES and traces:
            weakref.finalize(self, _USER_TRACES.pop, key, None)
        if traces:
            _USER_TRACES[key] = list(traces)
        else:
            _USER_TRACES.pop(key, None)

    def open_span(self, name: str, now: float | None = None, *, reopen: bool = False) -> Span:
        """The span of phase `name`, opened at `now` if it is not yet (with
        `reopen`, an ended one runs on: the agent phase spans segments)."""
        span = self.phases.get(name)
        if span is None:
            span = self.phases[name] = Span(name=name, start=now or time.time())
        elif reopen:
            span.end = None
        return span

    def close_span(self, name: str, now: float) -> bool:
        """End phase `name`'s span at `now` if it is open; whether it was."""
        span = self.phases.get(name)
        if span is None or span.end is not None:
            return False
        span.end = now
        return True

    def close_open_spans(self, now: float) -> None:
        """End every span still open at `now` (a close or an abort)."""
        for span in self.phases.values():
            if span.end is None:
                span.end = now

    def record_call(
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
        reply: AssistantMessage | None = None,
        request_messages: int | None = None,
        timing_issue: str | None = None,
        cost_usd: float | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> ModelCall:
        """Record one model call; a call with a response is a committed turn.
        `continues_prompt` is False when the prompt did not extend the previous
        sequence (the harness rewrote history): then all of it is new input.
        `request_messages` is how many messages of `self.messages` the request
        was (the first ones; None: not on the trace); `reply` the answer of a
        call that failed after the model answered; `cost_usd` its price
        (rollkit.core.prices); `sampling` its sampling parameters as sent. A
        call ending before it starts is refused (a clock bug)."""
        if end < start:
            raise ValueError(f"model call {index} ends before it starts ({end} < {start}): "
                             "a latency is never negative; take both times from one clock")
        last = self._last_turn()
        call = unvalidated(
            ModelCall,
            index=index, segment=segment, start=start, end=end,
            usage=response.usage if response else (usage or Usage()),
            new_input_tokens=0,
            finish_reason=response.finish_reason if response else None,
            committed=response is not None,
            error=error,
            cum_turns=last.cum_turns if last else 0,
            cum_input_tokens=last.cum_input_tokens if last else 0,
            cum_output_tokens=last.cum_output_tokens if last else 0,
            cum_total_tokens=last.cum_total_tokens if last else 0,
            cum_agent_time=agent_time,
            dialect=dialect,
            reply=response.message if response is not None else reply,
            request_messages=request_messages,
            request=None,
            timing_issue=timing_issue,
            tokens=response.tokens if response is not None else None,
            cost_usd=cost_usd,
            cum_cost_usd=self._cost_after(cost_usd, committed=response is not None), sampling=sampling,
            response_model=self._answering_model(response), response_id=None if response is None else response.id,
        )
        if response is not None:
            _count_turn(call, response.usage, continues_prompt)
        self.model_calls.append(call)
        return call

    def _answering_model(self, response: Response | None) -> str | None:
        """The model a response names, when it is not the one asked for (the agent's)."""
        if response is None or response.model == self.agent.get("model"):
            return None
        return response.model

    def _cost_after(self, cost: float | None, *, committed: bool) -> float | None:
        """The running cost with one more call: a turn of unknown price makes
        it unknown from then on; a failed call adds what is known of it."""
        before = self.model_calls[-1].cum_cost_usd if self.model_calls else 0.0
        if before is None or (cost is None and committed):
            return None
        return before + (cost or 0.0)

    def request_of(self, call: ModelCall) -> list[Message] | None:
        """The messages the request of `call` (one of this trace's model
        calls) held, rebuilt from the ledger; None when it was not recorded."""
        count = call.request_messages
        if count is None:
            return None
        if call.request is None:
            return self.messages[:count]
        messages, replaced = self.messages, self.replaced_messages
        out: list[Message] = []
        runs = call.request
        for k in range(0, len(runs), 2):
            first, n = runs[k], runs[k + 1]
            if first >= 0:
                out.extend(messages[first:first + n])
            else:
                out.extend(replaced[-1 - first:-1 - first + n])
        return out

    def holds_prefix(self, sent: list[Any]) -> bool:
        """Whether `sent` is the first messages of the conversation (a
        failed call's request, recorded only when the trace holds it)."""
        ledger = self.messages
        n = len(sent)
        return n <= len(ledger) and (n == 0 or sent[n - 1] is ledger[n - 1] or sent == ledger[:n])

    def record_conversation(self, sent: list[Any], reply: AssistantMessage | None) -> bool:
        """Bring the ledger up to what the model saw, then add its reply.

        Harnesses usually extend one list, so the ledger is a prefix of what was
        sent: checked by identity first (O(1)), then message by message,
        identity before equality. A message equal but not identical (a
        program's history parsed by the interception server) takes the place
        of the ledger's: the server reuses what it parsed, so the next call's
        check is by identity and costs no time in the conversation's length.
        A harness that rewrote history replaces the ledger with what the model
        saw; the messages it dropped move to `replaced_messages` and the
        requests of earlier calls are re-pointed (see ModelCall). Returns
        whether what was sent extended the ledger."""
        ledger = self.messages
        n = len(ledger)
        extended = len(sent) >= n and (n == 0 or sent[n - 1] is ledger[n - 1] or _adopt_prefix(sent, ledger))
        if extended:
            ledger.extend(sent[n:])
        else:
            keep = [i for i in self.sampled if i < len(sent) and sent[i] == ledger[i]]
            new = list(sent)
            self._repoint_requests(ledger, new)
            self.messages = ledger = new
            self.sampled = keep
        if reply is not None:
            self.sampled.append(len(ledger))
            ledger.append(reply)
        return extended

    def _repoint_requests(self, old: list[Any], new: list[Any]) -> None:
        """The history is being rewritten from `old` to `new`: re-point every
        recorded request that refers to a message of `old` that is not at the
        same place in `new`, moving such messages to `replaced_messages`."""
        same = 0  # messages before this one keep their place
        limit = min(len(old), len(new))
        while same < limit and (new[same] is old[same] or new[same] == old[same]):
            same += 1
        if same == len(old):
            return
        where_new = {id(message): j for j, message in enumerate(new)}
        moved: dict[int, int] = {}
        replaced = self.replaced_messages

        def ref(i: int) -> int:
            if i < same:
                return i
            r = moved.get(i)
            if r is None:
                message = old[i]
                j = where_new.get(id(message))
                if j is None and i < len(new) and new[i] == message:
                    j = i
                if j is None:
                    replaced.append(message)
                    j = -len(replaced)
                r = moved[i] = j
            return r

        for call in self.model_calls:
            count = call.request_messages
            if count is None:
                continue
            if call.request is None:
                if count <= same:
                    continue
                refs = [ref(i) for i in range(count)]
            else:
                runs = call.request
                if all(runs[k] < 0 or runs[k] + runs[k + 1] <= same for k in range(0, len(runs), 2)):
                    continue
                refs = []
                for k in range(0, len(runs), 2):
                    first, n = runs[k], runs[k + 1]
                    refs.extend(ref(first + d) if first >= 0 else first - d for d in range(n))
            call.request = _runs(refs)


def _sequence(tokens: TokenLogprobs, previous: list[int] | None) -> list[int] | None:
    """The token sequence a call's prompt and reply make (what the next
    call's prompt may repeat); the previous one when this call lacks either."""
    if tokens.prompt_ids is None or tokens.ids is None:
        return previous
    return tokens.prompt_ids + tokens.ids


def _common_prefix(a: list[int], b: list[int]) -> int:
    """How many first items `a` and `b` share (list comparisons run in C;
    a shared prefix is found by halving, as equality of prefixes is monotone)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


def _count_turn(call: ModelCall, usage: Usage, continues_prompt: bool) -> None:
    """Make `call` (which holds the totals before it) a committed turn: add
    it to the running totals (a count not reported adds nothing)."""
    prompt = usage.input_tokens or 0
    # Only the part of the prompt the previous sequence did not hold is new.
    new_input = max(0, prompt - call.cum_total_tokens) if call.cum_turns and continues_prompt else prompt
    call.new_input_tokens = new_input
    call.cum_turns += 1
    call.cum_input_tokens += new_input
    call.cum_output_tokens += usage.output_tokens or 0
    call.cum_total_tokens = prompt + (usage.output_tokens or 0)


def _runs(refs: list[int]) -> list[int]:
    """References as runs [first, count, ...] (see ModelCall.request)."""
    out: list[int] = []
    for r in refs:
        if out:
            first, n = out[-2], out[-1]
            step = 1 if first >= 0 else -1
            if (r >= 0) == (first >= 0) and r == first + step * n:
                out[-1] = n + 1
                continue
        out.extend((r, 1))
    return out


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
