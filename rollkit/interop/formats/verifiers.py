"""verifiers evaluation results: the `results.jsonl` its evaluation writes
(`vf-eval`, `Environment.evaluate(..., save_results=True)`), one rollout per
line, with `metadata.json` beside it (the run: environment, model,
sampling args, date; kept in `trace.agent` and `trace.info["run_metadata"]`).
`rk.load` takes the folder verifiers writes (`outputs/evals/<env>--<model>/<id>`)
or the file.

Read from verifiers' own source (`verifiers/utils/save_utils.py`,
`state_to_output`, and `verifiers/types.py`): each line holds `example_id`,
`prompt` and `completion` (OpenAI messages, or text for completion
environments), `answer`, `info`, `task`, `reward`, `metrics` (each reward
function's score, also copied to the top level), `error` (`{error,
error_chain_repr, error_chain_str}`), `timing` (`start_time` with
`generation_ms` / `scoring_ms`, or newer spans `setup`, `generation`,
`scoring`), `is_completed`, `is_truncated`, `stop_condition` and
`token_usage`. The reward is `reward`, the metrics the reward functions'
scores; the phases are setup, agent (generation) and scoring where timed.
Token usage is a whole-rollout total, kept per call only when the rollout
made one; otherwise it is the source's own total in
`trace.info["source_usage"]`, never spread over the calls. Each model call's
time is its `timing.model.spans` entry where the rollout recorded them.

Older files (verifiers 0.1 to 0.3) differ: no `metrics` (each reward
function's score is a top-level column), `generation_ms` / `scoring_ms` /
`total_ms` at the top level, tool results without a `tool_call_id` (each
answers the oldest call not yet answered, see `_build.message`), and tool
calls as JSON text. All of them load.

verifiers v1 (`traces.jsonl`, one episode per line, `TRACE_VERSION` 1 of
`verifiers/v1/trace.py`): each trace of an episode is one rollkit trace; its
messages are the path from the root to its last node, its model calls
`calls` (usage with cache reads, the call's time span, finish reason,
error), rewards `{name: {score, weight}}` become rewards and weights, and
its `timing` spans the phases. The environment lives in verifiers, so a
fork needs `task=`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ...core import safe_read
from ...core.messages import AssistantMessage, Usage, UserMessage
from ...core.trace import ErrorInfo, TaskRef, Trace
from ._build import Call, Where, build, messages as to_messages, number
from ._jsonl import each_line
from .census import census_of, merged_notes, noted, unknown
from .docparse import first_record

__all__ = ["sniff", "read", "sniff_v1", "read_v1"]

_BOUNDARY = (("Model", "provider"), ("Provider", "provider"), ("Tool", "tools"), ("Sandbox", "runtime"),
             ("Infra", "runtime"))
# What a results line holds besides the reward functions' scores (which
# files before `metrics` existed write as top-level columns).
_FIELDS = {"example_id", "id", "prompt", "completion", "answer", "info", "task", "reward", "metrics", "error",
           "timing", "is_completed", "is_truncated", "stop_condition", "token_usage", "generation_ms",
           "scoring_ms", "total_ms", "trajectory", "oai_tools", "tools", "state"}
_TOTALS = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens"}


def sniff(path: Path) -> bool:
    """A results line: a JSON object with the rollout's prompt and completion."""
    record = first_record(path)
    return isinstance(record, dict) and "prompt" in record and "completion" in record


def sniff_v1(path: Path) -> bool:
    """A v1 episode line: a JSON object with a list of traces, each holding
    the schema version and a message graph."""
    record = first_record(path)
    traces = record.get("traces") if isinstance(record, dict) else None
    return (isinstance(traces, list) and "task" in record
            and all(isinstance(t, dict) and "nodes" in t and "version" in t for t in traces))


