"""Building a rollkit trace from what another tool recorded.

Every importer turns its source's record into the same few things (OpenAI
shaped messages, what each model call cost and when, scores, phase times,
errors) and hands them to `build`, which lays them out as a `rk.Trace`: the
conversation with its sampled replies, one committed model call per reply
(with the running totals limits and plots read), one segment per user turn,
the phases the source timed, rewards and metrics by their names. What the
source did not have stays missing: a reward it lacks is None with the reason
"not in the source" (`trace.signal_errors`), and `trace.info["missing"]`
lists what else it lacked ("usage", "timings").

Bad records raise `TraceFileError` naming the file, the record ("line 3",
"sample 's1' epoch 2") and the dotted field. This module reads nothing from
disk and imports no peer tool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.messages import (AssistantMessage, Message, Response, SystemMessage, TokenLogprobs, ToolCall, ToolMessage,
                              Usage, UserMessage, split_parts, unvalidated)
import pydantic

from ...core import safe_read
from ...core.sums import sum_in_order
from ...core.outcome import Outcome
from ...core.store import NOT_IN_SOURCE, TraceFileError
from ...core.trace import UNTIMED, ErrorInfo, Segment, Span, TaskRef, Trace, UserTurn, mended_times

__all__ = ["Call", "Where", "build", "converting", "message", "messages", "NOT_IN_SOURCE", "number", "read_json",
           "thinking_text"]



@dataclass(frozen=True)
class Where:
    """A record in a file, for error messages: the file, and "line 3" or
    "sample 's1' epoch 2" (`line` set for JSON lines). `read`: what the
    importer read for this record when that is all the trace is made of (a
    JSON line's bytes, with what beside the file every line draws on): the
    trace's id is digested from it (see `_content_id`)."""

    path: Path
    record: str
    line: int | None = None
    read: bytes | None = None

    def error(self, field_path: str | None, what: str) -> TraceFileError:
        at = f"field {field_path} " if field_path else ""
        return TraceFileError(f"{self.path}: {self.record}: {at}{what}", path=self.path, line=self.line,
                              field=field_path)


@contextlib.contextmanager
def converting(where: Where) -> Iterator[None]:
    """Turn what a hostile record makes the conversion raise (a field of the
    wrong type pydantic refuses, a record nested too deep) into a
    TraceFileError naming the record and field."""
    try:
        yield
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first.get("loc") or ()) or None
        raise where.error(field, f"is refused: {first['msg']}") from None
    except RecursionError:
        raise where.error(None, safe_read.DEEP) from None


@dataclass
class Call:
    """What one model call of the source cost and when (None: not recorded).
    A call with an `error` got no reply (a failed attempt, retried or not):
    it is kept as a failed call and answers none of the replies."""

    usage: Usage | None = None
    start: float | None = None
    end: float | None = None
    finish_reason: str | None = None
    error: ErrorInfo | None = None
    tokens: TokenLogprobs | None = None  # token ids and logprobs, where the source kept them
    cost_usd: float | None = None  # what the source says the call cost, when it says


def read_json(path: Path, where: Where) -> Any:
    """The JSON document at `path`, or a TraceFileError saying why not
    (not UTF-8, cut short, not JSON). A document its sniffer already parsed
    is not parsed again."""
    from .docparse import take_document

    kept = take_document(path)
    if kept is not None:
        return kept
    data = safe_read.read_document(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as bad:
        raise where.error(None, f"is not valid UTF-8 (byte 0x{data[bad.start]:02x} at offset {bad.start})") from None
    try:
        return safe_read.loads(text)
    except safe_read.TooDeep as exc:
        raise where.error(None, str(exc)) from None
    except json.JSONDecodeError as exc:
        # An unterminated string runs to the end of the file by definition.
        cut = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated")
        what = "is cut short (the JSON ends early; a truncated file?)" if cut else f"is not valid JSON ({exc})"
        raise where.error(None, what) from None


def number(value: Any, where: Where, field_path: str) -> float | None:
    """A score or a count as a float; None stays None; anything else names
    the field."""
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number):  # JSON's NaN / Infinity: no score or count means that
            raise where.error(field_path, f"should be a finite number, got {value!r}")
        return number
    raise where.error(field_path, f"should be a number, got {type(value).__name__} {value!r:.60}")


