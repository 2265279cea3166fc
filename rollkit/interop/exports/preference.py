"""The "preference" export: prompt / chosen / rejected pairs, as DPO takes them.

`rk.export(source, "pairs.jsonl", format="preference")` pairs branches
that answered the same prompt and were scored differently:

- from forks (`pair_source="fork"`): a fork at turn k and its parent, and
  forks of one parent at one turn, share the prefix; its messages are the
  `prompt`, and each branch's first reply after it is its answer;
- from groups (`pair_source="group"`): root rollouts of one task (one
  `group_id`, e.g. the repeats of a run): two of them share their
  messages up to where they part; those shared messages (at least the
  opening system and user messages) are the `prompt` and the two replies
  where they part the answers. Two that part at a tool result or a user
  turn (not the model's doing) make no pair.

`chosen` and `rejected` are each one assistant message (the reply the
branch sampled at that prompt, tool calls included), by the branch's
scored reward (`score_chosen`, `score_rejected`): what DPO compares is
what the model chose at one point, given one context. Which pairs: with
`pairs="best_worst"` (the default) the best against the worst of each set,
with `pairs="all"` every pair; either only where the rewards differ by more
than `margin` (default 0: any difference), and never two identical
replies. Rows also carry `tools`, the ids of both branches
(`branch_id` is the chosen one's, `rejected_branch_id`), `parent_id` and
`forked_at_turn` (fork pairs) and the chosen branch's columns
(`branches.BRANCH_COLUMNS`).

The source is read one group at a time (a run's rollouts ordered by
group by SQL, then read at their byte offsets; a fork has its parent's
group), so memory holds one group's branches; a first pass reads only the
forks' lines, for the turns each parent was forked at. JSON lines only:
every value as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.gcpause import paused
from ...core.errors import UsageError
from . import ExportSource
from .branches import (BRANCH_COLUMNS, RowFile, branch_columns, chat_messages, forked_at, own_start, records,
                       template_identity, tools_value, write_meta)
from ...core.totals import record_reward

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
    # a group's roots: (reward, whole conversation, columns), paired where they part
    roots: list[tuple[float, list[dict[str, Any]], dict[str, Any]]] | None = None


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
            for sets in _groups(source, identity):
                for found in sets:
                    out.write(list(_pairs_of(found, pairs, float(margin), tools_as)))
        written = out.close()
    except BaseException:
        out.discard()
        raise
    write_meta(written, "preference", source, out.rows, {"pairs": pairs, "margin": margin, "tools_as": tools_as,
                                                         "tokenizer": tokenizer})
    return written


def _fork_points(source: ExportSource) -> dict[str, list[int]]:
    """The turns each parent was forked at, by parent id: where a parent's
    own reply is an answer to compare (a first pass that parses only the
    forks' lines)."""
    points: dict[str, set[int]] = {}
    if source.run is None:
        origins = [t.info["forked_from"] for t in source.given if "forked_from" in t.info]
    else:
        origins = [(json.loads(line).get("info") or {}).get("forked_from") for line in source.lines()
                   if b'"forked_from"' in line]
    for origin in origins:
        if origin:
            points.setdefault(origin[0], set()).add(int(origin[1]))
    return {parent: sorted(turns) for parent, turns in points.items()}


def _groups(source: ExportSource, identity: tuple[str | None, str | None]) -> Iterator[list[_Set]]:
    """The sets of one group (task) at a time, read in group order: memory
    holds one group's branches."""
    points = _fork_points(source)
    current, sets = None, _Sets(identity)
    for t, _ in records(source, by_group=True)[1]:
        group = str((t.get("info") or {}).get("example_id", t["task"]["key"]))
        if group != current:
            yield sets.done()
            current, sets = group, _Sets(identity)
        sets.add(t, points.get(t["id"], ()))
    yield sets.done()


class _Sets:
    """The sets of branches of one group: forks with their parent at each
    turn they were forked at, and the group's roots."""

    def __init__(self, identity: tuple[str | None, str | None]) -> None:
        self.identity = identity
        self.forks: dict[tuple, _Set] = {}
        self.roots: list[tuple[float, list[dict[str, Any]], dict[str, Any]]] = []
        self.first: dict[str, Any] | None = None

    def add(self, t: dict[str, Any], turns: Any) -> None:
        reward = record_reward(t)
        if reward is None:
            return
        parent, k = forked_at(t)
        messages, sampled = t.get("messages") or [], t.get("sampled") or []
        columns = branch_columns(t, self.identity)
        if self.first is None:
            self.first = {"tools": (t.get("info") or {}).get("tools"), "task_key": t["task"]["key"]}
        if parent is None:
            self.roots.append((reward, chat_messages(messages), columns))
        for owner, turn in ([(parent, k)] if parent else []) + [(t["id"], turn) for turn in turns]:
            start = own_start(t) if owner == parent else (sampled[turn] if len(sampled) > turn else None)
            if start is None:
                continue
            prompt = chat_messages(messages[:start])
            key = (owner, turn, json.dumps(prompt, sort_keys=True))
            found = self.forks.get(key)
            if found is None:
                found = self.forks[key] = _Set("fork", prompt, (t.get("info") or {}).get("tools"), t["task"]["key"],
                                               owner, turn)
            found.members.append((reward, chat_messages(messages[start:start + 1])[0], columns))

    def done(self) -> list[_Set]:
        """The fork sets, then the roots paired where their conversations
        part: the shared messages are the prompt, the replies where they
        part the answers (a set per pair of roots, made by `_pairs_of`)."""
        out = list(self.forks.values())
        if len(self.roots) > 1 and self.first is not None:
            out.append(_Set("group", [], self.first["tools"], self.first["task_key"], roots=self.roots))
        return out


def _parting(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int | None:
    """Where two conversations part, when it is at a reply of each (a
    parting at a tool result or a user turn is not the model's doing)."""
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    if i == len(a) or i == len(b) or a[i]["role"] != "assistant" or b[i]["role"] != "assistant":
        return None
    return i


def _candidates(found: _Set, how: str) -> list[tuple[Any, Any]]:
    members = found.members if found.roots is None else found.roots
    if len(members) < 2:
        return []
    if how == "best_worst":
        best = max(range(len(members)), key=lambda i: members[i][0])
        worst = min(range(len(members)), key=lambda i: members[i][0])
        return [(members[best], members[worst])]
    return [(a, b) for i, a in enumerate(members) for b in members[i + 1:]]


def _pairs_of(found: _Set, how: str, margin: float, tools_as: str) -> Iterator[dict[str, Any]]:
    for a, b in _candidates(found, how):
        chosen, rejected = (a, b) if a[0] >= b[0] else (b, a)
        if chosen[0] - rejected[0] <= margin:
            continue
        prompt, good, bad = found.prompt, chosen[1], rejected[1]
        if found.roots is not None:
            at = _parting(good, bad)
            if at is None:
                continue
            prompt, good, bad = good[:at], good[at], bad[at]
        if good == bad:
            continue
        yield {"prompt": prompt, "chosen": [good], "rejected": [bad],
               "score_chosen": chosen[0], "score_rejected": rejected[0], "pair_source": found.source,
               "tools": tools_value(found.tools, tools_as), **chosen[2], "rejected_branch_id": rejected[2]["branch_id"],
               "parent_id": found.parent, "forked_at_turn": found.turn, "task_key": found.task_key}
