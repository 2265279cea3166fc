"""The "tokens" export: one merged token sequence per branch, with labels.

`rk.export(source, "seqs.jsonl", format="tokens")` (or `.parquet`) joins
a branch's turns into the sequence a trainer takes whole (TRL's `input_ids`
+ `labels`; prime-rl, verl and SkyRL one sequence per branch with a mask
that is 1 only on sampled tokens). The prefix rule: the first own call's
prompt ids open the sequence; each next call's prompt must start with the
sequence so far, and adds only its new suffix (tool results, user turns,
template tokens: not trained), then its completion ids (trained). Where a
call's prompt does not extend the sequence (a program rewrote its
history, a reply was rewritten), a new sample starts: `sample` counts them
within the branch and `prefix_broken` flags each one after the first.

A fork's first `forked_at_turn` calls are its parent's: their tokens are
the prompt of its first own call, never trained. A reply a response
interceptor rewrote keeps mask 0 (the rollout went on with text the model
did not sample), as does, with `mask_truncated=True`, one cut by the
length limit. Calls that kept no token ids are left out with a warning
counting them; none at all is an error naming how to record them.

Columns: the ids (`id`, `task_key`, `parent_id`, `forked_at_turn`,
`sample`, `prefix_broken`, `turns`), `input_ids`, `labels` (-100 except
sampled tokens), `assistant_masks` (1 on sampled tokens), the same arrays
under prime-rl's names (`prompt_ids`, `completion_ids`, `completion_mask`,
`completion_logprobs`: 0.0 where a token was not sampled), `reward`,
`advantage` (with `advantage="mean"` the reward less its group's mean,
`"mean_std"` also divided by the group's standard deviation, GRPO's;
0.0 in a group whose rewards are all equal; null otherwise), `truncated`,
and the columns every format has (`branches.BRANCH_COLUMNS`). The per-turn
rows stay the "rl" format's. Reads each trace's JSON object, never a
`Trace`, and writes in batches: memory is bounded by a batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core.dependencies import pa
from ...core.gcpause import paused
from ...core.errors import UsageError
from . import ExportSource
from .branches import (BRANCH_COLUMNS, RowFile, branch_columns, forked_at, group_rewards, records,
                       template_identity, write_meta)
from .rl import HOW_TO_RECORD
from ...core.totals import record_reward
from .sft import is_truncated

__all__ = ["write", "COLUMNS", "samples_of"]

COLUMNS = ("id", "task_key", *BRANCH_COLUMNS, "parent_id", "forked_at_turn", "sample", "prefix_broken", "turns",
           "input_ids", "labels", "assistant_masks", "prompt_ids", "completion_ids", "completion_mask",
           "completion_logprobs", "reward", "advantage", "truncated")
_ADVANTAGES = (None, "mean", "mean_std")
_BATCH = 1024


def write(source: ExportSource, path: Path | None, *, advantage: str | None = None, mask_truncated: bool = False,
          tokenizer: str | None = None, chat_template: str | None = None) -> Path:
    """Write one merged sequence per branch (per sample) to `path` (.jsonl or .parquet)."""
    if advantage not in _ADVANTAGES:
        raise UsageError(f"rk.export(format='tokens'): advantage is None, 'mean' or 'mean_std', got {advantage!r}")
    if not isinstance(mask_truncated, bool):
        raise UsageError(f"rk.export(format='tokens'): mask_truncated is True or False, got {mask_truncated!r}")
    identity = template_identity(tokenizer, chat_template)
    groups = group_rewards(source) if advantage else {}
    out = RowFile(path, "tokens", _schema())
    counts = {"rollouts": 0, "turns": 0, "without_ids": 0}
    try:
        with paused():
            _write_all(out, records(source)[1], counts, identity, groups, advantage, mask_truncated)
        written = out.close()
    except BaseException:
        out.discard()
        raise
    if not out.rows:
        written.unlink()
        raise UsageError(f"rk.export(format='tokens'): no call kept its token ids ({counts['rollouts']} rollouts, "
                         f"{counts['turns']} own turns): nothing to train on; {HOW_TO_RECORD}")
    if counts["without_ids"]:
        warnings.warn(f"rk.export(format='tokens'): {counts['without_ids']} of {counts['turns']} turns kept no token "
                      f"ids and were left out; {HOW_TO_RECORD}", UserWarning, stacklevel=3)
    write_meta(written, "tokens", source, out.rows, {"advantage": advantage, "mask_truncated": mask_truncated,
                                                     "tokenizer": tokenizer})
    return written


def _write_all(out: RowFile, items: Iterator[tuple[dict[str, Any], int]], counts: dict[str, int],
               identity: tuple[str | None, str | None], groups: dict[str, tuple[float, float, int]],
               advantage: str | None, mask_truncated: bool) -> None:
    batch: list[dict[str, Any]] = []
    for record, _ in items:
        counts["rollouts"] += 1
        common = {"id": record["id"], "task_key": record["task"]["key"], **branch_columns(record, identity)}
        parent, k = forked_at(record)
        reward = record_reward(record)
        common.update(parent_id=parent, forked_at_turn=k if parent else None)
        extra = {"reward": reward, "advantage": _advantage(reward, groups.get(common["group_id"]), advantage),
                 "truncated": is_truncated(record)}
        for sample in samples_of(record, mask_truncated=mask_truncated, counts=counts):
            batch.append({**common, **sample, **extra})
            if len(batch) >= _BATCH:
                out.write(batch)
                batch = []
    out.write(batch)


def _advantage(reward: float | None, group: tuple[float, float, int] | None, how: str | None) -> float | None:
    if how is None or reward is None or group is None:
        return None
    mean, std, _ = group
    if how == "mean":
        return reward - mean
    return (reward - mean) / std if std > 0 else 0.0


def samples_of(t: dict[str, Any], *, mask_truncated: bool = False,
               counts: dict[str, int] | None = None) -> Iterator[dict[str, Any]]:
    """The merged samples of one branch's JSON object (see the module doc)."""
    counts = counts if counts is not None else {"turns": 0, "without_ids": 0}
    _, k = forked_at(t)
    rewritten = {r.get("call") for r in t.get("response_rewrites") or ()}
    previous: list[int] | None = None
    current: _Sample | None = None
    committed = samples = 0
    for call in t.get("model_calls") or ():
        tokens = call.get("tokens") or {}
        prompt, ids = tokens.get("prompt_ids"), tokens.get("ids")
        if prompt is not None and tokens.get("prompt_shared") and previous is not None:
            prompt = previous[:tokens["prompt_shared"]] + prompt  # as saved: the shared part left out
        if prompt is not None and ids is not None:
            previous = prompt + ids
        if not call.get("committed"):
            continue
        committed += 1
        if committed <= k:
            continue  # the parent's turn: context of the fork's first own call
        counts["turns"] += 1
        if prompt is None or ids is None:
            counts["without_ids"] += 1
            continue
        sampled = not (call.get("index") in rewritten or (mask_truncated and call.get("finish_reason") == "length"))
        if current is None or not current.extended_by(prompt):
            if current is not None:
                yield current.row(samples)
                samples += 1
            current = _Sample(prompt, broken=samples > 0)
        current.add(ids, tokens.get("logprobs"), sampled)
    if current is not None:
        yield current.row(samples)


