"""tau2-bench simulation results: the JSON file `tau2 run` writes (`info`,
`tasks`, `simulations`), one trace per simulation.

Written from tau2-bench's documented data model (`tau2/data_model/
simulation.py`: `Results`, `SimulationRun`, `RewardInfo`; `message.py`),
not produced by the tool here. The agent's turns (assistant messages, its
tool calls and their results) are the conversation; the user simulator's
messages open the segments and are kept apart as `trace.user_turns` (by
"user simulator"); a tool call the simulated user made, and its result, is
the user's and is left out of the agent's conversation (counted in
`trace.info["user_tool_calls"]`). Each reply's `usage` and `timestamp` give
its model call (started at the message before it); the reward is
`reward_info.reward`, and each part of `reward_info.reward_breakdown` a
metric. `termination_reason` is the stop condition (`agent_error` and
`user_error` are errors). The environment lives in tau2, so a fork needs
`task=`.

`infrastructure_error` (tau2's own infrastructure broke, e.g. an API
disconnect) is a failure of the provider, `unexpected_error` one of the
harness; a tool result tau2 flags with `error: true` is listed in
`trace.info["tool_errors"]` by its call id. Newer tau2 writes a folder:
`results.json` (without the simulations) and one file per simulation in
`simulations/` beside it; `rk.load` takes the folder or its results.json.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from ...core.trace import ErrorInfo, TaskRef, Trace
from . import docparse
from ._usage import usage_of
from .census import merged_notes, noted
from ._build import Call, Where, build, converting, message, number, read_json, thinking_text

__all__ = ["sniff", "read"]

# Termination reasons that are failures: (error type, boundary).
_ERRORS = {"agent_error": ("agent_error", "harness"), "user_error": ("user_error", "user"),
           "infrastructure_error": ("ProviderError", "provider"), "unexpected_error": ("unexpected_error", "harness")}


def sniff(path: Path) -> bool:
    """Results holding their simulations, or a results.json whose
    simulations are files in the simulations/ folder beside it."""
    document = docparse.document(path)
    if not isinstance(document, dict):
        return False
    if isinstance(document.get("simulations"), list):
        return True
    return isinstance(document.get("info"), dict) and (path.parent / "simulations").is_dir() and (
        "tasks" in document or "simulation_index" in document)


def _seconds(value: Any, where: Where, field_path: str) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            pass
    raise where.error(field_path, f"should be a time (ISO 8601 text), got {value!r:.40}")


def _metrics(sim: dict[str, Any], reward_info: dict[str, Any] | None, where: Where) -> dict[str, float | None]:
    """The reward's breakdown (reward.<part>) and the agent's and user's cost."""
    breakdown = (reward_info or {}).get("reward_breakdown") or {}
    metrics = {f"reward.{name.lower()}": number(value, where, f"reward_info.reward_breakdown.{name}")
               for name, value in breakdown.items()}
    for cost in ("agent_cost", "user_cost"):
        if cost in sim:  # None: tau2 did not count it (a missing metric, never 0)
            metrics[cost] = number(sim[cost], where, cost)
    return metrics


def _call(item: dict[str, Any], where: Where, field_path: str, start: float | None, end: float | None) -> Call:
    """The model call of an assistant message: its usage (the provider's
    own object in `raw_data.usage` where tau2 kept it: cache reads,
    reasoning; else tau2's `usage`), times and cost. tau2's own
    `generation_time_seconds` gives the start where it recorded it."""
    raw = item.get("raw_data") if isinstance(item.get("raw_data"), dict) else {}
    usage = usage_of(raw.get("usage")) or usage_of(item.get("usage"))
    for name in ("prompt_tokens", "completion_tokens"):
        if isinstance(item.get("usage"), dict):
            number(item["usage"].get(name), where, f"{field_path}.usage.{name}")  # a bad count names its field
    took = item.get("generation_time_seconds")
    if isinstance(took, (int, float)) and not isinstance(took, bool) and end is not None and took >= 0:
        start = end - float(took)
    return Call(usage=usage, start=start, end=end, finish_reason=_finish(raw),
                cost_usd=float(item["cost"]) if isinstance(item.get("cost"), (int, float)) else None)


