"""inspect-ai eval logs (`.eval` and `.json`), read and written with
inspect-ai's own log reader and writer (the optional extra
`pip install 'rollkit[inspect]'`).

Read: one trace per sample and epoch. Messages with tool calls and results
come from the sample's messages; one model call per assistant reply from
its model events (usage, start and end); phases from its spans (`init` is
setup, `solvers` the agent, `scorers` scoring); each score is a reward by
its scorer's name (inspect's "C"/"I"/"P" read as 1, 0, 0.5, a dict of values
as one reward per key); a sample error is an error of the harness, a limit
the stop condition. `trace.info` keeps the file, sample id, epoch, the
eval's task and run id, and `example_id` / `repeat` / `rollout_id` as a
rollkit batch writes them. The task cannot be rebuilt in rollkit (its
scorer lives in inspect), so a fork needs `task=`.

Write (`rk.save(traces, path, format="inspect")`): one sample per trace,
its messages, output, usage and rewards as scores, in an inspect log that
`inspect view` opens (`.eval` unless the path ends in `.json`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...core.messages import AssistantMessage, SystemMessage, ToolMessage, Usage
from ...core.trace import ErrorInfo, TaskRef, Trace
from ...core import _safe_read
from ._build import Call, Where, build, messages as to_messages, number
from .messages import to_openai

__all__ = ["sniff", "read", "write"]

EXTRA = "pip install 'rollkit[inspect]' (inspect-ai)"
_JSON_HEAD = re.compile(rb'\s*\{\s*"version"\s*:\s*\d+\s*,\s*"status"\s*:')


def sniff(head: bytes) -> bool:
    if head.startswith(b"PK\x03\x04"):  # a zip: inspect's .eval holds header.json, samples/, _journal/
        return b"_journal/" in head or b"header.json" in head or b"samples/" in head
    return _JSON_HEAD.match(head) is not None


def _inspect() -> Any:
    try:
        from inspect_ai import log
    except ImportError:
        raise ModuleNotFoundError(f"reading or writing inspect-ai logs needs inspect-ai: {EXTRA}") from None
    return log


def _off_loop(fn: Any, *args: Any) -> Any:
    """Call inspect's sync reader or writer outside any running event loop.

    Inside one (a notebook cell, an async test) inspect runs its coroutine
    through nest-asyncio, which patches asyncio for the whole process; a
    worker thread has no loop, so inspect uses plain asyncio.run there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollkit-inspect") as pool:
        return pool.submit(fn, *args).result()


def _seconds(moment: Any) -> float | None:
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.timestamp()


def _phases(events: list[Any]) -> dict[str, tuple[float, float | None]]:
    """init/solvers/scorers spans as setup/agent/scoring."""
    names = {"init": "setup", "solvers": "agent", "scorers": "scoring"}
    open_spans: dict[str, tuple[str, float]] = {}
    phases: dict[str, tuple[float, float | None]] = {}
    for event in events:
        kind = getattr(event, "event", None)
        if kind == "span_begin" and getattr(event, "type", None) in names:
            open_spans[event.id] = (names[event.type], _seconds(event.timestamp))  # type: ignore[assignment]
        elif kind == "span_end" and getattr(event, "id", None) in open_spans:
            phase, start = open_spans.pop(event.id)
            phases[phase] = (start, _seconds(event.timestamp))
    return phases


def _calls(events: list[Any]) -> list[Call]:
    calls = []
    for event in events:
        if getattr(event, "event", None) != "model":
            continue
        usage = getattr(event.output, "usage", None)
        start = _seconds(event.timestamp)
        end = _seconds(getattr(event, "completed", None))
        if end is None and start is not None and getattr(event.output, "time", None) is not None:
            end = start + event.output.time
        choice = event.output.choices[0] if event.output.choices else None
        calls.append(Call(
            usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens) if usage else None,
            start=start, end=end, finish_reason=getattr(choice, "stop_reason", None),
        ))
    return calls


def _scores(scores: dict[str, Any] | None, where: Where) -> dict[str, float | None] | None:
    if not scores:
        return None
    from inspect_ai.scorer import value_to_float

    as_float = value_to_float()  # inspect's own reading of "C", "I", "P", "N" and numbers
    out: dict[str, float | None] = {}
    for name, score in scores.items():
        if name.startswith("metric."):  # a rollkit metric, written as a score by `write` below
            continue
        value = score.value
        if isinstance(value, dict):
            for key, item in value.items():
                out[f"{name}.{key}"] = _score(item, as_float, where, f"scores.{name}.value.{key}")
        else:
            out[name] = _score(value, as_float, where, f"scores.{name}.value")
    return out


def _score(value: Any, as_float: Any, where: Where, field_path: str) -> float | None:
    if value is None or isinstance(value, (bool, int, float)):
        return number(value, where, field_path)
    if isinstance(value, str):
        return float(as_float(value))
    raise where.error(field_path, f"is a {type(value).__name__}, not a score rollkit can read as a number")


def _error(sample: Any) -> list[ErrorInfo]:
    if sample.error is None:
        return []
    last = (sample.error.traceback or "").strip().splitlines()[-1:] or [""]
    kind = last[0].split(":", 1)[0].rsplit(".", 1)[-1] if ":" in last[0] else "EvalError"
    return [ErrorInfo(type=kind or "EvalError", boundary="harness", message=sample.error.message, phase="agent",
                      traceback=sample.error.traceback or "")]


