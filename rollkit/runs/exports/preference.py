"""The "preference" export: prompt / chosen / rejected pairs, as DPO takes them.

`rk.export(source, "pairs.jsonl", format="preference")` pairs branches
that answered the same prompt and were scored differently:

- from forks (`pair_source="fork"`): a fork at turn k and its parent, and
  forks of one parent at one turn, share the prefix; its messages are the
  `prompt`, and each branch's first reply after it is its answer;
- from groups (`pair_source="group"`): root rollouts of one task (one
  `group_id`, e.g. the repeats of a run) whose prompts (the opening
  messages) are the same; each one's first reply is its answer.

`chosen` and `rejected` are each one assistant message (the reply the
branch sampled at that prompt, tool calls included), by the branch's
scored reward (`score_chosen`, `score_rejected`). Which pairs: with
`pairs="best_worst"` (the default) the best against the worst of each set,
with `pairs="all"` every pair; either only where the rewards differ by more
than `margin` (default 0: any difference), and never two identical
replies. Rows also carry `tools`, the ids of both branches
(`branch_id` is the chosen one's, `rejected_branch_id`), `parent_id` and
`forked_at_turn` (fork pairs) and the chosen branch's columns
(`branches.BRANCH_COLUMNS`).

A set is held until the source is read (pairs need every member): per
branch, its reward, its reply and its ids; each prompt once per set.
JSON lines only: every value as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core._gcpause import paused
from ...core.errors import UsageError
from . import ExportSource
from .branches import (BRANCH_COLUMNS, RowFile, branch_columns, chat_messages, forked_at, own_start, records,
                       template_identity, tools_value, write_meta)
from .sft import scored_reward

__all__ = ["write", "COLUMNS"]

COLUMNS = ("prompt", "chosen", "rejected", "score_chosen", "score_rejected", "pair_source", "tools",
           *BRANCH_COLUMNS, "rejected_branch_id", "parent_id", "forked_at_turn", "task_key")
_PAIRS = ("best_worst", "all")


@dataclass
class _Set:
    """Branches that answered one prompt."""

    source: str
    prompt: list[dict[str, Any]]
    tools: Any
    task_key: str
    parent: str | None = None
    turn: int | None = None
    members: list[tuple[float, dict[str, Any], dict[str, Any]]] = field(default_factory=list)


def write(source: ExportSource, path: Path | None, *, pairs: str = "best_worst", margin: float = 0.0,
          tools_as: str = "objects", tokenizer: str | None = None, chat_template: str | None = None) -> Path:
    """Write the preference pairs of `source` to `path` (.jsonl)."""
    if pairs not in _PAIRS:
        raise UsageError(f"rk.export(format='preference'): pairs is 'best_worst' or 'all', got {pairs!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin < 0:
        raise UsageError(f"rk.export(format='preference'): margin is a reward difference >= 0, got {margin!r}")
    if tools_as not in ("objects", "string"):
        raise UsageError(f"rk.export(format='preference'): tools_as is 'objects' or 'string', got {tools_as!r}")
    identity = template_identity(tokenizer, chat_template)
    out = RowFile(path, "preference")
    try:
        with paused():
            sets = _sets(source, identity)
            for chosen_set in sets.values():
                out.write(list(_pairs_of(chosen_set, pairs, float(margin), tools_as)))
        written = out.close()
    except BaseException:
        out.discard()
        raise
    write_meta(written, "preference", source, out.rows, {"pairs": pairs, "margin": margin, "tools_as": tools_as,
                                                         "tokenizer": tokenizer})
    return written


def _fork_points(source: ExportSource) -> set[tuple[str, int]]:
    """(parent id, turn) of every fork in the source: where a parent's own
    reply is an answer to compare."""
    if source.run is None:
        return {(t.info["forked_from"][0], int(t.info["forked_from"][1])) for t in source.given
                if "forked_from" in t.info}
    points = set()
    for line in source.lines():
        if b'"forked_from"' in line:
            origin = (json.loads(line).get("info") or {}).get("forked_from")
            if origin:
                points.add((origin[0], int(origin[1])))
    return points


def _sets(source: ExportSource, identity: tuple[str | None, str | None]) -> dict[tuple, _Set]:
    """The sets of branches that answered one prompt, each member with its
    reward, its reply and its columns."""
    points = _fork_points(source)
    by_parent: dict[str, list[int]] = {}
    for parent, turn in points:
        by_parent.setdefault(parent, []).append(turn)
    sets: dict[tuple, _Set] = {}
    for t, _ in records(source)[1]:
        reward = scored_reward(t)
        if reward is None:
            continue
        parent, k = forked_at(t)
        answers = [(parent, k)] if parent else [(None, 0)]
        answers += [(t["id"], turn) for turn in by_parent.get(t["id"], ())]
        messages = t.get("messages") or []
        sampled = t.get("sampled") or []
        for owner, turn in answers:
            start = own_start(t) if owner == parent else (sampled[turn] if len(sampled) > turn else None)
            if start is None:
                continue
            prompt = chat_messages(messages[:start])
            text = json.dumps(prompt, sort_keys=True)
            key = ("fork", owner, turn, text) if owner else ("group", str((t.get("info") or {}).get(
                "example_id", t["task"]["key"])), text)
            found = sets.get(key)
            if found is None:
                found = sets[key] = _Set("fork" if owner else "group", prompt, (t.get("info") or {}).get("tools"),
                                         t["task"]["key"], owner, turn if owner else None)
            found.members.append((reward, chat_messages(messages[start:start + 1])[0], branch_columns(t, identity)))
    return sets


def _pairs_of(found: _Set, how: str, margin: float, tools_as: str) -> Iterator[dict[str, Any]]:
    members = found.members
    if len(members) < 2:
        return
    if how == "best_worst":
        best = max(range(len(members)), key=lambda i: members[i][0])
        worst = min(range(len(members)), key=lambda i: members[i][0])
        candidates = [(members[best], members[worst])]
    else:
        candidates = [(a, b) for i, a in enumerate(members) for b in members[i + 1:]]
    for a, b in candidates:
        chosen, rejected = (a, b) if a[0] >= b[0] else (b, a)
        if chosen[0] - rejected[0] <= margin or chosen[1] == rejected[1]:
            continue
        yield {"prompt": found.prompt, "chosen": [chosen[1]], "rejected": [rejected[1]],
               "score_chosen": chosen[0], "score_rejected": rejected[0], "pair_source": found.source,
               "tools": tools_value(found.tools, tools_as), **chosen[2], "rejected_branch_id": rejected[2]["branch_id"],
               "parent_id": found.parent, "forked_at_turn": found.turn, "task_key": found.task_key}
