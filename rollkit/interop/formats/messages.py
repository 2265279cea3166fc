"""OpenAI-format chat transcripts: the lowest common denominator.

Read: a JSON lines file whose lines are `{"messages": [...]}` (other keys
kept: `id`, and `reward` when there is one) or bare lists of messages; or a
JSON file holding one such record, a list of them, or one list of messages.
Each transcript is one trace; its task is the plain `rk.Task` its opening
(system prompt, first user message) makes, so a fork can rebuild it and run
on with a rollkit agent. Usage and timings are not in the format and stay
missing; so does a reward unless the record has one.

Write (`rk.save(traces, path, format="messages")`): one `{"messages": [...]}`
line per trace, messages in the OpenAI chat shape (tool calls as
`{"id", "type": "function", "function": {"name", "arguments"}}`), with the
trace `id`, the task key and the reward (null when missing) beside them, for
training pipelines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...core.messages import SystemMessage, UserMessage
from ...core.task import TaskData
from ...core.trace import TaskRef, Trace
from ...core import safe_read
from ._build import Where, build, converting, messages as to_messages, number, read_json
from ._jsonl import each_line

__all__ = ["sniff", "read", "write", "to_openai"]

_HEAD = re.compile(rb'\s*(\[\s*)?(\[\s*)?\{\s*"(messages|role)"\s*:')
_MESSAGES = re.compile(rb'"messages"\s*:\s*\[\s*\{')


def sniff(head: bytes) -> bool:
    """A transcript opens the file, or the first line holds a list of
    messages (other keys, like an id, may come first)."""
    first = head.split(b"\n", 1)[0]
    return _HEAD.match(head) is not None or (_MESSAGES.search(first) is not None and b'"role"' in first)


def _trace(record: Any, where: Where, index: int) -> Trace:
    if isinstance(record, list):
        record = {"messages": record}
    if not isinstance(record, dict) or "messages" not in record:
        raise where.error(None, 'should be a transcript: {"messages": [...]} or a list of messages')
    inferred: list[str] = []
    conversation = to_messages(record["messages"], where, "messages", inferred=inferred)
    system = next((m.content for m in conversation if isinstance(m, SystemMessage)), None)
    prompt = next((m.content for m in conversation if isinstance(m, UserMessage)), None)
    data = TaskData(prompt=prompt, system_prompt=system)
    reward = number(record.get("reward"), where, "reward") if "reward" in record else None
    return build(
        fmt="messages", where=where, conversation=conversation, calls=None,
        task=TaskRef(type="Task", key=data.key, data=data.model_dump(mode="json"), module="rollkit.core.task"),
        agent={"name": record.get("model"), "model": record.get("model")} if record.get("model") else {},
        rewards=None if reward is None else {"reward": reward},
        inferred=[*inferred, "outcome"],  # a transcript does not say how the run ended
        info={"source_id": record.get("id"), "record": index} if record.get("id") is not None else {"record": index},
    )


def read(path: Path, errors: str) -> list[Trace]:
    first = safe_read.read_head(path, 4096).lstrip()[:1]
    if first == b"[":  # one JSON document: a list of transcripts, or one list of messages
        document = read_json(path, Where(path, "the file"))
        one = not document or (isinstance(document[0], dict) and "role" in document[0])
        records = [document] if one else document
        traces = []
        for i, record in enumerate(records):
            with converting(where := Where(path, f"transcript {i}")):
                traces.append(_trace(record, where, i))
        return traces
    return each_line(path, errors, "transcript", _trace)


def to_openai(trace: Trace) -> list[dict[str, Any]]:
    """A trace's conversation as OpenAI chat messages (as the interception
    server's chat dialect writes them)."""
    from ...programs.dialects.chat import wire_message

    return [wire_message(m) for m in trace.messages]


def write(traces: list[Trace], path: Path) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for trace in traces:
            record = {"id": trace.id, "task": trace.task.key, "model": trace.agent.get("model"),
                      "reward": trace.scored_reward, "messages": to_openai(trace)}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
