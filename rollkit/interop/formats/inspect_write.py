"""rollkit traces as an inspect-ai eval log (`rk.save(traces, path,
format="inspect")`), written with inspect-ai's own models and writer (the
optional extra `pip install 'rollkit[inspect]'`); and rollkit messages as
inspect's chat messages (`chat_messages`, which rollkit.interop.tasks
hands to inspect's scorers). Reading a log is rollkit.interop.formats.inspect_log.

Write: one sample per trace
with input = the first user message, its messages, a model event per model
call (request, reply, per-call usage) and a tool event per tool call (its
result and error), the error and limit, scores (rewards and the source's
scorers, only for a scored sample; metrics go to the sample's metadata,
never as scores), and the log's aggregate results (each score's mean) and
stats (model usage summed as inspect sums it), in an inspect log that
`inspect view` opens (`.eval` unless the path ends in `.json`). Messages
keep their parts (a reply's reasoning as a reasoning part), failed calls
are model events with their error, and each sample's metadata keeps what
inspect has no field for (the trace id, task type, agent, rollkit's stop
condition and error, the metrics not written as scores), read back when
rollkit reads the log: rollkit -> inspect -> rollkit gives the trace back.

It imports the core, inspect-ai (on first use) and nothing of the reader.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...core.messages import (AssistantMessage, ImagePart, ReasoningPart, SystemMessage, TextPart, ToolMessage, Usage,
                              canonical_parts)
from ...core.trace import Trace
from ._build import kept_outcome
from ._inspect_api import log_api, off_loop
from ...core.dependencies import inspect_ai_event, inspect_ai_log, inspect_ai_model, inspect_ai_scorer, inspect_ai_tool

__all__ = ["write", "chat_messages"]


def _tool_error(error: Any) -> Any:
    """A tool error as recorded in `trace.info["tool_errors"]` as inspect's ToolCallError."""
    if isinstance(error, dict):
        kind = error.get("type")
        return inspect_ai_tool.ToolCallError(type=kind if kind in ("parsing", "timeout", "unicode_decode", "permission",
                                                   "file_not_found", "is_a_directory", "limit", "approval",
                                                   "unknown", "output_limit") else "unknown",
                             message=str(error.get("message", "")))
    return inspect_ai_tool.ToolCallError(type="unknown", message="the tool failed") if error else None


def _part(part: Any) -> Any:
    """A rollkit content part as inspect's."""
    from pydantic import TypeAdapter

    if isinstance(part, TextPart):
        return inspect_ai_model.ContentText(text=part.text)
    if isinstance(part, ReasoningPart):
        return inspect_ai_model.ContentReasoning(reasoning=part.reasoning, summary=part.summary, signature=part.signature,
                                redacted=part.redacted)
    if isinstance(part, ImagePart):
        return inspect_ai_model.ContentImage(image=part.image, detail=part.detail or "auto")  # type: ignore[arg-type]

    try:  # a kind inspect has (audio, video, document, data, tool_use) as inspect reads it
        return TypeAdapter(inspect_ai_model.Content).validate_python({"type": part.type, **part.data})
    except ValueError:  # one it has not: its fields as data (inspect >= 0.3.104), else as text
        from inspect_ai import model

        data = {"type": part.type, **part.data}
        if hasattr(model, "ContentData"):
            return model.ContentData(data=data)
        return inspect_ai_model.ContentText(text=json.dumps(data))


def _content(message: Any) -> Any:
    """A message's content as inspect holds it: its parts, or its reasoning
    and text as parts (`canonical_parts`), or its text."""
    parts = message.parts
    if parts is None and getattr(message, "reasoning", None):
        parts = canonical_parts(message.content, message.reasoning)
    return [_part(p) for p in parts] if parts is not None else (message.content or "")


def chat_messages(messages: list[Any], failed: dict[str, Any] | None = None) -> list[Any]:
    """rollkit messages as inspect-ai's chat messages (`failed`: tool errors by call id)."""
    out: list[Any] = []
    for message in messages:
        content = _content(message)
        if isinstance(message, SystemMessage):
            out.append(inspect_ai_model.ChatMessageSystem(content=content))
        elif isinstance(message, AssistantMessage):
            out.append(inspect_ai_model.ChatMessageAssistant(content=content, tool_calls=[
                inspect_ai_tool.ToolCall(id=c.id, function=c.name, arguments=c.args()) for c in message.tool_calls] or None))
        elif isinstance(message, ToolMessage):
            out.append(inspect_ai_model.ChatMessageTool(content=content, tool_call_id=message.tool_call_id,
                                       function=message.name,
                                       error=_tool_error((failed or {}).get(message.tool_call_id))))
        else:
            out.append(inspect_ai_model.ChatMessageUser(content=content))
    return out


