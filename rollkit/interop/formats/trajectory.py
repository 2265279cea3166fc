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

SWE-agent's `.traj` holds its conversation in `history` (after the
`trajectory` steps, so anywhere in the file: it is recognised by parsing
it), a tool result names its call in `tool_call_ids` (a list), and
`info.exit_status` says how it ended: `submitted` is the agent's own clean
finish, `submitted (exit_cost)` and the other `exit_*` statuses a stop by a
limit, an `exit_error` / exception a failure. `info.model_stats`
(`tokens_sent`, `tokens_received`, `api_calls`, `instance_cost`) is the
source's own total, kept in `trace.info["source_usage"]`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.messages import Usage
from ...core.trace import ErrorInfo, TaskRef, Trace
from . import docparse
from ._usage import usage_of
from .census import noted
from ._build import Call, Where, build, converting, messages as to_messages, read_json

__all__ = ["sniff", "read"]

# Exit statuses that end a run by a limit (a clean stop, scored as usual).
# The modules of the model clients whose exceptions end a run at the provider.
_PROVIDER_MODULES = {"litellm", "openai", "anthropic", "httpx", "httpcore", "google"}
# litellm's exception classes (mini-swe-agent's exit status is the class name).
_LITELLM_ERRORS = {"APIError", "APIConnectionError", "APIResponseValidationError", "AuthenticationError",
                   "BadRequestError", "BudgetExceededError", "ContentPolicyViolationError",
                   "ContextWindowExceededError", "InternalServerError", "NotFoundError", "PermissionDeniedError",
                   "RateLimitError", "ServiceUnavailableError", "Timeout", "UnprocessableEntityError"}
_LIMITS = {"LimitsExceeded", "TimeExceeded", "RepeatedFormatError", "exit_cost", "exit_context", "exit_format",
           "exit_total_execution_time", "exit_command_timeout"}


def sniff(path: Path) -> bool:
    """A JSON object holding a conversation as `history` (SWE-agent) or as
    `messages` beside mini-swe-agent's `info` / `trajectory_format`."""
    document = docparse.document(path)
    if not isinstance(document, dict):
        return False
    if isinstance(document.get("history"), list):
        return True
    info = document.get("info")
    return isinstance(document.get("messages"), list) and (
        "trajectory_format" in document or (isinstance(info, dict) and "mini_version" in info))


def _ending(status: Any) -> tuple[str | None, bool]:
    """(stop condition, failed) for an exit status: a submission is a clean
    finish (None), a limit a stop, anything else (an exception's name,
    `exit_error`) a failure."""
    if status in (None, "") or str(status).lower() == "submitted":
        return None, False
    text = str(status)
    limit = text[text.find("(") + 1:text.find(")")] if text.lower().startswith("submitted (") else text
    if limit in _LIMITS or limit.startswith("exit_") and limit not in ("exit_error", "exit_api"):
        return limit, False
    return None, True


def _failure(status: Any, exit_extra: dict[str, Any]) -> tuple[str, str]:
    """(error type, boundary) of an exit status that names an exception:
    one raised by the model's client (litellm, openai, anthropic, httpx:
    the module its exception text or its traceback's last line names) is
    the provider's (L31), any other the harness's."""
    raised = str(exit_extra.get("exception_str") or "")
    last = (str(exit_extra.get("traceback") or "").strip().splitlines() or [""])[-1]
    modules = {text.split(":", 1)[0].split(".", 1)[0] for text in (raised, last) if ":" in text}
    if modules & _PROVIDER_MODULES or str(status) in _LITELLM_ERRORS:
        return "ProviderError", "provider"
    return str(status), "harness"


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
            cost = extra.get("cost")  # mini-swe-agent's dollars for this call
            calls.append(Call(
                usage=usage_of(usage),
                start=previous if stamp is not None else None, end=stamp,
                cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
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
    stop, failed = _ending(status)
    if failed:
        kind, boundary = _failure(status, exit_extra)
        errors_found.append(ErrorInfo(type=kind, boundary=boundary, phase="agent",
                                      message=str(exit_extra.get("exception_str") or (exit_record or {}).get("content") or status),
                                      traceback=str(exit_extra.get("traceback") or "")))
    # SWE-agent's in-context demonstration is sent as a user message flagged
    # `is_demo`: the task is the first user message that is not one.
    demos = [i for i, m in enumerate(raw) if isinstance(m, dict) and m.get("is_demo")]
    prompt = next((m.get("content") for m in raw if isinstance(m, dict) and m.get("role") == "user"
                   and not m.get("is_demo") and isinstance(m.get("content"), str)), None)
    tool = "mini-swe-agent" if "mini_version" in info or "messages" in document else "swe-agent"
    name = path.name.removesuffix(".json").removesuffix(".traj")
    calls = _calls(raw)
    stamps = [c.end for c in calls if c.end is not None]
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    model = ((config.get("model") or {}).get("model_name")) if isinstance(config.get("model"), dict) else None
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    totals = {"input_tokens": stats.get("tokens_sent"), "output_tokens": stats.get("tokens_received"),
              "model_calls": stats.get("api_calls")}
    source_usage = ({**totals, "scope": "the run's total over its model calls (SWE-agent model_stats)"}
                    if any(isinstance(v, (int, float)) for v in totals.values()) else None)
    if source_usage and len(calls) == 1 and calls[0].usage is None and totals["input_tokens"] is not None:
        calls[0].usage = Usage(input_tokens=int(totals["input_tokens"]), output_tokens=int(totals["output_tokens"] or 0))
    return [build(
        fmt="trajectory", where=where, conversation=conversation, calls=calls,
        task=TaskRef(type=tool, key=name,
                     data={"prompt": prompt}),
        agent={"name": config.get("agent_type") or tool, "model": model, "harness": tool},
        rewards=None, errors=errors_found,
        phases={"agent": (min(stamps), max(stamps))} if stamps else {},
        stop_condition=stop,
        # A reply's start is the time of the message before it: the file keeps only when each ended.
        inferred=["model_calls.start"] if stamps else [],
        metrics={"cost": float(info["model_stats"]["instance_cost"])}
        if isinstance(info.get("model_stats"), dict) and "instance_cost" in info["model_stats"] else {},
        cost=(stats.get("instance_cost") if isinstance(stats.get("instance_cost"), (int, float)) else None,
              "model_stats.instance_cost"),
        info={"exit_status": status, "submission": exit_extra.get("submission", info.get("submission")),
              "trajectory_format": document.get("trajectory_format"), "example_id": name,
              **({"source_usage": source_usage} if source_usage else {}),
              **({"demo_messages": demos} if demos else {}),
              **noted("mini-swe-agent" if key == "messages" else "swe-agent", document)},
    )]

