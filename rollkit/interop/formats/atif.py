"""Harbor's Agent Trajectory Interchange Format (ATIF, v1.0 to v1.5), read
and written ("atif").

Written from the format's specification (Harbor's RFC 0001, "Agent
Trajectory Interchange Format"): a JSON object with `schema_version`
("ATIF-v1.4"), `session_id`, `agent` (`name`, `version`, `model_name`),
`steps` and optional `notes`, `final_metrics` and `extra`. A step comes from
the `system` (a system prompt), the `user` or the `agent`: an agent step is
one model call (its `message`, `reasoning_content`, `tool_calls` of
`{tool_call_id, function_name, arguments}`, per-call `metrics` with
`prompt_tokens` including the `cached_tokens` read from the cache,
`completion_tokens`, `cost_usd`, and from v1.3 `prompt_token_ids`,
`completion_token_ids` and `logprobs`, which map onto the call's
`ModelCall.tokens` both ways) and the `observation` that answered it
(`results` of `{source_call_id, content}`).

Read: one trace per file (or per line of a JSON lines file of
trajectories). Each agent step is a reply and its model call (ended at the
step's timestamp, started at the step before it); each observation result a
tool result, or, without a `source_call_id`, a user message (feedback the
environment gave as text). ATIF has no reward: it is missing unless the
file was written by rollkit.

Write (`rk.save(traces, path, format="atif")`): one trajectory per trace (a
JSON file for one trace, JSON lines for several). What ATIF has no field
for (the task, rewards and metrics, errors, the stop condition, phases,
`trace.info`) goes in the root `extra["rollkit"]`, so a rollkit trace comes
back from ATIF with nothing lost that both hold.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...core.messages import (AssistantMessage, SystemMessage, TokenLogprobs, ToolCall, ToolMessage, Usage,
                              UserMessage)
from ...core.outcome import Outcome
from ...core.trace import TaskRef, Trace
from . import docparse
from .census import noted
from ._build import Call, Where, build, number, read_json

__all__ = ["sniff", "read", "write"]

VERSION = "ATIF-v1.4"


def _is_trajectory(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("schema_version"), str)
            and value["schema_version"].startswith("ATIF") and isinstance(value.get("steps"), list))


def sniff(path: Path) -> bool:
    try:
        return _is_trajectory(docparse.document(path))
    except ValueError:  # JSON lines: one trajectory a line
        return _is_trajectory(docparse.first_record(path))


def _seconds(value: Any, where: Where, field_path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise where.error(field_path, f"should be an ISO 8601 time, got {value!r:.40}")


def _count(value: Any, where: Where, field_path: str) -> int | None:
    found = number(value, where, field_path)
    return None if found is None else int(found)


def _usage(metrics: dict[str, Any], where: Where, at: str) -> Usage | None:
    extra = metrics.get("extra") if isinstance(metrics.get("extra"), dict) else {}
    usage = Usage(input_tokens=_count(metrics.get("prompt_tokens"), where, f"{at}.prompt_tokens"),
                  output_tokens=_count(metrics.get("completion_tokens"), where, f"{at}.completion_tokens"),
                  cache_read_tokens=_count(metrics.get("cached_tokens"), where, f"{at}.cached_tokens"),
                  cache_write_tokens=_count(extra.get("cache_creation_input_tokens"), where,
                                            f"{at}.extra.cache_creation_input_tokens"))
    return usage if any(v is not None for v in usage.model_dump().values()) else None


def _tokens(metrics: dict[str, Any], where: Where, at: str) -> TokenLogprobs | None:
    """A step's token ids and logprobs (ATIF v1.3+), None when it has none."""
    values = {}
    for theirs, ours, kind in (("prompt_token_ids", "prompt_ids", int), ("completion_token_ids", "ids", int),
                               ("logprobs", "logprobs", float)):
        value = metrics.get(theirs)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  and (kind is float or float(v).is_integer()) for v in value):
            raise where.error(f"{at}.{theirs}", f"should be a list of {'numbers' if kind is float else 'token ids'}")
        values[ours] = [kind(v) for v in value]
    return TokenLogprobs(**values) if values else None