def _failed_tools(trace: Trace) -> dict[str, Any]:
    return {e.get("tool_call_id"): e.get("error") for e in trace.info.get("tool_errors") or [] if isinstance(e, dict)}


def _inspect_usage(usage: Usage) -> Any:
    """rollkit's usage as inspect counts it (input without the cached part);
    None when the call reported none."""
    if not usage.reported:
        return None
    read, written = usage.cache_read_tokens, usage.cache_write_tokens
    uncached = (usage.input_tokens or 0) - (read or 0) - (written or 0)
    return inspect_ai_model.ModelUsage(input_tokens=uncached, output_tokens=usage.output_tokens or 0,
                      total_tokens=(usage.input_tokens or 0) + (usage.output_tokens or 0),
                      input_tokens_cache_read=read, input_tokens_cache_write=written,
                      reasoning_tokens=usage.reasoning_tokens)


def _moment(seconds: float | None) -> Any:
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)


# rollkit's stop conditions as inspect's limit types.
_LIMIT_TYPES = {"max_turns": "message", "max_tokens": "token", "max_input_tokens": "token",
                "max_output_tokens": "token", "timeout": "time", "agent_timeout": "time"}


def _limit(trace: Trace) -> Any:
    stop = trace.stop_condition
    if not stop:
        return None
    kind = stop.removesuffix(" limit") if stop.endswith(" limit") else _LIMIT_TYPES.get(stop)
    if kind not in ("context", "time", "working", "message", "token", "operator", "custom", "cost"):
        return None
    value = trace.info.get("inspect_limit") or trace.limits.get(stop) or 0
    return inspect_ai_log.EvalSampleLimit(type=kind, limit=float(value))


def _events(trace: Trace, model: str) -> list[Any]:
    """A model event per committed call (its request, reply and usage) and a
    tool event per tool call it made (with its result and error)."""
    results = {m.tool_call_id: m for m in trace.messages if isinstance(m, ToolMessage)}
    failed = _failed_tools(trace)
    events: list[Any] = []
    positions = dict(zip((id(c) for c in trace.model_calls if c.committed), trace.sampled))
    for call in trace.model_calls:
        position = positions.get(id(call))
        if position is None:  # a failed attempt (or a reply the history no longer holds): no output
            output = inspect_ai_model.ModelOutput(model=model, choices=[], usage=_inspect_usage(call.usage))
            events.append(inspect_ai_event.ModelEvent(
                model=model, input=chat_messages(trace.request_of(call) or []), tools=[], tool_choice="auto",
                config=inspect_ai_model.GenerateConfig(), output=output, timestamp=_moment(call.start), completed=_moment(call.end),
                error=f"{call.error.type}: {call.error.message}" if call.error is not None else "no reply",
                traceback=(call.error.traceback or None) if call.error is not None else None))
            continue
        reply = trace.messages[position]
        output = inspect_ai_model.ModelOutput.from_message(chat_messages([reply])[0])
        output.model = model
        output.usage = _inspect_usage(call.usage)
        output.time = call.end - call.start
        if call.finish_reason in ("stop", "tool_calls", "max_tokens", "model_length", "content_filter", "unknown"):
            output.choices[0].stop_reason = call.finish_reason  # type: ignore[assignment]
        events.append(inspect_ai_event.ModelEvent(model=model, input=chat_messages(trace.messages[:position]), tools=[], tool_choice="auto",
                                 config=inspect_ai_model.GenerateConfig(), output=output, timestamp=_moment(call.start),
                                 completed=_moment(call.end)))
        for tool_call in reply.tool_calls:  # type: ignore[union-attr]
            result = results.get(tool_call.id)
            error = failed.get(tool_call.id)
            events.append(inspect_ai_event.ToolEvent(
                id=tool_call.id, function=tool_call.name, arguments=tool_call.args(),
                result=result.content if result is not None else "", timestamp=_moment(call.end),
                error=_tool_error(error)))
    return events


def _scores_of(trace: Trace) -> dict[str, Any]:
    """The sample's scores: its rewards and the signals its source scored
    (`trace.info["scorers"]`), only when it was scored; metrics are not scores."""
    if trace.errors or not trace.scored:
        return {}
    scores = {name: inspect_ai_scorer.Score(value=value) for name, value in trace.rewards.items() if value is not None}
    for name in trace.info.get("scorers") or []:
        if trace.metrics.get(name) is not None:
            scores[name] = inspect_ai_scorer.Score(value=trace.metrics[name])
    return scores


