"""What every training format reads off one branch, and how its rows reach a file.

A branch is a rollout as saved: a root, or a fork (rk.fork) whose record
holds its parent's turns up to `forked_at_turn` and then its own. Each
format reads a branch from the trace's JSON object (as saved), never from a
`Trace`, so a run is exported line by line at the store's byte offsets.

Owned here: the source's records (`records`), a message in the form
transformers' chat templates take (`chat_message`: tool-call `arguments`
as a mapping, tool messages with `name` and `tool_call_id`, the thinking as
`reasoning_content`, a key only where it holds something), where a branch's
own part starts (`own_start`: the first reply it sampled itself; what comes
before is its prompt, never trained), the columns every format carries
(`branch_columns`: `group_id`, `repetition_id`, `branch_id`, `model`,
`sampling`, `tokenizer`, `chat_template_sha256`), group statistics of the
reward (`group_rewards`), the file a format writes (`RowFile`: JSON lines
by default, Parquet with JSON-typed columns where a format allows it, both
through a `.part` file replaced at the end) and the sidecar
`export_meta.json`. Nothing here decides a format's rows.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core import __version__
from ...core.errors import UsageError
from ...tables.columns import json_loads
from . import GROUP_SQL, ExportSource

__all__ = ["records", "chat_message", "chat_messages", "own_start", "branch_columns", "BRANCH_COLUMNS",
           "group_rewards", "group_of", "RowFile", "write_meta", "tools_value", "number", "FORMAT_VERSION",
           "template_identity"]

# The version of the rows these formats write (`export_meta.json`); it goes
# up when a column changes meaning or shape.
FORMAT_VERSION = 2
BRANCH_COLUMNS = ("group_id", "repetition_id", "branch_id", "model", "sampling", "tokenizer",
                  "chat_template_sha256")
_SIGNAL_PREFIXES = ("reward.", "metric.")


# ---- reading the source --------------------------------------------------------


def records(source: ExportSource, by_group: bool = False) -> tuple[list[str], Iterator[tuple[dict[str, Any], int]]]:
    """The signal columns ("reward.<name>", "metric.<name>"), and each
    selected trace's JSON object with its size in bytes, one at a time
    (`by_group`: the rollouts of one group together, each in source order)."""
    loads = json_loads()
    if source.run is None:
        traces = list(source.traces())
        if by_group:
            order = {group: i for i, group in reversed(list(enumerate(group_of(t) for t in traces)))}
            traces.sort(key=lambda t: order[group_of(t)])
        names = {f"{prefix}{name}" for t in traces
                 for prefix, values in (("reward.", t.rewards), ("metric.", t.metrics)) for name in values}

        def dumped() -> Iterator[tuple[dict[str, Any], int]]:
            for trace in traces:
                text = trace.model_dump_json()
                yield loads(text), len(text)

        return sorted(names), dumped()
    names = [c for c in source.run.arrow_schema("rollouts") if c.startswith(_SIGNAL_PREFIXES)]
    return sorted(names), ((loads(line), len(line)) for line in source.lines(by_group))


def group_of(trace: Any) -> str:
    """A trace's `group_id`: the task key a batch run wrote, else its task's."""
    return str(trace.info.get("example_id", trace.task.key))


def holds_forks(source: ExportSource) -> bool:
    """Whether any selected rollout is a fork (a first pass over the bytes
    of a run's lines: nothing is parsed)."""
    if source.run is None:
        return any("forked_from" in t.info for t in source.given)
    return any(b'"forked_from"' in line for line in source.lines())


def group_rewards(source: ExportSource) -> dict[str, tuple[float, float, int]]:
    """Each group's (mean, standard deviation, count) of the scored reward
    (`Trace.scored_reward`): a run's from its rollouts table, no trace read."""
    values: dict[str, list[float]] = {}
    if source.run is None:
        for t in source.given:
            if t.scored_reward is not None:
                values.setdefault(group_of(t), []).append(t.scored_reward)
    elif len(source.run) > 0:
        query = f"SELECT {GROUP_SQL} AS g, reward FROM rollouts"
        query += " WHERE reward IS NOT NULL AND NOT isnan(reward)" + (f" AND ({source.where})" if source.where else "")
        table = source.run.sql(query)
        for group, reward in zip(table["g"].to_numpy().tolist(), table["reward"].to_numpy().tolist()):
            values.setdefault(group, []).append(float(reward))
    out = {}
    for group, rewards in values.items():
        mean = sum(rewards) / len(rewards)
        out[group] = (mean, math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)), len(rewards))
    return out