def _conversation(record: dict[str, Any], where: Where, tool_errors: list[dict[str, Any]],
                  inferred: list[str]) -> list[Any]:
    out: list[Any] = []
    raw_all: list[Any] = []
    for key in ("prompt", "completion"):
        value = record.get(key)
        if value is None:
            continue
        if isinstance(value, str):  # a completion environment: plain text
            if raw_all:
                out.extend(to_messages(raw_all, where, "prompt", tool_errors))  # no tool calls before a text turn
                raw_all = []
            out.append(UserMessage(content=value) if key == "prompt" else AssistantMessage(content=value))
        elif isinstance(value, list):
            raw_all.extend(value)
        else:
            raise where.error(key, f"should be a list of messages or text, got {type(value).__name__}")
    if raw_all:
        # One list, so a tool result in the completion can answer a call in
        # the prompt (a multi-turn environment's prompt holds earlier turns).
        # Some versions repeat the prompt's last user message as the
        # completion's first; it is kept, as the file has it.
        start = len(out)
        found: list[str] = []
        out.extend(to_messages(raw_all, where, "completion", tool_errors, found))
        inferred.extend(_shifted(name, start) for name in found)
    return out


def _shifted(name: str, by: int) -> str:
    """"messages.3.x" of a list converted after `by` messages: "messages.{3+by}.x"."""
    head, index, rest = name.split(".", 2)
    return f"{head}.{int(index) + by}.{rest}"


def _span(value: Any, where: Where, field_path: str) -> tuple[float, float | None] | None:
    if isinstance(value, dict) and value.get("start"):
        return (number(value["start"], where, f"{field_path}.start"),  # type: ignore[return-value]
                number(value.get("end"), where, f"{field_path}.end") or None)
    return None


def _phases(record: dict[str, Any], where: Where) -> dict[str, tuple[float, float | None]]:
    timing = record.get("timing")
    if not isinstance(timing, dict):
        timing = {}
    phases = {}
    for source, phase in (("setup", "setup"), ("generation", "agent"), ("scoring", "scoring")):
        span = _span(timing.get(source), where, f"timing.{source}")
        if span is not None:
            phases[phase] = span
    if phases:
        return phases
    # Millisecond durations: in `timing` beside its start time, or (older
    # files) top-level columns without one; then the phases start at 0.
    source = timing if "generation_ms" in timing else record
    at = "timing." if source is timing else ""
    if "generation_ms" not in source:
        return {}
    start = number(timing.get("start_time"), where, "timing.start_time") or 0.0
    generation = (number(source.get("generation_ms"), where, f"{at}generation_ms") or 0.0) / 1000
    scoring = (number(source.get("scoring_ms"), where, f"{at}scoring_ms") or 0.0) / 1000
    return {"agent": (start, start + generation), "scoring": (start + generation, start + generation + scoring)}


def _model_spans(record: dict[str, Any], where: Where) -> list[tuple[float, float | None]]:
    timing = record.get("timing")
    model = timing.get("model") if isinstance(timing, dict) else None
    spans = model.get("spans") if isinstance(model, dict) else None
    if not isinstance(spans, list):
        return []
    return [s for i, item in enumerate(spans) if (s := _span(item, where, f"timing.model.spans.{i}")) is not None]


def _errors(error: Any) -> list[ErrorInfo]:
    if not error:
        return []
    kind = str(error.get("error") if isinstance(error, dict) else error)
    boundary = next((b for word, b in _BOUNDARY if word in kind), "harness")
    message = error.get("error_chain_str") or kind if isinstance(error, dict) else kind
    return [ErrorInfo(type=kind.split("(", 1)[0], boundary=boundary, message=str(message), phase="agent")]