def _finish(raw: dict[str, Any]) -> str | None:
    choices = raw.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else raw
    reason = first.get("finish_reason")
    return reason if isinstance(reason, str) else None


def _with_reasoning(item: dict[str, Any]) -> dict[str, Any]:
    """A reply with the reasoning its provider returned, as the message's
    own: tau2 keeps it only in the provider's response (`raw_data`), as
    LiteLLM's `reasoning_content` or Anthropic's `thinking_blocks`."""
    raw = item.get("raw_data")
    if item.get("role") != "assistant" or not isinstance(raw, dict) or item.get("reasoning_content"):
        return item
    choices = raw.get("choices")
    reply = (choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else raw).get("message")
    reply = reply if isinstance(reply, dict) else {}
    reasoning = reply.get("reasoning_content")
    if not (isinstance(reasoning, str) and reasoning):
        reasoning = thinking_text(reply.get("thinking_blocks") or raw.get("thinking_blocks"))
    return {**item, "reasoning_content": reasoning} if isinstance(reasoning, str) and reasoning else item


def _given(item: dict[str, Any], position: int) -> bool:
    """Whether an assistant message is tau2's fixed greeting, which the
    orchestrator sends for the agent (no model produced it: no usage, no
    provider response), not a model call."""
    return position == 0 and not item.get("usage") and not item.get("raw_data") and not item.get("tool_calls")


def _messages(sim: dict[str, Any], raw: list[Any], where: Where) -> tuple[list[Any], list[Call], int, list[Any], set[int]]:
    """The agent's conversation, its model calls, how many tool results the
    user simulator's calls got, the tool errors, and the positions of the
    messages no model produced (tau2's greeting)."""
    conversation, calls, user_tools, tool_errors = [], [], 0, []
    given: set[int] = set()
    previous = _seconds(sim.get("start_time"), where, "start_time")
    for i, item in enumerate(raw):
        field_path = f"messages.{i}"
        if not isinstance(item, dict):
            raise where.error(field_path, f"should be a message (an object with a role), got {type(item).__name__}")
        stamp = _seconds(item.get("timestamp"), where, f"{field_path}.timestamp")
        by_user = item.get("requestor") == "user" or (item.get("role") == "user" and item.get("tool_calls"))
        if by_user:
            user_tools += item.get("role") == "tool"
        else:
            converted = message(_with_reasoning(item), where, field_path)
            if converted is not None:
                conversation.append(converted)
                if item.get("role") == "tool" and item.get("error"):
                    tool_errors.append({"tool_call_id": converted.tool_call_id, "error": True})  # type: ignore[union-attr]
            if item.get("role") == "assistant" and _given(item, i):
                given.add(len(conversation) - 1)
            elif item.get("role") == "assistant":
                calls.append(_call(item, where, field_path, previous if stamp is not None else None, stamp))
        if stamp is not None:
            previous = stamp
    return conversation, calls, user_tools, tool_errors, given


