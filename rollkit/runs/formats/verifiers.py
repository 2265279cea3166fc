"""verifiers evaluation results: the `results.jsonl` its evaluation writes
(`vf-eval`, `Environment.evaluate(..., save_results=True)`), one rollout per
line, with `metadata.json` beside it.

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
made one. The environment lives in verifiers, so a fork needs `task=`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...core.messages import AssistantMessage, Usage, UserMessage
from ...core.trace import ErrorInfo, TaskRef, Trace
from ._build import Call, Where, build, messages as to_messages, number
from ._jsonl import each_line

__all__ = ["sniff", "read"]

_HEAD = re.compile(rb'\s*\{\s*"(example_id|id|prompt)"\s*:')
_BOUNDARY = (("Model", "provider"), ("Provider", "provider"), ("Tool", "tools"), ("Sandbox", "runtime"),
             ("Infra", "runtime"))


def sniff(head: bytes) -> bool:
    first = head.split(b"\n", 1)[0]
    return _HEAD.match(first) is not None and b'"completion"' in first and b'"prompt"' in first


def _conversation(record: dict[str, Any], where: Where) -> list[Any]:
    out = []
    for key in ("prompt", "completion"):
        value = record.get(key)
        if value is None:
            continue
        if isinstance(value, str):  # a completion environment: plain text
            out.append(UserMessage(content=value) if key == "prompt" else AssistantMessage(content=value))
        else:
            out.extend(to_messages(value, where, key))
    return out


def _phases(timing: Any, where: Where) -> dict[str, tuple[float, float | None]]:
    if not isinstance(timing, dict):
        return {}
    phases = {}
    for source, phase in (("setup", "setup"), ("generation", "agent"), ("scoring", "scoring")):
        span = timing.get(source)
        if isinstance(span, dict) and span.get("start"):
            phases[phase] = (number(span["start"], where, f"timing.{source}.start"),
                             number(span.get("end"), where, f"timing.{source}.end"))
    start = timing.get("start_time")
    if not phases and start:
        start = number(start, where, "timing.start_time")
        generation = (number(timing.get("generation_ms"), where, "timing.generation_ms") or 0.0) / 1000
        scoring = (number(timing.get("scoring_ms"), where, "timing.scoring_ms") or 0.0) / 1000
        phases = {"agent": (start, start + generation), "scoring": (start + generation, start + generation + scoring)}
    return phases  # type: ignore[return-value]


def _errors(error: Any) -> list[ErrorInfo]:
    if not error:
        return []
    kind = str(error.get("error") if isinstance(error, dict) else error)
    boundary = next((b for word, b in _BOUNDARY if word in kind), "harness")
    message = error.get("error_chain_str") or kind if isinstance(error, dict) else kind
    return [ErrorInfo(type=kind.split("(", 1)[0], boundary=boundary, message=str(message), phase="agent")]


def _metadata(path: Path) -> dict[str, Any]:
    beside = path.with_name("metadata.json")
    try:
        data = json.loads(beside.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read(path: Path, errors: str) -> list[Trace]:
    meta = _metadata(path)
    repeats: dict[str, int] = {}

    def convert(record: Any, where: Where, index: int) -> Trace:
        if not isinstance(record, dict):
            raise where.error(None, f"should be a verifiers result (a JSON object), got {type(record).__name__}")
        if "prompt" not in record:
            raise where.error("prompt", "is missing: a verifiers result holds the rollout's prompt there")
        example = str(record.get("example_id", record.get("id", index)))
        repeat = repeats[example] = repeats.get(example, -1) + 1
        conversation = _conversation(record, where)
        replies = sum(isinstance(m, AssistantMessage) for m in conversation)
        usage = record.get("token_usage") if isinstance(record.get("token_usage"), dict) else None
        calls = None
        if usage and replies == 1:
            calls = [Call(usage=Usage(input_tokens=int(number(usage.get("input_tokens"), where, "token_usage.input_tokens") or 0),
                                      output_tokens=int(number(usage.get("output_tokens"), where, "token_usage.output_tokens") or 0)))]
        metrics = record.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise where.error("metrics", f"should be an object of scores, got {type(metrics).__name__}")
        found = _errors(record.get("error"))
        stop = record.get("stop_condition") or ("truncated" if record.get("is_truncated") else None)
        prompt = next((m.content for m in conversation if isinstance(m, UserMessage)), None)
        return build(
            fmt="verifiers", where=where, conversation=conversation, calls=calls,
            task=TaskRef(type=f"verifiers:{record.get('task') or meta.get('env_id') or meta.get('env') or 'default'}",
                         key=example, data={"prompt": prompt, "answer": record.get("answer"), "info": record.get("info")}),
            agent={"name": meta.get("env_id") or meta.get("env"), "model": meta.get("model"), "harness": "verifiers"},
            rewards={"reward": number(record["reward"], where, "reward")} if "reward" in record else None,
            metrics={name: number(value, where, f"metrics.{name}") for name, value in metrics.items()},
            phases=_phases(record.get("timing"), where), errors=found, stop_condition=stop,
            info={"example_id": example, "repeat": repeat, "rollout_id": f"{example}#{repeat}",
                  **({"token_usage": usage} if usage else {})},
            completed=bool(record.get("is_completed", True)) or not found,
        )

    return each_line(path, errors, "verifiers result", convert)
