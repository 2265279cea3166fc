"""Agent trajectory files: mini-swe-agent's `.traj.json` (and SWE-agent's
`.traj`, whose `history` holds the same kind of messages).

One trace per file. The messages are OpenAI shaped (tool calls, or bash
blocks in the text for the text-based configurations); mini-swe-agent's
closing `exit` record gives the stop condition (`exit_status`) and the
submission (`trace.info`), and an exit status that names an exception is an
error of the harness with its traceback. A reply's `extra.timestamp` is the
end of its model call (the start is the message before it), its
`extra.response.usage` the usage where the model recorded it. A trajectory
has no reward: the benchmark scores it elsewhere, so the reward is missing
("not in the source"), and the task (a repository at a commit) cannot be
rebuilt, so a fork needs `task=`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...core.messages import Usage, UserMessage
from ...core.trace import ErrorInfo, TaskRef, Trace
from ._build import Call, Where, build, converting, messages as to_messages, read_json

__all__ = ["sniff", "read"]

_HEAD = re.compile(rb'\s*\{\s*"(info|trajectory|history|environment)"\s*:')
# Exit statuses that end a run cleanly (a limit, or the agent's own submission).
_CLEAN = {"Submitted", "LimitsExceeded", "TimeExceeded", "RepeatedFormatError", "", None}


def sniff(head: bytes) -> bool:
    if _HEAD.match(head) is None:
        return False
    return b'"mini_version"' in head or b'"trajectory_format"' in head or b'"history"' in head


def _calls(raw: list[Any]) -> list[Call]:
    calls = []
    previous = None
    for item in raw:
        if not isinstance(item, dict):
            continue
        extra = item.get("extra") if isinstance(item.get("extra"), dict) else {}
        stamp = extra.get("timestamp")
        if item.get("role") == "assistant":
            usage = ((extra.get("response") or {}).get("usage") or {}) if isinstance(extra.get("response"), dict) else {}
            calls.append(Call(
                usage=Usage(input_tokens=usage.get("prompt_tokens", 0), output_tokens=usage.get("completion_tokens", 0))
                if usage else None,
                start=previous if stamp is not None else None, end=stamp,
            ))
        if isinstance(stamp, (int, float)):
            previous = stamp
    return calls


def read(path: Path, errors: str) -> list[Trace]:
    where = Where(path, "the trajectory")
    document = read_json(path, where)
    with converting(where):
        return _read(path, where, document)


def _read(path: Path, where: Where, document: Any) -> list[Trace]:
    if not isinstance(document, dict):
        raise where.error(None, f"should be a trajectory (a JSON object), got {type(document).__name__}")
    key = "messages" if "messages" in document else "history"
    if key not in document:
        raise where.error("messages", "is missing: a trajectory file holds its conversation there")
    raw = document[key]
    conversation = to_messages(raw, where, key)
    info = document.get("info") if isinstance(document.get("info"), dict) else {}
    exit_record = next((m for m in reversed(raw) if isinstance(m, dict) and m.get("role") == "exit"), None)
    exit_extra = (exit_record or {}).get("extra") or {}
    status = exit_extra.get("exit_status", info.get("exit_status"))
    errors_found = []
    if status not in _CLEAN:
        errors_found.append(ErrorInfo(type=str(status), boundary="harness", phase="agent",
                                      message=str(exit_extra.get("exception_str") or (exit_record or {}).get("content") or status),
                                      traceback=str(exit_extra.get("traceback") or "")))
    prompt = next((m.content for m in conversation if isinstance(m, UserMessage)), None)
    name = path.name.removesuffix(".json").removesuffix(".traj")
    calls = _calls(raw)
    stamps = [c.end for c in calls if c.end is not None]
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    model = ((config.get("model") or {}).get("model_name")) if isinstance(config.get("model"), dict) else None
    return [build(
        fmt="trajectory", where=where, conversation=conversation, calls=calls,
        task=TaskRef(type="mini-swe-agent" if "mini_version" in info else "swe-agent", key=name,
                     data={"prompt": prompt}),
        agent={"name": config.get("agent_type") or "mini-swe-agent", "model": model, "harness": "mini-swe-agent"},
        rewards=None, errors=errors_found,
        phases={"agent": (min(stamps), max(stamps))} if stamps else {},
        stop_condition=None if errors_found else status,
        metrics={"cost": float(info["model_stats"]["instance_cost"])}
        if isinstance(info.get("model_stats"), dict) and "instance_cost" in info["model_stats"] else {},
        info={"exit_status": status, "submission": exit_extra.get("submission", info.get("submission")),
              "trajectory_format": document.get("trajectory_format"), "example_id": name},
    )]

