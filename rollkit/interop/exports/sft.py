"""Training rows: one chat-template row per branch, as TRL's SFTTrainer
takes them (`rk.export(source, "rows.jsonl", format="sft")`).

A branch is a rollout: a root, or a fork (rk.fork) whose record repeats
its parent's turns up to `forked_at_turn`. Messages are in transformers'
chat form (`branches.chat_message`: tool-call `arguments` as a mapping,
tool messages with `name` and `tool_call_id`, the thinking as
`reasoning_content`); `tools` the schemas the agent was offered, a list of
`{"type": "function", "function": {...}}` (`tools_as="string"`: its JSON
text); `chat_template_kwargs` on every row when given.

The shape (`shape=`): `"messages"`, the whole conversation; or
`"prompt_completion"`, where `prompt` is what comes before the branch's
first own reply (a root's opening system and user messages, a fork's
shared prefix) and `completion` the rest: a prompt is never trained, so a
fork's prefix is not counted twice. Every row of a file has one shape
(datasets fills a missing column with nulls, on which TRL's tokenization
fails), so `"auto"` (the default) writes prompt/completion when any
selected rollout is a fork, else messages. A branch that sampled no reply
of its own has no completion and is left out of a prompt/completion file,
with a warning counting them. Train with `assistant_only_loss=True` (and a
template with `{% generation %}`): a completion also holds tool results
and user turns, which only the assistant mask keeps out of the loss.

Then the columns every format has (`branches.BRANCH_COLUMNS`) and those a
data pipeline filters on (`COLUMNS`, and `reward.<name>` / `metric.<name>`
per signal). `is_truncated` is true when a limit stopped the run
(`_limited`), it was cut short (aborted), or its last reply ended at the
length limit (finish reason "length").

Rows are built from each trace's JSON object, never from `Trace` objects:
a run is read line by line at the byte offsets its columnar store keeps
(`where=` picks the lines by SQL over the rollouts table), and written in
groups, so memory stays bounded by a group whatever the run's size.
JSON lines are the default; Parquet types the nested columns as JSON
(`branches.RowFile`), so each row's tools come back exactly.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core.gcpause import paused
from ...core.errors import UsageError
from ...core.outcome import Outcome
from ...core.totals import record_cost, record_reward, record_token_totals
from . import ExportSource
from .branches import (BRANCH_COLUMNS, branch_columns, RowFile, chat_messages, forked_at, holds_forks, number, own_start, records,
                       template_identity, tools_value, write_meta)
from ...core.dependencies import pa

__all__ = ["write", "COLUMNS", "SUFFIXES", "training_row", "schema", "is_truncated"]

SUFFIXES = (".jsonl", ".parquet")
# The columns of a row besides the conversation's and the per-signal ones, in file order.
_HEAD = ("id", "run_id", "task_key", "task_type", "agent", *BRANCH_COLUMNS, "parent_id", "forked_at_turn")
_TAIL = ("reward", "outcome", "ok", "stop_condition", "has_error", "error_type", "is_truncated", "turns",
         "input_tokens", "output_tokens", "total_tokens", "cost_usd")
COLUMNS = (*_HEAD, "messages", "tools", *_TAIL)
_SHAPES = ("auto", "messages", "prompt_completion")
# A row group closes at this many rows or this many bytes of source JSON,
# whichever comes first: the memory of an export is about one group's.
_GROUP_ROWS = 2000
_GROUP_BYTES = 32 << 20


def write(source: ExportSource, path: Path | None, *, rows_per_group: int = _GROUP_ROWS, shape: str = "auto",
          tools_as: str = "objects", chat_template_kwargs: dict[str, Any] | None = None,
          tokenizer: str | None = None, chat_template: str | None = None) -> Path:
    """Write one training row per branch to `path` (.jsonl or .parquet) and return it."""
    if not isinstance(rows_per_group, int) or rows_per_group < 1:
        raise UsageError(f"rk.export(format='sft'): rows_per_group must be a whole number >= 1, got {rows_per_group!r}")
    if shape not in _SHAPES:
        raise UsageError(f"rk.export(format='sft'): shape is one of {', '.join(map(repr, _SHAPES))}, got {shape!r}")
    if tools_as not in ("objects", "string"):
        raise UsageError(f"rk.export(format='sft'): tools_as is 'objects' or 'string', got {tools_as!r}")
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
        raise UsageError("rk.export(format='sft'): chat_template_kwargs is a dict of the template's keyword "
                         f"arguments (e.g. {{'enable_thinking': False}}), got {type(chat_template_kwargs).__name__}")
    identity = template_identity(tokenizer, chat_template)
    split = shape == "prompt_completion" or (shape == "auto" and holds_forks(source))
    signals, items = records(source)
    out = RowFile(path, "sft", schema(signals, split=split, tools_as=tools_as,
                                      kwargs=chat_template_kwargs is not None))
    options = {"split": split, "tools_as": tools_as, "kwargs": chat_template_kwargs, "identity": identity}
    left_out = 0
    try:
        with paused():  # rows are freed a group at a time; the collector would walk each group's dicts again
            left_out = _write_groups(out, items, signals, rows_per_group, options)
        written = out.close()
    except BaseException:
        out.discard()
        raise
    if left_out:
        warnings.warn(f"rk.export(format='sft'): {left_out} branches sampled no reply of their own (no completion) "
                      "and were left out", UserWarning, stacklevel=3)
    write_meta(written, "sft", source, out.rows, {"shape": "prompt_completion" if split else "messages",
                                                  "tools_as": tools_as, "tokenizer": tokenizer,
                                                  "chat_template_kwargs": chat_template_kwargs})
    return written


def _write_groups(out: RowFile, items: Iterator[tuple[dict[str, Any], int]], signals: list[str],
                  rows_per_group: int, options: dict[str, Any]) -> int:
    batch: list[dict[str, Any]] = []
    held = left_out = 0
    for record, size in items:
        row = training_row(record, signals, **options)
        if row is None:
            left_out += 1
            continue
        batch.append(row)
        held += size
        if len(batch) >= rows_per_group or held >= _GROUP_BYTES:
            out.write(batch)
            batch, held = [], 0
    out.write(batch)
    return left_out


# ---- one row -------------------------------------------------------------------


def training_row(t: dict[str, Any], signals: list[str], *, split: bool = False, tools_as: str = "objects",
                 kwargs: dict[str, Any] | None = None,
                 identity: tuple[str | None, str | None] = (None, None)) -> dict[str, Any] | None:
    """The training row of one trace's JSON object (as saved), with a value
    for each of `signals` ("reward.<name>" / "metric.<name>"; null where the
    trace has none); None for a prompt/completion row without a completion."""
    info = t.get("info") or {}
    agent = t.get("agent") or {}
    parent, k = forked_at(t)
    errors = t.get("errors") or []
    calls = t.get("model_calls") or ()
    (turns, last_finish), tokens = _last_turn(calls), record_token_totals(calls)
    stop = t.get("stop_condition")
    row = {"id": t["id"], "run_id": info.get("run_id"), "task_key": t["task"]["key"], "task_type": t["task"]["type"],
           "agent": agent.get("name"), **branch_columns(t, identity),
           "parent_id": parent, "forked_at_turn": k if parent else None}
    messages = chat_messages(t.get("messages") or ())
    if split:
        start = own_start(t)
        if start is None:
            return None
        row["prompt"], row["completion"] = messages[:start], messages[start:]
    else:
        row["messages"] = messages
    row["tools"] = tools_value(info.get("tools"), tools_as)
    if kwargs is not None:
        row["chat_template_kwargs"] = kwargs
    row.update({
        "reward": record_reward(t), "outcome": Outcome.of_record(t).label, "ok": t.get("ok"), "stop_condition": stop,
        "has_error": bool(errors), "error_type": errors[0].get("type") if errors else None,
        "is_truncated": is_truncated(t, last_finish),
        "turns": turns, "input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": tokens[2],
        "cost_usd": number(record_cost(t)),
    })
    rewards, metrics = t.get("rewards") or {}, t.get("metrics") or {}
    for name in signals:
        values = rewards if name.startswith("reward.") else metrics
        row[name] = number(values.get(name.split(".", 1)[1]))
    return row


def is_truncated(t: dict[str, Any], last_finish: Any = False) -> bool:
    """Whether a limit stopped the run, it was cut short (aborted), or its
    last reply ended at the length limit (`last_finish`: its finish reason,
    found from the calls when not given)."""
    if last_finish is False:
        last_finish = _last_turn(t.get("model_calls") or ())[1]
    return _limited(t.get("stop_condition"), t.get("limits") or {}) or bool(t.get("aborted")) or last_finish == "length"


def _limited(stop: str | None, limits: dict[str, Any]) -> bool:
    """Whether a limit stopped the run: one of its `limits` (max_turns, the
    token limits), or an imported stop that names one (inspect's "message
    limit", tau2's "max_steps", verifiers' "truncated")."""
    if not stop:
        return False
    return stop in limits or stop.startswith("max_") or "limit" in stop or "truncat" in stop


def _last_turn(calls: Any) -> tuple[int, str | None]:
    """Turns and the last turn's finish reason (the token totals are
    rollkit.core.totals.record_token_totals's)."""
    last = next((call for call in reversed(calls) if call.get("committed")), None)
    return (0, None) if last is None else (int(last.get("cum_turns", 0)), last.get("finish_reason"))


# ---- writing -------------------------------------------------------------------


def schema(signals: list[str], *, split: bool = False, tools_as: str = "objects", kwargs: bool = False) -> Any:
    """The Parquet schema of the rows: typed even when there are none; the
    messages, tools, sampling and template arguments typed as JSON."""
    text, json_ = pa.string(), pa.json_()
    conversation = ("prompt", "completion") if split else ("messages",)
    types = {"repetition_id": pa.int64(), "sampling": json_, "forked_at_turn": pa.int64(),
             "tools": text if tools_as == "string" else pa.list_(json_), "chat_template_kwargs": json_,
             "reward": pa.float64(), "ok": pa.bool_(), "has_error": pa.bool_(), "is_truncated": pa.bool_(),
             "turns": pa.int64(), "input_tokens": pa.int64(), "output_tokens": pa.int64(),
             "total_tokens": pa.int64(), "cost_usd": pa.float64(), **{c: pa.list_(json_) for c in conversation}}
    names = [*_HEAD, *conversation, "tools", *(("chat_template_kwargs",) if kwargs else ()), *_TAIL]
    fields = [pa.field(name, types.get(name, text)) for name in names]
    fields += [pa.field(name, pa.float64()) for name in signals]
    return pa.schema(fields, metadata={b"rollkit.export": b"sft"})