def _agent_step(step: dict[str, Any], i: int, text: str, stamp: float | None, previous: float | None, where: Where,
                conversation: list[Any], calls: list[Call], costs: list[float], copied: set[int]) -> None:
    """An agent step: its reply, and the model call that made it (none for
    a step copied into a summary's context)."""
    at = f"steps.{i}"
    tool_calls = []
    for j, raw in enumerate(step.get("tool_calls") or []):
        if not isinstance(raw, dict) or not isinstance(raw.get("function_name"), str):
            raise where.error(f"{at}.tool_calls.{j}.function_name", "is missing: a tool call names its function")
        arguments = raw.get("arguments", {})
        tool_calls.append(ToolCall(id=str(raw.get("tool_call_id") or f"call_{i}_{j}"),
                                   name=raw["function_name"],
                                   arguments=arguments if isinstance(arguments, (dict, str)) else {}))
    reasoning = step.get("reasoning_content")
    conversation.append(AssistantMessage(content=text or None, tool_calls=tool_calls,
                                         reasoning=reasoning if isinstance(reasoning, str) and reasoning else None))
    if step.get("is_copied_context") is True or step.get("llm_call_count") == 0:
        # Copied into this context (a summary's input) or said by no model call: not a call here.
        copied.add(len(conversation) - 1)
    else:
        metrics = step.get("metrics") if isinstance(step.get("metrics"), dict) else {}
        if isinstance(metrics.get("cost_usd"), (int, float)):
            costs.append(float(metrics["cost_usd"]))
        extra = step.get("extra") if isinstance(step.get("extra"), dict) else {}
        calls.append(Call(usage=_usage(metrics, where, f"{at}.metrics"),
                          start=extra.get("rollkit_start", previous if stamp is not None else None),
                          end=stamp, finish_reason=extra.get("finish_reason"),
                          tokens=_tokens(metrics, where, f"{at}.metrics"),
                          cost_usd=costs[-1] if isinstance(metrics.get("cost_usd"), (int, float)) else None))


def _observation(step: dict[str, Any], i: int, where: Where, conversation: list[Any],
                 refs: list[dict[str, Any]]) -> None:
    """A step's results: tool messages, or user messages when they answer no
    call; a subagent's trajectory reference kept by the message it is on."""
    at = f"steps.{i}"
    observation = step.get("observation") if isinstance(step.get("observation"), dict) else {}
    for j, result in enumerate(observation.get("results") or []):
        if not isinstance(result, dict):
            raise where.error(f"{at}.observation.results.{j}", "should be a result (an object)")
        content = result.get("content")
        content = content if isinstance(content, str) else ("" if content is None else json.dumps(content))
        ref = result.get("subagent_trajectory_ref")
        if ref:  # the trajectory of a subagent this result came from: kept, by the message it is on
            refs.append({"step_id": step.get("step_id", i + 1), "source_call_id": result.get("source_call_id"),
                         "message": len(conversation) if result.get("source_call_id") or content else None,
                         "subagent_trajectory_ref": ref})
        if result.get("source_call_id"):
            conversation.append(ToolMessage(tool_call_id=str(result["source_call_id"]), content=content))
        elif content or not ref:
            conversation.append(UserMessage(content=content))


def _cost(costs: list[float], final: dict[str, Any], where: Where) -> tuple[dict[str, Any], float | None,
                                                                          dict[str, Any]]:
    """The cost metric (the steps' sum, like the token counts: one source
    for both), the file's own total, and where the two disagree."""
    metrics: dict[str, Any] = {}
    total = number(final.get("total_cost_usd"), where, "final_metrics.total_cost_usd")
    cost = sum(costs) if costs else total
    if cost is not None:
        metrics["cost_usd"] = cost
    disagreements = ({"cost_usd": {"steps": cost, "final_metrics.total_cost_usd": total}}
                     if costs and total is not None and abs(cost - total) > 1e-9 * max(1.0, abs(total)) else {})
    return metrics, total, disagreements