def _content(content: Any, where: Where, field_path: str) -> tuple[str, str | None, list[Any] | None]:
    """(text, reasoning, parts) of a message's content: text as it is, a
    list of content parts read by `split_parts` (reasoning never merged
    into the text, an empty part adding no text)."""
    if content is None:
        return "", None, None
    if isinstance(content, str):
        return content, None, None
    if isinstance(content, list):
        try:
            return split_parts(content)
        except ValueError as bad:
            at, _, what = str(bad).partition(": ")
            raise where.error(f"{field_path}.{at}", what) from None
    raise where.error(field_path, f"should be text or a list of content parts, got {type(content).__name__}")


def thinking_text(blocks: Any) -> str | None:
    """The text of Anthropic's thinking blocks (as LiteLLM passes them on:
    `[{"type": "thinking", "thinking": ..., "signature": ...}]`), one
    paragraph each; None when there is none."""
    if not isinstance(blocks, list):
        return None
    text = "\n\n".join(b["thinking"] for b in blocks if isinstance(b, dict) and isinstance(b.get("thinking"), str)
                       and b["thinking"])
    return text or None


def _tool_call(raw: Any, where: Where, field_path: str, index: int) -> ToolCall:
    if isinstance(raw, str):  # some writers store each call as JSON text
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise where.error(field_path, "is JSON text that does not parse") from None
    if not isinstance(raw, dict):
        raise where.error(field_path, f"should be a tool call (an object), got {type(raw).__name__}")
    function = raw.get("function")
    if isinstance(function, dict):  # OpenAI: {"id", "type": "function", "function": {"name", "arguments"}}
        name, arguments = function.get("name"), function.get("arguments", "{}")
    else:  # inspect-ai {"function": name, "arguments": {...}}, tau2 {"name", "arguments": {...}}
        name, arguments = function if isinstance(function, str) else raw.get("name"), raw.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise where.error(f"{field_path}.function.name", "is missing: a tool call needs the name of its tool")
    if not isinstance(arguments, (str, dict)):
        raise where.error(f"{field_path}.arguments", f"should be an object or JSON text, got {type(arguments).__name__}")
    # Checked above: built without a second validation (ToolCall's own
    # validator writes a dict of arguments as JSON text the same way).
    return unvalidated(ToolCall, id=str(raw.get("id") or f"call_{index}"), name=name,
                       arguments=json.dumps(arguments) if isinstance(arguments, dict) else arguments)


def message(raw: Any, where: Where, field_path: str, unanswered: list[str] | None = None) -> Message | None:
    """One OpenAI-shaped message dict as a rollkit message; None for a role
    rollkit has no message for (mini-swe-agent's "exit" record).

    A tool result names the call it answers by `tool_call_id` (OpenAI), the
    first of `tool_call_ids` (SWE-agent), or not at all (verifiers writes
    none): then it answers the oldest call of the replies before it that no
    result has answered yet (`unanswered`, kept by `messages`), which is the
    order every tool loop runs its calls in."""
    if not isinstance(raw, dict):
        raise where.error(field_path, f"should be a message (an object with a role), got {type(raw).__name__}")
    role = raw.get("role")
    if not isinstance(role, str):
        raise where.error(f"{field_path}.role", "is missing: each message needs a role (system, user, assistant, tool)")
    content, in_parts, parts = _content(raw.get("content"), where, f"{field_path}.content")
    # Each message is built from values checked here, without validating
    # them again (a third of reading a file went to that).
    if role in ("system", "developer"):
        return unvalidated(SystemMessage, role="system", content=content, parts=parts)
    if role == "user":
        return unvalidated(UserMessage, role="user", content=content, parts=parts)
    if role == "assistant":
        calls = raw.get("tool_calls") or []
        if not isinstance(calls, list):
            raise where.error(f"{field_path}.tool_calls", f"should be a list, got {type(calls).__name__}")
        reasoning = raw.get("reasoning_content") or raw.get("reasoning") or in_parts or thinking_text(
            raw.get("thinking_blocks"))
        made = [_tool_call(c, where, f"{field_path}.tool_calls.{i}", i) for i, c in enumerate(calls)]
        if unanswered is not None:
            unanswered.extend(c.id for c in made)
        return unvalidated(AssistantMessage, role="assistant", content=content or None, tool_calls=made,
                           reasoning=reasoning if isinstance(reasoning, str) and reasoning else None, parts=parts)
    if role == "tool":
        call_id = raw.get("tool_call_id") or raw.get("id")
        ids = raw.get("tool_call_ids")
        if not call_id and isinstance(ids, list) and ids:
            call_id = ids[0]
        if not call_id and unanswered:
            call_id = unanswered[0]
        if not call_id:
            raise where.error(f"{field_path}.tool_call_id", "is missing, and no tool call before it is unanswered: "
                                                            "a tool result answers a call")
        if unanswered is not None and str(call_id) in unanswered:
            unanswered.remove(str(call_id))
        name = raw.get("name") or raw.get("function")
        if name is not None and not isinstance(name, str):  # refused by validation, naming the field
            return ToolMessage(tool_call_id=str(call_id), content=content, name=name, parts=parts)
        return unvalidated(ToolMessage, role="tool", tool_call_id=str(call_id), content=content, name=name,
                           parts=parts)
    return None


