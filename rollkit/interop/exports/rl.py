"""The "rl" export: token-level training rows, one per turn.

`rk.export(source, "rows.parquet", format="rl")` (or a `.jsonl` path)
writes one row per turn (a committed model call) whose call kept the
reply's token ids (`ModelCall.tokens`, recorded when the model is an
`OpenAIModel(logprobs=True, token_ids=True)` on an endpoint that returns
ids, such as vLLM). One row per turn, not per rollout: a program that
rewrites its history sends prompts that do not extend the previous turn's
tokens, so only a turn's own prompt and reply are always one sequence; a
trainer that wants a rollout as one sequence joins its turns where
`prompt_ids` of turn t+1 starts with `prompt_ids + completion_ids` of turn t.

The columns (`ROW_COLUMNS`): the trace `id`, the `rollout_id` a batch run
named it (else the trace id), `task_key`, `turn` (1, 2, ... as
rk.frames.turns numbers them) and its `call` index, `prompt_ids` (None
where the endpoint gave no prompt ids), `completion_ids`,
`completion_logprobs` (aligned with the ids; None when not asked for),
`loss_mask` (aligned with the ids: 1 where the loss should count a token;
0 for every token of a reply a response interceptor rewrote, since the
rollout went on with text the model did not sample, and, with
`mask_truncated=True`, of a reply cut by the length limit), the rollout's
`reward` (None when it was not scored), `finish_reason`, `truncated` and
the agent's `model`, and the columns every training format has
(`group_id`, `repetition_id`, `branch_id`, the call's `sampling`,
`tokenizer`, `chat_template_sha256`: `rollkit.interop.exports.branches`).

This module reads traces one at a time and writes rows in batches
(`branches.RowFile`), so memory stays bounded by `batch_rows`; it imports
pyarrow only for Parquet and never imports rollkit.notebook.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core.errors import UsageError
from ...core.trace import Trace
from ...core.dependencies import pa
from .branches import RowFile, group_of, template_identity, write_meta

__all__ = ["write", "ROW_COLUMNS", "rows_of", "HOW_TO_RECORD"]

ROW_COLUMNS = ("id", "rollout_id", "task_key", "turn", "call", "prompt_ids", "completion_ids",
               "completion_logprobs", "loss_mask", "reward", "finish_reason", "truncated", "model", "group_id",
               "repetition_id", "branch_id", "sampling", "tokenizer", "chat_template_sha256")
_SUFFIXES = {".parquet": "parquet", ".jsonl": "jsonl"}
HOW_TO_RECORD = ("record them with OpenAIModel(..., logprobs=True, token_ids=True) against an endpoint that returns "
        "token ids (vLLM answers return_token_ids with them; OpenAI's own API returns logprobs but no ids)")


def write(source: Any, path: Path | None, *, mask_truncated: bool = False, batch_rows: int = 4096,
          tokenizer: str | None = None, chat_template: str | None = None) -> Path:
    """Write the turns of `source` (an ExportSource) as token-level rows to
    `path` (.parquet or .jsonl); returns the path. Turns whose call kept no
    token ids are left out, with one warning counting them; none at all is
    an error naming how to record them."""
    _kind(path)
    if not isinstance(mask_truncated, bool):
        raise UsageError(f"rk.export(format='rl'): mask_truncated is True or False, got {mask_truncated!r}")
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise UsageError(f"rk.export(format='rl'): batch_rows is a whole number of rows >= 1, got {batch_rows!r}")
    identity = template_identity(tokenizer, chat_template)
    counts = {"rollouts": 0, "turns": 0, "without_ids": 0, "with_logprobs_only": 0}
    out = RowFile(path, "rl", _schema())
    try:
        batch: list[dict[str, Any]] = []
        for row in _counted_rows(source.traces(), counts, mask_truncated):
            batch.append({**row, "tokenizer": identity[0], "chat_template_sha256": identity[1]})
            if len(batch) >= batch_rows:
                out.write(batch)
                batch = []
        out.write(batch)
        if not out.rows:
            raise UsageError(_nothing_to_write(counts))
        written = out.close()
    except BaseException:
        out.discard()
        raise
    if counts["without_ids"]:
        warnings.warn(f"rk.export(format='rl'): {counts['without_ids']} of {counts['turns']} turns kept no token "
                      f"ids and were left out; {HOW_TO_RECORD}", UserWarning, stacklevel=3)
    write_meta(written, "rl", source, out.rows, {"mask_truncated": mask_truncated, "tokenizer": tokenizer})
    return written


def _kind(path: Path | None) -> str:
    if path is None:
        raise UsageError("rk.export(format='rl') writes a file: give a path ending in .parquet or .jsonl")
    kind = _SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise UsageError(f"rk.export(format='rl'): {path.name} ends in {path.suffix or 'no suffix'!r}; "
                         "give a path ending in .parquet or .jsonl")
    return kind


def _nothing_to_write(counts: dict[str, int]) -> str:
    where = f"{counts['rollouts']} rollouts, {counts['turns']} turns"
    if not counts["turns"]:
        return f"rk.export(format='rl'): the source holds no turns ({where}): nothing to train on"
    if counts["with_logprobs_only"]:
        return (f"rk.export(format='rl'): the traces hold logprobs but no token ids ({where}, "
                f"{counts['with_logprobs_only']} with logprobs only); an RL row needs the ids: {HOW_TO_RECORD}")
    return f"rk.export(format='rl'): the traces hold no token ids ({where}); {HOW_TO_RECORD}"


def _counted_rows(traces: Iterator[Trace], counts: dict[str, int], mask_truncated: bool) -> Iterator[dict[str, Any]]:
    for trace in traces:
        counts["rollouts"] += 1
        for row in rows_of(trace, mask_truncated=mask_truncated, counts=counts):
            yield row


def rows_of(trace: Trace, *, mask_truncated: bool = False,
            counts: dict[str, int] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of one trace (see the module's doc); `counts` tallies the
    turns seen and those left out."""
    counts = counts if counts is not None else {"turns": 0, "without_ids": 0, "with_logprobs_only": 0}
    rewritten = {r.call for r in trace.response_rewrites}
    reward = trace.scored_reward
    rollout_id = trace.info.get("rollout_id")
    model = trace.agent.get("model")
    repeat = trace.info.get("repeat")
    turn = 0
    for call in trace.model_calls:
        if not call.committed:
            continue
        turn += 1
        counts["turns"] += 1
        tokens = call.tokens
        if tokens is None or tokens.ids is None:
            counts["without_ids"] += 1
            if tokens is not None and tokens.logprobs is not None:
                counts["with_logprobs_only"] += 1
            continue
        truncated = call.finish_reason == "length"
        masked = call.index in rewritten or (mask_truncated and truncated)
        yield {
            "id": trace.id, "rollout_id": str(rollout_id) if rollout_id is not None else trace.id,
            "task_key": trace.task.key, "turn": turn, "call": call.index,
            "prompt_ids": tokens.prompt_ids, "completion_ids": tokens.ids, "completion_logprobs": tokens.logprobs,
            "loss_mask": [0 if masked else 1] * len(tokens.ids), "reward": reward,
            "finish_reason": call.finish_reason, "truncated": truncated,
            "model": None if model is None else str(model), "group_id": group_of(trace),
            "repetition_id": repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else None,
            "branch_id": trace.id, "sampling": call.sampling,
        }


def _schema() -> Any:
    """The Parquet schema of the rows (`sampling` typed as JSON)."""
    return pa.schema([
        ("id", pa.string()), ("rollout_id", pa.string()), ("task_key", pa.string()), ("turn", pa.int64()),
        ("call", pa.int64()), ("prompt_ids", pa.list_(pa.int64())), ("completion_ids", pa.list_(pa.int64())),
        ("completion_logprobs", pa.list_(pa.float64())), ("loss_mask", pa.list_(pa.int8())),
        ("reward", pa.float64()), ("finish_reason", pa.string()), ("truncated", pa.bool_()),
        ("model", pa.string()), ("group_id", pa.string()), ("repetition_id", pa.int64()), ("branch_id", pa.string()),
        ("sampling", pa.json_()), ("tokenizer", pa.string()), ("chat_template_sha256", pa.string()),
    ], metadata={b"rollkit.export": b"rl"})