def _trajectory(document: Any, where: Where) -> Trace:
    if not _is_trajectory(document):
        raise where.error("steps", "is missing: an ATIF trajectory holds schema_version 'ATIF-v1.x' and its steps")
    conversation: list[Any] = []
    calls: list[Call] = []
    costs: list[float] = []
    copied: set[int] = set()  # agent steps copied into the context: messages, not model calls
    refs: list[dict[str, Any]] = []
    previous: float | None = None
    for i, step in enumerate(document["steps"]):
        at = f"steps.{i}"
        if not isinstance(step, dict):
            raise where.error(at, f"should be a step (an object), got {type(step).__name__}")
        source, text = step.get("source"), step.get("message")
        if not isinstance(text, str):
            text = "" if text is None else json.dumps(text)
        stamp = _seconds(step.get("timestamp"), where, f"{at}.timestamp")
        if source == "system":
            conversation.append(SystemMessage(content=text))
        elif source == "user":
            conversation.append(UserMessage(content=text))
        elif source == "agent":
            _agent_step(step, i, text, stamp, previous, where, conversation, calls, costs, copied)
        else:
            raise where.error(f"{at}.source", f"should be 'system', 'user' or 'agent', got {source!r:.40}")
        _observation(step, i, where, conversation, refs)
        if stamp is not None:
            previous = stamp
    agent = document.get("agent") if isinstance(document.get("agent"), dict) else {}
    extra = document.get("extra") if isinstance(document.get("extra"), dict) else {}
    ours = extra.get("rollkit") if isinstance(extra.get("rollkit"), dict) else None
    final = document.get("final_metrics") if isinstance(document.get("final_metrics"), dict) else {}
    if ours is not None and isinstance(ours.get("trace"), dict):
        return _rollkit_trace(ours, conversation, where)
    prompt = next((m.content for m in conversation if isinstance(m, UserMessage)), None)
    # The cost is the steps' sum, like the token counts (one source for
    # both); the file's own total is kept in info["final_metrics"], and
    # where the two differ, info["disagreements"] says so.
    metrics, total, disagreements = _cost(costs, final, where)
    stamps = [c.end for c in calls if c.end is not None]
    session = str(document.get("session_id") or where.path.stem)
    return build(
        fmt="atif", where=where, conversation=conversation, calls=calls,
        task=TaskRef(type=f"atif:{agent.get('name') or 'agent'}", key=session, data={"prompt": prompt}),
        agent={"name": agent.get("name"), "model": agent.get("model_name"), "harness": agent.get("name"),
               "version": agent.get("version")},
        rewards=None, metrics=metrics, context=copied, cost=(total, "final_metrics.total_cost_usd"),
        phases={"agent": (min(stamps), max(stamps))} if stamps else {},
        # ATIF says nothing of how the run ended; a reply's start is the step before it.
        inferred=["outcome", *(["model_calls.start"] if stamps else [])],
        info={"session_id": session, "schema_version": document["schema_version"], "example_id": session,
              **({"notes": document["notes"]} if document.get("notes") else {}),
              **({"final_metrics": final} if final else {}),
              **({"subagent_trajectory_refs": refs} if refs else {}),
              **({"disagreements": disagreements} if disagreements else {}), **noted("atif", document)},
    )


def _rollkit_trace(ours: dict[str, Any], conversation: list[Any], where: Where) -> Trace:
    """A trace rollkit wrote to ATIF: `extra["rollkit"]["trace"]` holds the
    whole trace but its messages (which the steps carry, unless the steps
    could not give them back exactly: then they are there too). The outcome
    is written through the trace's one writer, from the stored fields."""
    record = dict(ours["trace"])
    facts = {name: record.pop(name, None) for name in ("ok", "completed", "aborted", "aborted_in")}
    record.setdefault("messages", conversation)
    record["info"] = {**dict(record.get("info") or {}), "format": "atif", "file": str(where.path)}
    trace = Trace.model_validate(record)
    if facts["aborted"]:
        trace.record_cut(facts["aborted_in"])
    trace.record_outcome(Outcome.of_record({**record, **facts}))
    return trace


def read(path: Path, errors: str) -> list[Trace]:
    where = Where(path, "the trajectory")
    try:
        document = read_json(path, where)
    except ValueError as not_one:  # JSON lines: one trajectory a line (a TraceFileError is one too)
        from ._jsonl import each_line

        try:
            first = docparse.first_record(path)
        except ValueError:
            raise not_one from None
        if not _is_trajectory(first):
            raise not_one from None
        return each_line(path, errors, "ATIF trajectory", lambda record, at, _: _trajectory(record, at))
    return [_trajectory(document, where)]


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, timezone.utc).isoformat().replace("+00:00", "Z")


def _metrics(usage: Usage, tokens: TokenLogprobs | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ours, theirs in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens"),
                         ("cache_read_tokens", "cached_tokens")):
        if getattr(usage, ours) is not None:
            out[theirs] = getattr(usage, ours)
    if usage.cache_write_tokens is not None:
        out["extra"] = {"cache_creation_input_tokens": usage.cache_write_tokens}
    for ours, theirs in (("prompt_ids", "prompt_token_ids"), ("ids", "completion_token_ids"), ("logprobs", "logprobs")):
        value = getattr(tokens, ours) if tokens is not None else None
        if value is not None:
            out[theirs] = value
    return out