# ---- one branch ----------------------------------------------------------------


def _arguments(text: Any) -> Any:
    """A tool call's arguments as the mapping templates read (Llama 3.1's
    `tojson`s it); text that is not a JSON object stays as written."""
    if not isinstance(text, str):
        return text if text is not None else {}
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def chat_message(m: dict[str, Any], *, arguments_as_text: bool = False) -> dict[str, Any]:
    """A message in transformers' chat form: `role`, `content` (text; other
    parts are left out), and only the keys that apply."""
    role = m["role"]
    content = m.get("content")
    out: dict[str, Any] = {"role": role, "content": content if content.__class__ is str else ""}
    if role == "assistant":
        if m.get("reasoning"):
            out["reasoning_content"] = m["reasoning"]
        calls = m.get("tool_calls")
        if calls:
            out["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": (c.get("arguments") or "{}") if arguments_as_text
                              else _arguments(c.get("arguments"))}} for c in calls]
    elif role == "tool":
        if m.get("tool_call_id") is not None:
            out["tool_call_id"] = m["tool_call_id"]
        if m.get("name") is not None:
            out["name"] = m["name"]
    return out


def chat_messages(messages: Any, *, arguments_as_text: bool = False) -> list[dict[str, Any]]:
    return [chat_message(m, arguments_as_text=arguments_as_text) for m in messages]


def forked_at(t: dict[str, Any]) -> tuple[str | None, int]:
    origin = (t.get("info") or {}).get("forked_from")
    return (origin[0], int(origin[1])) if origin else (None, 0)


def own_start(t: dict[str, Any]) -> int | None:
    """The index in the branch's messages of the first reply it sampled
    itself (a fork's first after its prefix); None when it sampled none.
    What comes before is the branch's prompt: a root's opening messages, a
    fork's shared prefix (and a message it was stepped with)."""
    sampled = t.get("sampled") or ()
    _, k = forked_at(t)
    return sampled[k] if len(sampled) > k else None


def sampling_of_branch(t: dict[str, Any]) -> dict[str, Any] | None:
    """The sampling parameters of the branch's first own committed call
    (`ModelCall.sampling`; None: none recorded)."""
    _, k = forked_at(t)
    seen = 0
    for call in t.get("model_calls") or ():
        if call.get("committed"):
            seen += 1
            if seen > k:
                return call.get("sampling")
    return None


def template_identity(tokenizer: str | None, chat_template: str | None) -> tuple[str | None, str | None]:
    """The tokenizer's name and the sha256 of the chat template's text, as
    given to the export."""
    if tokenizer is not None and not isinstance(tokenizer, str):
        raise UsageError(f"rk.export: tokenizer= is the tokenizer's name (e.g. 'Qwen/Qwen3-8B'), got "
                         f"{type(tokenizer).__name__}")
    if chat_template is not None and not isinstance(chat_template, str):
        raise UsageError(f"rk.export: chat_template= is the template's text (tokenizer.chat_template), got "
                         f"{type(chat_template).__name__}")
    digest = hashlib.sha256(chat_template.encode()).hexdigest() if chat_template is not None else None
    return tokenizer, digest


def branch_columns(t: dict[str, Any], identity: tuple[str | None, str | None]) -> dict[str, Any]:
    """The columns every format carries; the tokenizer and template are the
    export's (`identity`), else what the trace's info names."""
    info = t.get("info") or {}
    repeat = info.get("repeat")
    model = (t.get("agent") or {}).get("model")
    return {
        "group_id": str(info.get("example_id", t["task"]["key"])),
        "repetition_id": int(repeat) if isinstance(repeat, (int, float)) and not isinstance(repeat, bool) else None,
        "branch_id": t["id"], "model": None if model is None else str(model), "sampling": sampling_of_branch(t),
        "tokenizer": identity[0] or info.get("tokenizer"),
        "chat_template_sha256": identity[1] or info.get("chat_template_sha256"),
    }