def _trace(log: Any, sample: Any, path: Path) -> Trace:
    from inspect_ai.scorer import value_to_float

    where = Where(path, f"sample {sample.id!r} epoch {sample.epoch}")
    raw = [m.model_dump(mode="json") for m in sample.messages]
    conversation = to_messages(raw, where, "messages")
    prompt = sample.input if isinstance(sample.input, str) else next(
        (m.content for m in conversation if m.role == "user"), None)
    limit = getattr(sample, "limit", None)
    phases = _phases(sample.events or [])
    if "agent" not in phases and sample.started_at:
        phases["agent"] = (_seconds(sample.started_at), _seconds(sample.completed_at))  # type: ignore[assignment]
    return build(
        fmt="inspect", where=where, conversation=conversation, calls=_calls(sample.events or []),
        task=TaskRef(type=f"inspect:{log.eval.task}", key=str(sample.id),
                     data={"prompt": prompt, "target": sample.target}),
        agent={"name": log.eval.solver or "inspect", "model": log.eval.model, "harness": "inspect-ai"},
        rewards=_scores(sample.scores, where), errors=_error(sample), phases=phases,
        stop_condition=f"{limit.type} limit" if limit is not None else None,
        metrics={**({"working_time": sample.working_time} if sample.working_time is not None else {}),
                 **{name.removeprefix("metric."): _score(score.value, value_to_float(), where, f"scores.{name}.value")
                    for name, score in (sample.scores or {}).items() if name.startswith("metric.")}},
        info={"sample_id": sample.id, "epoch": sample.epoch, "eval_task": log.eval.task, "run_id": log.eval.run_id,
              "example_id": str(sample.id), "repeat": sample.epoch - 1, "rollout_id": f"{sample.id}#{sample.epoch - 1}"},
    )


def read(path: Path, errors: str) -> list[Trace]:
    from ...core.store import TraceFileError

    log_api = _inspect()
    with open(path, "rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    if zipped:
        _safe_read.check_zip(path)  # member and total decompressed sizes bounded before inspect inflates any
    else:
        _safe_read.check_document(path)  # inspect reads the whole JSON log at once
    try:
        log = _off_loop(log_api.read_eval_log, str(path))
    except Exception as exc:  # inspect's reader: a damaged zip, a cut file, a field of the wrong type
        field = None
        if hasattr(exc, "errors"):  # a pydantic ValidationError names the field
            try:
                field = ".".join(str(p) for p in exc.errors()[0]["loc"]) or None
            except Exception:
                field = None
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        at = f" (field {field})" if field else ""
        raise TraceFileError(f"{path}: inspect-ai cannot read this log{at}: {type(exc).__name__}: {detail}",
                             path=path, field=field) from None
    return [_trace(log, sample, path) for sample in (log.samples or [])]


def _chat(trace: Trace) -> list[Any]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall

    out: list[Any] = []
    for message in trace.messages:
        if isinstance(message, SystemMessage):
            out.append(ChatMessageSystem(content=message.content))
        elif isinstance(message, AssistantMessage):
            out.append(ChatMessageAssistant(content=message.content or "", tool_calls=[
                ToolCall(id=c.id, function=c.name, arguments=c.args()) for c in message.tool_calls] or None))
        elif isinstance(message, ToolMessage):
            out.append(ChatMessageTool(content=message.content, tool_call_id=message.tool_call_id,
                                       function=message.name))
        else:
            out.append(ChatMessageUser(content=message.content))
    return out


def _sample(trace: Trace, epoch: int) -> Any:
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import Score

    model = trace.agent.get("model") or "rollkit"
    usage = ModelUsage(input_tokens=trace.num_input_tokens, output_tokens=trace.num_output_tokens,
                       total_tokens=trace.num_input_tokens + trace.num_output_tokens)
    output = ModelOutput.from_content(model=model, content=trace.last_reply)
    output.usage = usage
    scores = {name: Score(value=value) for name, value in trace.rewards.items() if value is not None}
    scores.update({f"metric.{name}": Score(value=value) for name, value in trace.metrics.items() if value is not None})
    return EvalSample(
        id=trace.info.get("sample_id") or trace.task.key, epoch=epoch, input=to_openai(trace)[0]["content"]
        if trace.messages else "", target=str(trace.task.data.get("target") or trace.task.data.get("answer") or ""),
        messages=_chat(trace), output=output, scores=scores or None, model_usage={model: usage},
        metadata={"rollkit_trace_id": trace.id, "rollkit_task_type": trace.task.type, "stop": trace.stop},
        total_time=trace.agent_time or None,
    )


def write(traces: list[Trace], path: Path) -> Path:
    log_api = _inspect()
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalResults, EvalSpec, EvalStats

    epochs: dict[str, int] = {}
    samples = []
    for trace in traces:
        key = str(trace.info.get("sample_id") or trace.task.key)
        epochs[key] = epochs.get(key, 0) + 1
        samples.append(_sample(trace, epochs[key]))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    tasks = sorted({t.task.type for t in traces}) or ["rollkit"]
    models = sorted({str(t.agent.get("model")) for t in traces if t.agent.get("model")}) or ["rollkit"]
    log = EvalLog(
        status="success",
        eval=EvalSpec(created=now, task="+".join(tasks), dataset=EvalDataset(name="rollkit", samples=len(epochs),
                                                                              sample_ids=list(epochs)),
                      model=models[0], config=EvalConfig(epochs=max(epochs.values(), default=1))),
        results=EvalResults(total_samples=len(samples), completed_samples=len(samples)),
        stats=EvalStats(started_at=now, completed_at=now),
        samples=samples,
    )
    _off_loop(log_api.write_eval_log, log, str(path), "json" if path.suffix == ".json" else "eval")
    return path