def _metadata(path: Path) -> dict[str, Any]:
    beside = path.with_name("metadata.json")
    if not beside.exists():
        return {}
    try:  # bounded as the results are: a FIFO or a link to /dev/zero here hung or filled memory
        data = safe_read.loads(safe_read.read_document(beside).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _count(value: Any, where: Where, field_path: str) -> int | None:
    found = number(value, where, field_path)
    return None if found is None else int(found)


def _usage_total(record: dict[str, Any], where: Where) -> dict[str, int | None] | None:
    """The rollout's own token total: `token_usage`, else a usage object in
    `info`, else (older files) the `prompt_tokens` / `completion_tokens`
    columns."""
    info = record.get("info") if isinstance(record.get("info"), dict) else {}
    for field_path, usage in (("token_usage", record.get("token_usage")), ("info.usage", info.get("usage")),
                              ("info.token_usage", info.get("token_usage"))):
        if isinstance(usage, dict):
            return {"input_tokens": _count(usage.get("input_tokens", usage.get("prompt_tokens")), where,
                                           f"{field_path}.input_tokens"),
                    "output_tokens": _count(usage.get("output_tokens", usage.get("completion_tokens")), where,
                                            f"{field_path}.output_tokens")}
    if any(name in record for name in _TOTALS):
        return {ours: _count(record.get(theirs), where, theirs) for theirs, ours in _TOTALS.items()}
    return None


def read(path: Path, errors: str) -> list[Trace]:
    meta = _metadata(path)
    meta_notes = {"unmapped": {f"metadata.json:{k}": v for k, v in unknown(census_of("verifiers-metadata"), meta).items()}}
    meta_notes = meta_notes if meta_notes["unmapped"] else {}
    repeats: dict[str, int] = {}

    def convert(record: Any, where: Where, index: int) -> Trace:
        if not isinstance(record, dict):
            raise where.error(None, f"should be a verifiers result (a JSON object), got {type(record).__name__}")
        if "prompt" not in record:
            raise where.error("prompt", "is missing: a verifiers result holds the rollout's prompt there")
        example = str(record.get("example_id", record.get("id", index)))
        repeat = repeats[example] = repeats.get(example, -1) + 1
        tool_errors: list[dict[str, Any]] = []
        inferred: list[str] = []
        conversation = _conversation(record, where, tool_errors, inferred)
        replies = sum(isinstance(m, AssistantMessage) for m in conversation)
        total = _usage_total(record, where)
        spans = _model_spans(record, where)
        calls = [Call(start=s, end=e) for s, e in spans] if len(spans) == replies else [Call() for _ in range(replies)]
        if total and replies == 1:
            calls[0].usage = Usage(**total)
        metrics = record.get("metrics")
        if metrics is None:  # before `metrics`: each reward function a top-level column
            metrics = {name: value for name, value in record.items()
                       if name not in _FIELDS and name not in _TOTALS and isinstance(value, (int, float))}
        if not isinstance(metrics, dict):
            raise where.error("metrics", f"should be an object of scores, got {type(metrics).__name__}")
        found = _errors(record.get("error"))
        stop = record.get("stop_condition") or ("truncated" if record.get("is_truncated") else None)
        prompt = next((m.content for m in conversation if isinstance(m, UserMessage)), None)
        timing_ms = {name: record[name] for name in ("generation_ms", "scoring_ms", "total_ms") if name in record}
        return build(
            fmt="verifiers", where=where, conversation=conversation, calls=calls,
            task=TaskRef(type=f"verifiers:{record.get('task') or meta.get('env_id') or meta.get('env') or 'default'}",
                         key=example, data={"prompt": prompt, "answer": record.get("answer"), "info": record.get("info")}),
            agent={"name": meta.get("env_id") or meta.get("env"), "model": meta.get("model"), "harness": "verifiers",
                   **({"sampling_args": meta["sampling_args"]} if isinstance(meta.get("sampling_args"), dict) else {})},
            rewards={"reward": number(record["reward"], where, "reward")} if "reward" in record else None,
            metrics={name: number(value, where, f"metrics.{name}") for name, value in metrics.items()},
            phases=_phases(record, where), errors=found, stop_condition=stop, inferred=inferred,
            info={"example_id": example, "repeat": repeat, "rollout_id": f"{example}#{repeat}",
                  **({"run_metadata": meta} if meta else {}),
                  **({"source_usage": {**total, "scope": "the rollout's total over its model calls"}}
                     if total and replies != 1 else {}),
                  **({"token_usage": record["token_usage"]} if isinstance(record.get("token_usage"), dict) else {}),
                  **({"timing_ms": timing_ms} if timing_ms else {}),
                  **({"tool_errors": tool_errors} if tool_errors else {}),
                  **merged_notes(noted("verifiers", record), meta_notes)},
            completed=bool(record.get("is_completed", True)) or not found,
        )

    # Every line draws on the run's metadata: it is part of what each trace's id digests.
    beside = json.dumps(meta, sort_keys=True, default=str).encode() + b"\n"
    return each_line(path, errors, "verifiers result", convert, beside)


# ---- verifiers v1: traces.jsonl ------------------------------------------------

def _v1_path(nodes: list[Any], where: Where) -> list[dict[str, Any]]:
    """The nodes from the root to the last node (the conversation as the
    model last saw it, plus its last reply), each with its index."""
    if not nodes:
        return []
    chain, at, seen = [], len(nodes) - 1, set()
    while at is not None:
        if not isinstance(at, int) or not 0 <= at < len(nodes) or at in seen:
            raise where.error("nodes", f"has a parent link to {at!r} that is not an earlier node")
        seen.add(at)
        node = nodes[at]
        if not isinstance(node, dict) or not isinstance(node.get("message"), dict):
            raise where.error(f"nodes.{at}", "should be a node (an object with a message)")
        chain.append((at, node))
        at = node.get("parent")
    return [{"index": i, **node} for i, node in reversed(chain)]


def _v1_usage(usage: Any, where: Where, field_path: str) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    cached = _count(usage.get("cached_input_tokens"), where, f"{field_path}.cached_input_tokens")
    prompt = _count(usage.get("prompt_tokens"), where, f"{field_path}.prompt_tokens")
    # verifiers' prompt_tokens excludes cache reads; rollkit's input is the whole prompt.
    return Usage(input_tokens=None if prompt is None else prompt + (cached or 0),
                 output_tokens=_count(usage.get("completion_tokens"), where, f"{field_path}.completion_tokens"),
                 cache_read_tokens=cached)


def _v1_error(error: Any, phase: str = "agent") -> ErrorInfo:
    kind = str(error.get("type") or "Error") if isinstance(error, dict) else "Error"
    boundary = next((b for word, b in _BOUNDARY if word in kind), "harness")
    return ErrorInfo(type=kind, boundary=boundary, message=str((error or {}).get("message") or kind), phase=phase,
                     status=(error or {}).get("status_code"), traceback=str((error or {}).get("traceback") or ""))


def _v1_calls(raw: dict[str, Any], path: list[dict[str, Any]], where: Where, index: int) -> list[Call]:
    """One call per reply on the path, and the failed attempts (no reply)
    each after the replies of the calls listed before it."""
    by_node = {c.get("node"): c for c in raw.get("calls") or [] if isinstance(c, dict)}
    calls = []
    failed: list[tuple[int, Call]] = []
    for at, call in enumerate(raw.get("calls") or []):
        if isinstance(call, dict) and call.get("node") is None and isinstance(call.get("error"), dict):
            # A call that got no reply: after the replies of the calls listed before it.
            before = sum(1 for c in (raw.get("calls") or [])[:at] if isinstance(c, dict) and c.get("node") is not None)
            span = call.get("time") if isinstance(call.get("time"), dict) else {}
            failed.append((before, Call(usage=_v1_usage(call.get("usage"), where, f"traces.{index}.calls.{at}.usage"),
                                        start=span.get("start") or None, end=span.get("end") or None,
                                        error=_v1_error(call["error"]))))
    for n in path:
        if n["message"].get("role") != "assistant":
            continue
        call = by_node.get(n["index"]) or {}
        span = call.get("time") if isinstance(call.get("time"), dict) else {}
        calls.append(Call(usage=_v1_usage(call.get("usage"), where, f"traces.{index}.calls.usage"),
                          start=span.get("start") or None, end=span.get("end") or None,
                          finish_reason=call.get("finish_reason")))
    for before, attempt in reversed(failed):  # build keeps them in this order
        calls.insert(before, attempt)
    return calls


def _v1_trace(episode: dict[str, Any], raw: Any, where: Where, index: int) -> Trace:
    if not isinstance(raw, dict):
        raise where.error(f"traces.{index}", f"should be a trace (a JSON object), got {type(raw).__name__}")
    nodes = raw.get("nodes")
    if not isinstance(nodes, list):
        raise where.error(f"traces.{index}.nodes", "is missing: a v1 trace holds its messages there")
    path = _v1_path(nodes, where)
    tool_errors: list[dict[str, Any]] = []
    conversation = to_messages([n["message"] for n in path], where, f"traces.{index}.nodes", tool_errors)
    calls = _v1_calls(raw, path, where, index)
    timing = raw.get("timing") if isinstance(raw.get("timing"), dict) else {}
    phases = {}
    for name in ("boot", "setup", "agent", "finalize", "scoring"):
        span = _span(timing.get(name), where, f"traces.{index}.timing.{name}")
        if span is not None:
            phases[name] = span
    rewards_raw = raw.get("rewards") if isinstance(raw.get("rewards"), dict) else {}
    rewards = {name: None if r is None else number(r.get("score") if isinstance(r, dict) else r, where,
                                                 f"traces.{index}.rewards.{name}.score")
               for name, r in rewards_raw.items()}
    weights = {name: float(r["weight"]) for name, r in rewards_raw.items()
               if isinstance(r, dict) and isinstance(r.get("weight"), (int, float)) and r["weight"] != 1.0}
    found = [_v1_error(e) for e in raw.get("errors") or []]
    task = raw.get("task") if isinstance(raw.get("task"), dict) else episode.get("task") or {}
    agent = raw.get("agent") if isinstance(raw.get("agent"), dict) else {}
    config = agent.get("config") if isinstance(agent.get("config"), dict) else {}
    model = next((c.get("model") for c in raw.get("calls") or [] if isinstance(c, dict) and c.get("model")), None)
    key = str(task.get("key") or task.get("hash") or episode.get("id"))
    trace = build(
        fmt="verifiers", where=where, conversation=conversation, calls=calls,
        task=TaskRef(type=f"verifiers:{task.get('type') or 'task'}", key=key,
                     data=task.get("data") if isinstance(task.get("data"), dict) else {"data": task.get("data")}),
        agent={"name": agent.get("name") or "agent", "model": model or config.get("model"), "harness": "verifiers"},
        rewards=rewards or None, metrics={name: number(v, where, f"traces.{index}.metrics.{name}")
                                           for name, v in (raw.get("metrics") or {}).items()},
        phases=phases, errors=found, stop_condition=raw.get("stop_condition"),
        completed=bool(raw.get("is_completed", True)) or bool(found),
        weights=weights, info={"episode_id": episode.get("id"), "trace_id": raw.get("id"), "trace_version": raw.get("version"),
              "example_id": key, "env": (episode.get("env") or {}).get("id") if isinstance(episode.get("env"), dict)
              else None, **({"tool_errors": tool_errors} if tool_errors else {}),
              **({"extra_usage": raw["extra_usage"]} if raw.get("extra_usage") else {}),
              **merged_notes(noted("verifiers-v1", {k: v for k, v in episode.items() if k != "traces"}),
                             noted("verifiers-v1", raw, f"traces.{index}", "traces.*"))},
    )
    return trace


def read_v1(path: Path, errors: str) -> list[Trace]:
    """verifiers v1's traces.jsonl: every trace of every episode."""
    repeats: dict[str, int] = {}
    out: list[Trace] = []

    def convert(record: Any, where: Where, index: int) -> list[Trace]:
        if not isinstance(record, dict) or not isinstance(record.get("traces"), list):
            raise where.error("traces", "is missing: a verifiers v1 episode holds its traces there")
        # One line, several traces: each one's id digests the line and which of its traces it is.
        traces = [_v1_trace(record, raw, dataclasses.replace(where, read=(where.read or b"") + b"\n%d" % i), i)
                  for i, raw in enumerate(record["traces"])]
        for trace in traces:
            example = trace.info["example_id"]
            repeat = repeats[example] = repeats.get(example, -1) + 1
            trace.record_info(repeat=repeat, rollout_id=f"{example}#{repeat}")
        return traces

    for traces in each_line(path, errors, "verifiers v1 episode", convert):  # type: ignore[arg-type]
        out.extend(traces)  # type: ignore[arg-type]
    return out