def messages(raw: Any, where: Where, field_path: str, tool_errors: list[dict[str, Any]] | None = None,
             inferred: list[str] | None = None) -> list[Message]:
    """The messages of a list of OpenAI-shaped dicts. A tool result the
    source flags as failed (`"error": true` or an error object: tau2,
    inspect's ToolCallError) adds `{"tool_call_id", "error"}` to
    `tool_errors` when given (`error` is the source's error object, or
    True). What the source did not say and was guessed (a tool call's id,
    the call a tool result answers) is named in `inferred` when given
    ("messages.3.tool_call_id")."""
    if not isinstance(raw, list):
        raise where.error(field_path, f"should be a list of messages, got {type(raw).__name__}")
    out = []
    unanswered: list[str] = []
    for i, item in enumerate(raw):
        converted = message(item, where, f"{field_path}.{i}", unanswered)
        if converted is not None:
            if inferred is not None:
                inferred.extend(_guessed(item, len(out)))
            out.append(converted)
            if tool_errors is not None and isinstance(converted, ToolMessage) and item.get("error"):
                tool_errors.append({"tool_call_id": converted.tool_call_id, "error": item["error"]})
    return out


def _guessed(raw: dict[str, Any], at: int) -> list[str]:
    """What `message` had to guess for the source message `raw`, which is
    the trace's message `at`."""
    if raw.get("role") == "tool":
        named = raw.get("tool_call_id") or raw.get("id") or raw.get("tool_call_ids")
        return [] if named else [f"messages.{at}.tool_call_id"]
    calls = raw.get("tool_calls") if raw.get("role") == "assistant" else None
    return [f"messages.{at}.tool_calls.{j}.id" for j, c in enumerate(calls or [])
            if not (isinstance(c, str) or (isinstance(c, dict) and c.get("id")))]


def _lay_out(conversation: list[Message], user_by: str,
             context: set[int]) -> tuple[list[Segment], list[UserTurn], list[int]]:
    """The segments and user turns of a conversation, and the segment of
    each reply: a new segment opens at each user message that follows a
    reply (the opening prompt is the task's, not a user turn). Counts are
    kept in plain lists and the records made once at the end (a pydantic
    attribute write per message cost more than the rest of the layout)."""
    counts = [[0, 0]]  # per segment: replies (turns added), user messages
    user_turns: list[UserTurn] = []
    reply_segment: list[int] = []
    last_reply = ""
    replied = False
    opening = False
    for position, msg in enumerate(conversation):
        if position in context:
            continue
        if isinstance(msg, UserMessage) and replied:
            if not opening:  # a user speaking after a reply opens a new segment
                counts.append([0, 0])
                user_turns.append(UserTurn(index=len(user_turns), segment=len(counts) - 1, by=user_by,
                                           replying_to=last_reply))
            opening = True
            user_turns[-1].messages.append(msg)
            counts[-1][1] += 1
            continue
        if isinstance(msg, UserMessage):
            counts[-1][1] += 1
        opening = False
        if isinstance(msg, AssistantMessage):
            replied = True
            last_reply = msg.content or last_reply
            counts[-1][0] += 1
            reply_segment.append(len(counts) - 1)
    segments = []
    before = 0
    for index, (added, users) in enumerate(counts):
        segments.append(Segment(index=index, start=0.0, turns_before=before, turns_added=added, user_messages=users))
        before += added
    return segments, user_turns, reply_segment