def _agent_step_of(trace: Trace, message: Any, call: Any) -> dict[str, Any]:
    """A reply as an ATIF agent step, with its call's time, usage, token ids
    and cost where it had a call."""
    step: dict[str, Any] = {"source": "agent", "message": message.content or ""}
    if call is not None:
        step["timestamp"] = _iso(call.end)
    if trace.agent.get("model"):
        step["model_name"] = str(trace.agent["model"])
    if message.reasoning:
        step["reasoning_content"] = message.reasoning
    if message.tool_calls:
        step["tool_calls"] = [{"tool_call_id": c.id, "function_name": c.name, "arguments": c.args()}
                              for c in message.tool_calls]
    if call is not None:
        metrics = _metrics(call.usage, call.tokens)
        if call.cost_usd is not None:  # ATIF's per-call dollars
            metrics["cost_usd"] = call.cost_usd
        if metrics:
            step["metrics"] = metrics
        step["extra"] = {"rollkit_start": call.start, **(
            {"finish_reason": call.finish_reason} if call.finish_reason else {})}
    return step


def _document(trace: Trace) -> dict[str, Any]:
    from ...core import __version__

    committed = [c for c in trace.model_calls if c.committed]
    call_of = dict(zip(trace.sampled, committed))
    steps: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None  # the agent step whose observation collects the tool results

    def add(step: dict[str, Any]) -> dict[str, Any]:
        steps.append({"step_id": len(steps) + 1, **step})
        return steps[-1]

    for position, message in enumerate(trace.messages):
        if isinstance(message, ToolMessage) and pending is not None:
            pending.setdefault("observation", {"results": []})["results"].append(
                {"source_call_id": message.tool_call_id, "content": message.content})
            continue
        if isinstance(message, ToolMessage):  # a result no reply of this trace asked for: kept as user text
            pending = None
            add({"source": "user", "message": message.content})
            continue
        pending = None
        if isinstance(message, SystemMessage):
            add({"source": "system", "message": message.content})
        elif isinstance(message, UserMessage):
            add({"source": "user", "message": message.content})
        else:
            step = _agent_step_of(trace, message, call_of.get(position))
            if position not in call_of:  # given to the model, not sampled (tau2's fixed greeting): no call
                step["llm_call_count"] = 0
            pending = add(step)
    usages = [c.usage for c in committed]
    final: dict[str, Any] = {"total_steps": len(steps)}
    for ours, theirs in (("input_tokens", "total_prompt_tokens"), ("output_tokens", "total_completion_tokens"),
                         ("cache_read_tokens", "total_cached_tokens")):
        counts = [getattr(u, ours) for u in usages if getattr(u, ours) is not None]
        if counts:
            final[theirs] = sum(counts)
    if trace.cost_usd is not None:
        final["total_cost_usd"] = trace.cost_usd
    ours = json.loads(trace.model_dump_json())
    del ours["messages"]
    return {
        "schema_version": VERSION, "session_id": trace.id,
        "agent": {"name": str(trace.agent.get("name") or "rollkit"), "version": __version__,
                  **({"model_name": str(trace.agent["model"])} if trace.agent.get("model") else {})},
        "steps": steps, "final_metrics": final, "extra": {"rollkit": {"trace": ours}},
    }


def _lossless(trace: Trace) -> dict[str, Any]:
    """The trajectory of `trace`, with its messages in `extra` too when its
    steps would not give them back exactly (a message kind or field ATIF
    has no place for)."""
    document = _document(trace)
    back = _trajectory(document, Where(Path("-"), "the trajectory written"))
    if back.messages != trace.messages:
        document["extra"]["rollkit"]["trace"]["messages"] = [m.model_dump(mode="json") for m in trace.messages]
    return document


def write(traces: list[Trace], path: Path) -> Path:
    documents = [_lossless(t) for t in traces]
    with open(path, "w", encoding="utf-8") as f:
        if len(documents) == 1:
            json.dump(documents[0], f, indent=1)
            f.write("\n")
        else:
            for document in documents:
                f.write(json.dumps(document) + "\n")
    return path