class _Sample:
    """One merged sequence under construction."""

    def __init__(self, prompt: list[int], broken: bool) -> None:
        self.ids = list(prompt)
        self.mask = [0] * len(prompt)
        self.logprobs = [0.0] * len(prompt)
        self.prompt_length = len(prompt)
        self.broken = broken
        self.turns = 0

    def extended_by(self, prompt: list[int]) -> bool:
        """Whether `prompt` starts with the sequence so far; if so, its new
        suffix is added as context."""
        n = len(self.ids)
        if len(prompt) < n or prompt[:n] != self.ids:
            return False
        suffix = prompt[n:]
        self.ids += suffix
        self.mask += [0] * len(suffix)
        self.logprobs += [0.0] * len(suffix)
        return True

    def add(self, ids: list[int], logprobs: list[float] | None, sampled: bool) -> None:
        self.turns += 1
        self.ids += ids
        self.mask += [1 if sampled else 0] * len(ids)
        if logprobs is not None and len(logprobs) == len(ids) and sampled:
            self.logprobs += logprobs
        else:
            self.logprobs += [0.0] * len(ids)

    def row(self, sample: int) -> dict[str, Any]:
        p = self.prompt_length
        return {"sample": sample, "prefix_broken": self.broken, "turns": self.turns, "input_ids": self.ids,
                "labels": [i if m else -100 for i, m in zip(self.ids, self.mask)], "assistant_masks": self.mask,
                "prompt_ids": self.ids[:p], "completion_ids": self.ids[p:], "completion_mask": self.mask[p:],
                "completion_logprobs": self.logprobs[p:]}


def _schema() -> Any:
    ints, text = pa.list_(pa.int64()), pa.string()
    types = {"repetition_id": pa.int64(), "sampling": pa.json_(), "forked_at_turn": pa.int64(),
             "sample": pa.int64(), "prefix_broken": pa.bool_(), "turns": pa.int64(), "input_ids": ints,
             "labels": ints, "assistant_masks": pa.list_(pa.int8()), "prompt_ids": ints, "completion_ids": ints,
             "completion_mask": pa.list_(pa.int8()), "completion_logprobs": pa.list_(pa.float64()),
             "reward": pa.float64(), "advantage": pa.float64(), "truncated": pa.bool_()}
    return pa.schema([pa.field(c, types.get(c, text)) for c in COLUMNS], metadata={b"rollkit.export": b"tokens"})