def _sample(trace: Trace, epoch: int) -> Any:
    model = str(trace.agent.get("model") or "rollkit")
    usages = [u for c in trace.model_calls if c.committed and (u := _inspect_usage(c.usage)) is not None]
    total = None
    for usage in usages:
        total = usage if total is None else total + usage
    output = inspect_ai_model.ModelOutput.from_content(model=model, content=trace.last_reply)
    output.usage = total
    first_user = next((m.content for m in trace.messages if m.role == "user"), "")
    error = trace.errors[0] if trace.errors else None
    scores = _scores_of(trace)  # the metrics not written as scores go to the metadata
    return inspect_ai_log.EvalSample(
        id=trace.info.get("sample_id") or trace.task.key, epoch=epoch, input=first_user,
        target=str(trace.task.data.get("target") or trace.task.data.get("answer") or ""),
        messages=chat_messages(trace.messages, _failed_tools(trace)), output=output, scores=scores or None,
        model_usage={model: total} if total is not None else {}, events=_events(trace, model),
        metadata={"rollkit_trace_id": trace.id, "rollkit_task_type": trace.task.type, "stop": trace.stop,
                  "rollkit_agent": trace.agent,
                  "rollkit_metrics": {k: v for k, v in trace.metrics.items() if k not in scores},
                  **({"rollkit_stop_condition": trace.stop_condition} if trace.stop_condition else {}),
                  **kept_outcome(trace)},
        error=inspect_ai_log.EvalError(message=f"{error.type}: {error.message}", traceback=error.traceback or "",
                        traceback_ansi=error.traceback or "") if error is not None else None,
        limit=_limit(trace),
        started_at=_moment(trace.phases["agent"].start) if "agent" in trace.phases else None,
        completed_at=_moment(trace.phases["agent"].end) if "agent" in trace.phases else None,
        total_time=trace.agent_time or None, working_time=trace.metrics.get("working_time") or trace.agent_time or None,
    )


def _results(samples: list[Any]) -> Any:
    """inspect's aggregate results: each score's mean over the samples that
    have it (inspect's `mean` metric), and how many completed."""
    names: list[str] = []
    for sample in samples:
        names.extend(n for n in (sample.scores or {}) if n not in names)
    scores = []
    for name in names:
        values = [float(s.scores[name].value) for s in samples if s.scores and name in s.scores
                  and isinstance(s.scores[name].value, (int, float))]
        if values:
            scores.append(inspect_ai_log.EvalScore(name=name, scorer=name, scored_samples=len(values), unscored_samples=len(samples) - len(values),
                                    metrics={"mean": inspect_ai_log.EvalMetric(name="mean", value=sum(values) / len(values))}))
    return inspect_ai_log.EvalResults(total_samples=len(samples), completed_samples=sum(s.error is None for s in samples),
                       scores=scores)


def _inspect_version() -> str:
    from importlib.metadata import version

    return version("inspect-ai")


def write(traces: list[Trace], path: Path) -> Path:
    api = log_api()

    epochs: dict[str, int] = {}
    samples = []
    for trace in traces:
        key = str(trace.info.get("sample_id") or trace.task.key)
        epochs[key] = epochs.get(key, 0) + 1
        samples.append(_sample(trace, epochs[key]))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    tasks = sorted({t.task.type for t in traces}) or ["rollkit"]
    models = sorted({str(t.agent.get("model")) for t in traces if t.agent.get("model")}) or ["rollkit"]
    usage: dict[str, Any] = {}
    for sample in samples:  # inspect's stats: each model's usage summed over the samples
        for model, used in sample.model_usage.items():
            usage[model] = used if model not in usage else usage[model] + used
    # EvalSample keeps its times as ISO text; as text of one zone they sort by time.
    starts = [str(s.started_at) for s in samples if s.started_at]
    ends = [str(s.completed_at) for s in samples if s.completed_at]
    log = inspect_ai_log.EvalLog(
        status="success",
        eval=inspect_ai_log.EvalSpec(created=now, task="+".join(tasks), dataset=inspect_ai_log.EvalDataset(name="rollkit", samples=len(epochs),
                                                                              sample_ids=list(epochs)),
                      model=models[0], config=inspect_ai_log.EvalConfig(epochs=max(epochs.values(), default=1)),
                      # The version whose usage convention the log is written in (read back by `_usage`).
                      packages={"inspect_ai": _inspect_version()}),
        results=_results(samples),
        stats=inspect_ai_log.EvalStats(started_at=min(starts) if starts else now, completed_at=max(ends) if ends else now,
                        model_usage=usage),
        samples=samples,
    )
    off_loop(api.write_eval_log, log, str(path), "json" if path.suffix == ".json" else "eval")
    return path
