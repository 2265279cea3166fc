"""The "prompts" export: one row per task, for trainers that sample (GRPO).

`rk.export(source, "prompts.jsonl", format="prompts")` writes, for each
task (`group_id`) the first time a root rollout of it is read, the `prompt`
its rollouts opened with (the messages before the first reply: system and
user), the `tools` offered, the task's data fields as columns (TRL's
GRPOTrainer passes every column to the reward functions: `answer`, ...;
a field named like one of this format's columns is written as
`task_<name>`), and the columns every format has
(`branches.BRANCH_COLUMNS`, of the rollout the prompt was read from).

An online trainer (GRPO, RLOO) trains on the completions it generates
itself from these prompts: a recorded rollout's replies are not used here.
To train on recorded rollouts, export them as `sft` (supervised rows),
`tokens` (merged sequences with logprobs, for an off-policy or RL
trainer) or `preference` (DPO pairs). Forks are left out (a fork's
opening is its parent's). JSON lines only; one set of task keys is held.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.gcpause import paused
from ...core.errors import UsageError
from . import ExportSource
from .branches import (BRANCH_COLUMNS, RowFile, branch_columns, chat_messages, forked_at, own_start, records,
                       template_identity, tools_value, write_meta)

__all__ = ["write", "COLUMNS"]

COLUMNS = ("group_id", "task_key", "task_type", "prompt", "tools", *BRANCH_COLUMNS[1:])
_BATCH = 2000


def write(source: ExportSource, path: Path | None, *, tools_as: str = "objects", tokenizer: str | None = None,
          chat_template: str | None = None) -> Path:
    """Write one prompt row per task of `source` to `path` (.jsonl)."""
    if tools_as not in ("objects", "string"):
        raise UsageError(f"rk.export(format='prompts'): tools_as is 'objects' or 'string', got {tools_as!r}")
    identity = template_identity(tokenizer, chat_template)
    out = RowFile(path, "prompts")
    seen: set[str] = set()
    try:
        with paused():
            batch: list[dict[str, Any]] = []
            for t, _ in records(source)[1]:
                row = _row(t, identity, tools_as)
                if row is None or row["group_id"] in seen:
                    continue
                seen.add(row["group_id"])
                batch.append(row)
                if len(batch) >= _BATCH:
                    out.write(batch)
                    batch = []
            out.write(batch)
        written = out.close()
    except BaseException:
        out.discard()
        raise
    write_meta(written, "prompts", source, out.rows, {"tools_as": tools_as, "tokenizer": tokenizer})
    return written


def _row(t: dict[str, Any], identity: tuple[str | None, str | None], tools_as: str) -> dict[str, Any] | None:
    if forked_at(t)[0] is not None:
        return None
    messages = t.get("messages") or []
    start = own_start(t)
    if start is None:  # no reply: the opening is every message up to the first user message
        start = next((i + 1 for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    columns = branch_columns(t, identity)
    task = t["task"]
    row = {"group_id": columns.pop("group_id"), "task_key": task["key"], "task_type": task["type"],
           "prompt": chat_messages(messages[:start]), "tools": tools_value((t.get("info") or {}).get("tools"), tools_as),
           **columns}
    for name, value in (task.get("data") or {}).items():
        row[f"task_{name}" if name in row else name] = value
    return row