def build(
    *, fmt: str, where: Where, conversation: list[Message], calls: list[Call] | None, task: TaskRef,
    agent: dict[str, Any], rewards: dict[str, Any] | None, metrics: dict[str, Any] | None = None,
    phases: dict[str, tuple[float, float | None]] | None = None, errors: list[ErrorInfo] | None = None,
    stop_condition: str | None = None, info: dict[str, Any] | None = None, user_by: str = "user",
    completed: bool = True, weights: dict[str, float] | None = None, inferred: list[str] | None = None,
    context: set[int] | None = None, outcome: Outcome | None = None, cut: tuple[str | None] | None = None,
    trace_id: str | None = None, cost: tuple[float | None, str] | None = None,
) -> Trace:
    """A trace from a source's record (see the module docstring). `calls`
    holds one entry per assistant message, in order, and the failed
    attempts (`Call.error`) where they happened, answering no reply (None:
    the source has no per-call record); `rewards` None means the source has
    no reward. How it ended is the first error, else not `completed`
    (incomplete), else the stop condition, else ok; recorded through the
    trace's one outcome writer. `inferred` names what the importer guessed
    rather than read (kept, sorted, in `info["inferred"]`). `context` holds
    the positions of assistant messages the model was given, not sampled (an
    ATIF step copied into a summary's context): no model call, not a reply.
    `outcome`, when the source kept rollkit's own (`kept_outcome`), is
    recorded as it is instead, with the cut the run also suffered (`cut`,
    the phase it was cut in, as a 1-tuple) when it failed. `trace_id`: the
    id rollkit gave the trace, when the source kept it. `cost`: the source's
    total in dollars and the field it came from (see `_cost_notes`)."""
    context = context or set()
    replies = [i for i, m in enumerate(conversation) if isinstance(m, AssistantMessage) and i not in context]
    if calls is None or sum(c.error is None for c in calls) != len(replies):
        calls = [Call() for _ in replies]
    inferred = list(inferred or [])
    calls, errors = _errors_timed(calls, list(errors or []), phases, inferred)
    phases = dict(phases or {})
    notes = {"format": fmt, "file": str(where.path), **(info or {}), **_missing(calls, replies, phases),
             **({"inferred": sorted(set(inferred))} if inferred else {}), **_cost_notes(calls, cost)}
    if errors and rewards:
        # A failed run has no reward (L23), whatever the source wrote there
        # (verifiers writes 0.0); the source's value is kept in info.
        notes["source_rewards"] = dict(rewards)
    trace = Trace(task=task, agent=agent, info=notes, errors=errors, **({"id": trace_id} if trace_id else {}))
    segments, user_turns, reply_segment = _lay_out(conversation, user_by, context)
    origin = min((s for s, _ in phases.values()), default=None)
    _record_calls(trace, calls, conversation, replies, segments, reply_segment, origin)
    _time_segments(segments, trace, phases, origin)
    trace.record_layout(messages=list(conversation), sampled=replies, segments=segments, user_turns=user_turns)
    _record_signals(trace, rewards, metrics, weights)
    _record_end(trace, phases, stop_condition, cut,
                outcome or _outcome(errors, completed, stop_condition, "scoring" in phases), origin)
    # The id is the record's: a digest of what was read and where in the
    # file it was ("line 3": two equal records stay two traces), so the same
    # file loads as the same traces, wherever it lies and however often.
    return trace if trace_id else trace.model_copy(update={"id": _content_id(trace, where)})


def _record_end(trace: Trace, phases: dict[str, tuple[float, float | None]], stop_condition: str | None,
                cut: tuple[str | None] | None, outcome: Outcome, origin: float | None) -> None:
    """The phases the source timed, its stop condition (kept beside a
    failure too: the source said so), the cut, and how the run ended."""
    for name, (start, end) in phases.items():
        trace.record_span(name, start, end)
    if stop_condition:
        trace.record_stop(stop_condition)
    if cut is not None:
        trace.record_cut(cut[0])
    trace.record_outcome(outcome, at=max((e for _, e in phases.values() if e is not None), default=origin or 0.0))