def tools_value(tools: Any, tools_as: str) -> Any:
    """The tools offered, as a list of `{"type": "function", "function":
    {...}}` or as that list's JSON text; None when the trace does not say."""
    if tools is None:
        return None
    return json.dumps(tools, ensure_ascii=False) if tools_as == "string" else tools


def number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


# ---- the file ------------------------------------------------------------------


class RowFile:
    """Rows to `path` (.jsonl, or .parquet where `parquet_schema` is given),
    written to a `.part` file beside it and moved in place when complete:
    a failed export leaves nothing. JSON lines keep each row exactly (the
    datasets JSON loader reads nested values as its Json type); Parquet
    types every nested column as JSON text (Arrow's `arrow.json`, which
    datasets reads back as the same objects), never as an Arrow struct
    inferred over all rows, which would give a row the null fields of
    another's tool schema."""

    def __init__(self, path: Path | None, fmt: str, parquet_schema: Any = None) -> None:
        if path is None:
            raise UsageError(f"rk.export(format={fmt!r}) writes a file: give a path ending in "
                             + (".jsonl or .parquet" if parquet_schema is not None else ".jsonl"))
        suffix = path.suffix.lower()
        allowed = (".jsonl", ".parquet") if parquet_schema is not None else (".jsonl",)
        if suffix not in allowed:
            raise UsageError(f"rk.export(format={fmt!r}): {path.name!r} ends in {suffix or 'no suffix'}; "
                             f"name the file with one of {', '.join(allowed)}")
        self.path, self.format, self.rows = path, fmt, 0
        self.part = path.with_name(f".{path.name}.part")
        self._json_columns: list[str] = []
        self._schema = self._store = self._writer = None
        if suffix == ".parquet":
            self._parquet(parquet_schema)
            self._file = None
        else:
            self._file = open(self.part, "w", encoding="utf-8")

    def _parquet(self, schema: Any) -> None:
        from ...core.dependencies import pa, pq

        self._schema = schema
        # Arrow builds no JSON-typed column from Python objects: rows are
        # built as text, then cast to the JSON type (the same bytes).
        fields = []
        for field in schema:
            json_type = field.type == pa.json_() or (pa.types.is_list(field.type)
                                                     and field.type.value_type == pa.json_())
            if json_type:
                self._json_columns.append(field.name)
                text = pa.string() if field.type == pa.json_() else pa.list_(pa.string())
                fields.append(pa.field(field.name, text))
            else:
                fields.append(field)
        self._store = pa.schema(fields)
        self._writer = pq.ParquetWriter(self.part, schema, compression="zstd")

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        self.rows += len(rows)
        if self._file is not None:
            self._file.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
            return
        from ...core.dependencies import pa

        dumps = json.dumps
        for row in rows:
            for name in self._json_columns:
                value = row.get(name)
                if value is None:
                    continue
                row[name] = ([dumps(v, ensure_ascii=False) for v in value] if isinstance(value, list)
                             and self._store.field(name).type != pa.string() else dumps(value, ensure_ascii=False))
        self._writer.write_table(pa.Table.from_pylist(rows, schema=self._store).cast(self._schema))

    def close(self) -> Path:
        """Finish the file and move it in place."""
        self._end()
        os.replace(self.part, self.path)
        return self.path

    def discard(self) -> None:
        self._end()
        self.part.unlink(missing_ok=True)

    def _end(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def write_meta(path: Path, fmt: str, source: ExportSource, rows: int, options: dict[str, Any]) -> Path:
    """Record the export in `export_meta.json` beside the file, under the
    file's name (several exports to one folder keep one entry each)."""
    meta_path = path.with_name("export_meta.json")
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    except ValueError:
        meta = {}
    files = meta.get("files") if isinstance(meta.get("files"), dict) else {}
    files[path.name] = {
        "rollkit_version": __version__, "format": fmt, "format_version": FORMAT_VERSION, "rows": rows,
        "filters": {"where": source.where}, "options": options,
    }
    tmp = meta_path.with_name(".export_meta.json.part")
    tmp.write_text(json.dumps({"files": files}, indent=1, sort_keys=True, default=str) + "\n")
    os.replace(tmp, meta_path)
    return meta_path