def _simulation(sim: Any, where: Where, domain: str | None, tasks: dict[str, Any], agent_llm: Any,
                notes: dict[str, Any]) -> Trace:
    if not isinstance(sim, dict):
        raise where.error(None, f"should be a simulation (a JSON object), got {type(sim).__name__}")
    raw = sim.get("messages")
    if not isinstance(raw, list):
        raise where.error("messages", "is missing: a simulation holds its conversation there")
    conversation, calls, user_tools, tool_errors, given = _messages(sim, raw, where)
    reward_info = sim.get("reward_info") if isinstance(sim.get("reward_info"), dict) else None
    reason = sim.get("termination_reason")
    # A simulation always names its task in tau2's model; one that does not
    # is its own task (never "None", which would merge distinct tasks).
    named = sim.get("task_id") not in (None, "")
    task_id = str(sim["task_id"]) if named else f"simulation:{sim.get('id') or where.record}"
    trial = sim.get("trial") if isinstance(sim.get("trial"), int) else 0
    start, end = _seconds(sim.get("start_time"), where, "start_time"), _seconds(sim.get("end_time"), where, "end_time")
    metrics = _metrics(sim, reward_info, where)
    task = tasks.get(task_id) or {}
    scenario = task.get("user_scenario") if isinstance(task, dict) else None
    return build(
        fmt="tau2", where=where, conversation=conversation, calls=calls, user_by="user simulator", context=given,
        task=TaskRef(type=f"tau2:{domain or 'unknown'}", key=task_id,
                     data={"description": task.get("description") if isinstance(task, dict) else None,
                           "user_scenario": scenario}),
        agent={"name": "tau2", "harness": "tau2-bench", **({"model": agent_llm} if agent_llm else {})},
        rewards={"reward": number(reward_info.get("reward"), where, "reward_info.reward")} if reward_info else None,
        metrics=metrics, phases={"agent": (start, end)} if start is not None else {},
        errors=[ErrorInfo(type=_ERRORS[reason][0], boundary=_ERRORS[reason][1],
                          message=f"tau2 ended the simulation: {reason}", phase="agent")] if reason in _ERRORS else [],
        stop_condition=None if reason in _ERRORS else reason,
        inferred=(["task.key"] if not named else []) + (["model_calls.start"] if calls else []),
        # The agent's dollars are the trace's (its calls are the agent's); the
        # user simulator's stay a metric.
        cost=(metrics.get("agent_cost"), "tau2 agent_cost"),
        info={"simulation_id": sim.get("id"), "example_id": task_id, "repeat": trial,
              "rollout_id": f"{task_id}#{trial}", "domain": domain, "user_tool_calls": user_tools,
              "termination_reason": reason, **({"tool_errors": tool_errors} if tool_errors else {}),
              **({"given_messages": sorted(given)} if given else {}), **notes},
    )


def read(path: Path, errors: str) -> list[Trace]:
    where = Where(path, "the results")
    document = read_json(path, where)
    folder = path.parent / "simulations"
    files: list[Path] = []
    if isinstance(document, dict) and not isinstance(document.get("simulations"), list) and folder.is_dir():
        # The folder layout: one simulation per file, in tau2's own order (sorted by name).
        files = sorted(folder.glob("*.json"))
        document = {**document, "simulations": [read_json(file, Where(file, "the simulation")) for file in files]}
    if not isinstance(document, dict) or not isinstance(document.get("simulations"), list):
        raise where.error("simulations", "is missing: tau2-bench results hold a list of simulations there")
    info = document.get("info") if isinstance(document.get("info"), dict) else {}
    env = info.get("environment_info") if isinstance(info.get("environment_info"), dict) else {}
    domain = env.get("domain_name")
    tasks = {str(t.get("id")): t for t in document.get("tasks") or [] if isinstance(t, dict)}
    agent_llm = (info.get("agent_info") or {}).get("llm") if isinstance(info.get("agent_info"), dict) else None
    traces = []
    header = {key: value for key, value in document.items() if key not in ("simulations", "tasks")}
    task_at = {str(t.get("id")): i for i, t in enumerate(document.get("tasks") or []) if isinstance(t, dict)}
    for i, sim in enumerate(document["simulations"]):
        with converting(where := Where(path, f"simulation {i}")):
            own = task_at.get(str(sim.get("task_id"))) if isinstance(sim, dict) else None
            # A simulation's source path: its place in the file, or its own file in the folder layout.
            at = f"simulations/{files[i].name}" if files else f"simulations.{i}"
            notes = merged_notes(noted("tau2", header), noted("tau2", sim, at, "simulations.*"),
                                 noted("tau2", tasks.get(str(sim.get("task_id"))), f"tasks.{own}", "tasks.*")
                                 if own is not None else {})
            traces.append(_simulation(sim, where, domain, tasks, agent_llm, notes))
    return traces