def _missing(calls: list[Call], replies: list[int], phases: dict[str, Any]) -> dict[str, list[str]]:
    """What the source did not record of its calls ("usage", "timings")."""
    missing = []
    if replies and all(c.usage is None for c in calls):
        missing.append("usage")
    if replies and all(c.start is None for c in calls) and "agent" not in phases:
        missing.append("timings")
    return {"missing": missing} if missing else {}


def _record_signals(trace: Trace, rewards: dict[str, Any] | None, metrics: dict[str, Any] | None,
                    weights: dict[str, float] | None) -> None:
    """The source's metrics, and its rewards unless the run failed (not
    scored: no reward); a reward the source lacks is None, "not in the source"."""
    if not trace.errors:
        rewards = {"reward": None} if rewards is None else rewards
        trace.record_signals(rewards=rewards, signal_errors={name: NOT_IN_SOURCE for name, value in rewards.items()
                                                             if value is None})
    trace.record_signals(metrics=metrics or {}, weights=weights)


def _record_calls(trace: Trace, calls: list[Call], conversation: list[Message], replies: list[int],
                  segments: list[Segment], reply_segment: list[int], origin: float | None) -> None:
    """Each call on the trace: a reply's with its response, a failed
    attempt's with its error, before the reply that followed it."""
    agent_time = 0.0
    answered = 0
    for n, call in enumerate(calls):
        if call.start is None or call.end is None:  # not timed: a call of no length whose latency reads unknown
            at = next((t for t in (call.end, call.start) if t is not None), origin or 0.0)
            start, end, timing_issue = at, at, UNTIMED
        else:
            start, end, timing_issue = mended_times(call.start, call.end)
        agent_time += end - start
        if call.error is not None:  # the request the next reply answers (or the whole conversation)
            position = replies[answered] if answered < len(replies) else len(conversation)
            trace.record_call(
                index=n, segment=reply_segment[min(answered, len(replies) - 1)] if replies else len(segments) - 1,
                start=start, end=end, agent_time=agent_time, response=None, error=call.error, usage=call.usage,
                timing_issue=timing_issue, request_messages=position, cost_usd=call.cost_usd)
            continue
        position = replies[answered]
        trace.record_call(
            index=n, segment=reply_segment[answered], start=start, end=end, agent_time=agent_time,
            response=_response(conversation[position], call),  # type: ignore[arg-type]
            error=None, timing_issue=timing_issue, request_messages=position, cost_usd=call.cost_usd,
        )
        answered += 1


def _content_id(trace: Trace, where: Where) -> str:
    """A digest of what was read and where in the file: the record's own
    bytes when the importer gave them (`where.read`: a JSON line, far
    cheaper to digest than the trace it makes, whose digest is a sizeable
    part of reading a big JSON lines file), else the trace as built (a record inside a document draws
    on the rest of it: tau2's tasks, inspect's log header)."""
    if where.read is not None:
        data = where.read
    else:
        data = trace.model_dump_json(exclude={"id": True, "info": {"file"}}).encode()
    head = f"{trace.info.get('format')}\n{where.record}\n".encode()
    return hashlib.blake2b(head + data, digest_size=6).hexdigest()


def _errors_timed(calls: list[Call], errors: list[ErrorInfo], phases: dict[str, tuple[float, float | None]] | None,
                  inferred: list[str]) -> tuple[list[Call], list[ErrorInfo]]:
    """The errors with the time the source gave them, else (marked
    inferred) the end of the failed call, or of the run for a run's error:
    never the clock at load time, which would make one file read two ways."""
    def untimed(error: ErrorInfo | None) -> bool:
        return error is not None and "time" not in error.model_fields_set

    if any(untimed(c.error) for c in calls):
        inferred.append("model_calls.error.time")
        calls = [dataclasses.replace(c, error=c.error.model_copy(update={"time": _call_time(c)}))
                 if untimed(c.error) else c for c in calls]
    if any(untimed(e) for e in errors):
        inferred.append("errors.time")
        ends = [e for _, e in (phases or {}).values() if e is not None] + [_call_time(c) for c in calls]
        at = max(ends, default=0.0)
        errors = [e.model_copy(update={"time": at}) if untimed(e) else e for e in errors]
    return calls, errors


def _call_time(call: Call) -> float:
    return next((t for t in (call.end, call.start) if t is not None), 0.0)


def _cost_notes(calls: list[Call], cost: tuple[float | None, str] | None) -> dict[str, Any]:
    """Where an imported trace's dollars come from (`info["cost_from"]`,
    the source's field): its calls' own costs when the source priced every
    answered call (their sum is the total, Trace.cost_usd), else the
    source's total (`info["cost_usd"]`, which Trace.cost_usd reads). Never
    rollkit's price table: the source knew what it paid."""
    per_call = [c.cost_usd for c in calls if c.error is None]
    if per_call and all(value is not None for value in per_call):
        return {"cost_from": "the source's cost of each model call"}
    if cost is None or cost[0] is None:
        return {"cost_from": "the source's cost of some model calls; the total is unknown"} if any(
            value is not None for value in per_call) else {}
    return {"cost_usd": float(cost[0]), "cost_from": f"the source's total ({cost[1]})"}


def kept_outcome(trace: Trace) -> dict[str, Any]:
    """What an export keeps of how `trace` ended, for a format with no
    field for it (inspect's sample metadata): read back by `outcome_kept`."""
    return {"rollkit_outcome": dataclasses.asdict(trace.outcome),
            "rollkit_errors": [e.model_dump(mode="json") for e in trace.errors],
            **({"rollkit_cut": {"phase": trace.aborted_in}} if trace.aborted else {})}


def outcome_kept(metadata: Any) -> dict[str, Any]:
    """`build`'s arguments for the outcome `kept_outcome` wrote into
    `metadata` (`outcome`, `errors`, `cut`), or {} when it holds none (a
    file rollkit did not write)."""
    kept = metadata.get("rollkit_outcome") if isinstance(metadata, dict) else None
    if not isinstance(kept, dict):
        return {}
    cut = metadata.get("rollkit_cut")
    return {"outcome": Outcome(**kept), "errors": [ErrorInfo.model_validate(e) for e in metadata.get("rollkit_errors") or []],
            "cut": (cut.get("phase"),) if isinstance(cut, dict) else None}


def _outcome(errors: list[ErrorInfo] | None, completed: bool, stop: str | None, timed_scoring: bool) -> Outcome:
    """How a source's run ended: its first error, else not completed, else
    its stop condition, else ok. Scored by the source (L23) unless it failed
    or never completed (a scoring span the source timed stays)."""
    if errors:
        first = errors[0]
        return Outcome.failed(first.type, first.boundary, message=first.message, phase=first.phase)
    if not completed:
        return Outcome("incomplete", scored=timed_scoring)
    return Outcome.stopped(stop) if stop else Outcome.ok()


def _response(reply: AssistantMessage, call: Call) -> Response:
    """The call's response: its reply, usage and finish reason (validated
    only when the source's finish reason is not text, to refuse it)."""
    finish = call.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    usage = call.usage or unvalidated(Usage, input_tokens=None, output_tokens=None, cache_read_tokens=None,
                                      cache_write_tokens=None, reasoning_tokens=None)
    if not isinstance(finish, str):
        return Response(message=reply, usage=usage, finish_reason=finish, tokens=call.tokens)
    return unvalidated(Response, message=reply, usage=usage, finish_reason=finish, model=None, id=None,
                       tokens=call.tokens)


def _time_segments(segments: list[Segment], trace: Trace, phases: dict[str, tuple[float, float | None]],
                   origin: float | None) -> None:
    """Each segment from its first call's start to its last call's end,
    charged the model time in it."""
    for segment in segments:
        mine = [c for c in trace.model_calls if c.segment == segment.index]
        agent = phases.get("agent")
        if mine:
            segment.start, segment.end = mine[0].start, mine[-1].end
        elif agent is not None:
            segment.start, segment.end = agent[0], agent[1]
        else:
            segment.start = segment.end = origin or 0.0
        segment.charged = sum_in_order(c.end - c.start for c in mine)  # an untimed call charges nothing known
