"""The field census: every key path a format rollkit reads can hold, and
what becomes of it.

One table per format and version (`CENSUSES`), a line per key path:
`mapped` to a named trace field, `kept` verbatim in the trace's info (under
the info key named, or, for `kept` with no key, in `info["source"]` under
its source path by this module, a null value left out: it says only that
the source recorded nothing there), or `dropped` with the reason. A path
ending in `.**` covers everything under it (a free-form map kept whole: a
sample's metadata, tool arguments, a run's configuration; or a subtree
dropped whole). `*` stands for any list index, `{name}` for any key of a
map keyed by names (a reward breakdown, a usage per model), `{number}` for
any key whose value is a number (verifiers' early reward columns).

`unknown(census, record)` walks a record and returns, by concrete source
path ("messages.3.extra.foo"), every key the census does not list: the
importers keep them in `trace.info["unmapped"]` (a new field of a tool is
never dropped silently; `rollkit show` lists them), and the census test
(tests/test_census.py) fails on any in a fixture or collected public file.
Reads nothing from disk; imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Census", "Fate", "CENSUSES", "census_of", "unknown", "key_paths", "noted", "merged_notes"]

MAPPED, KEPT, DROPPED = "mapped", "kept", "dropped"
_FATES = (MAPPED, KEPT, DROPPED)


@dataclass(frozen=True)
class Fate:
    """What becomes of one key path: `kind` mapped / kept / dropped, `to`
    the trace field, the info key, or the reason; `whole` for a path whose
    whole subtree shares the fate."""

    kind: str
    to: str
    whole: bool = False


@dataclass
class _Node:
    fate: Fate | None = None
    children: dict[str, _Node] = field(default_factory=dict)


@dataclass
class Census:
    """One format's table: its name, the versions it covers, its entries by path."""

    format: str
    versions: str
    entries: dict[str, Fate]
    _root: _Node = field(default_factory=_Node, repr=False)

    def __post_init__(self) -> None:
        for path, fate in self.entries.items():
            node = self._root
            for part in path.split("."):
                node = node.children.setdefault(part, _Node())
            node.fate = fate

    def counts(self) -> dict[str, int]:
        """How many key paths it lists, and how many are mapped / kept / dropped."""
        out = {"paths": len(self.entries), **dict.fromkeys(_FATES, 0)}
        for fate in self.entries.values():
            out[fate.kind] += 1
        return out


def _parse(format_name: str, versions: str, table: str) -> Census:
    """A census from its text table: `path  fate  note` a line (`#` comments)."""
    entries: dict[str, Fate] = {}
    for line in table.strip().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path, kind, *note = line.split(None, 2)
        if kind not in _FATES:
            raise ValueError(f"census {format_name}: {path}: fate {kind!r} is not one of {_FATES}")
        whole = path.endswith(".**")
        path = path.removesuffix(".**")
        if path in entries:
            raise ValueError(f"census {format_name}: {path} is listed twice")
        entries[path] = Fate(kind, note[0] if note else "", whole)
    return Census(format_name, versions, entries)


def _child(node: _Node, key: str, value: Any) -> _Node | None:
    found = node.children.get(key)
    if found is None:
        found = node.children.get("{name}")
    if found is None and isinstance(value, (int, float)) and not isinstance(value, bool):
        found = node.children.get("{number}")
    return found


def key_paths(census: Census, record: Any, prefix: str = "",
              within: str = "") -> Iterator[tuple[str, Any, Fate | None]]:
    """Each key path of `record` the census decides on, as (concrete path,
    value, fate): a listed path's fate, None for a key it does not list
    (nothing under an unlisted key is walked). Under a whole entry only the
    paths listed beneath it are walked; the rest share its fate. `within`:
    the pattern `record` sits at in its file ("samples.*"), `prefix` its
    concrete path ("samples.3")."""
    return _walk(census, record, prefix, within, every=True)


def _path(where: Any) -> str:
    """A concrete path from its chain of (parent, key) pairs, built only when asked for."""
    parts = []
    while where is not None:
        where, key = where
        parts.append(str(key))
    return ".".join(reversed(parts))


def _walk(census: Census, record: Any, prefix: str, within: str,
          every: bool) -> Iterator[tuple[str, Any, Fate | None]]:
    """key_paths; with every=False only the keys the census does not list
    and those it keeps under their source path (what `noted` needs: the
    path of every other key is never made, a third of a file's read)."""
    start = census._root
    for part in within.split(".") if within else ():
        start = start.children.get(part) or _Node()
    root = (None, prefix) if prefix else None
    stack: list[tuple[Any, Any, _Node, bool]] = [(root, record, start, False)]
    empty = _Node()
    while stack:
        where, value, node, covered = stack.pop()
        covered = covered or node.fate is not None and node.fate.whole
        if isinstance(value, dict):
            for key, item in value.items():
                child = _child(node, str(key), item)
                if child is None:
                    if not covered:
                        yield _path((where, key)), item, None
                    continue
                fate = child.fate
                # (a null the census keeps says only "not recorded": not copied)
                if fate is not None and (every or item is not None and fate.kind == KEPT and fate.to.startswith("source")):
                    yield _path((where, key)), item, fate
                if isinstance(item, (dict, list)) and (child.children or fate is None or not fate.whole):
                    stack.append(((where, key), item, child, covered))
        elif isinstance(value, list):
            child = node.children.get("*")
            if child is None and covered:
                continue
            for index, item in enumerate(value):
                if isinstance(item, (dict, list)):  # a list of plain values: the path holding it is the entry
                    stack.append(((where, index), item, child or empty, covered))


def unknown(census: Census, record: Any, prefix: str = "", within: str = "") -> dict[str, Any]:
    """The keys of `record` the census does not list, by concrete source path."""
    return {path: value for path, value, fate in key_paths(census, record, prefix, within) if fate is None}


def noted(census_name: str, record: Any, prefix: str = "", within: str = "") -> dict[str, Any]:
    """What an importer adds to a trace's info for `record`: `unmapped`
    (keys the census does not list) and `source` (values the census keeps
    under their path), each only when there is any."""
    census = census_of(census_name)
    out: dict[str, Any] = {}
    unmapped: dict[str, Any] = {}
    source: dict[str, Any] = {}
    for path, value, fate in _walk(census, record, prefix, within, every=False):
        if fate is None:
            unmapped[path] = value
        elif fate.kind == KEPT and fate.to.startswith("source"):
            source[path] = value
    if unmapped:
        out["unmapped"] = unmapped
    if source:
        out["source"] = source
    return out


def merged_notes(*notes: dict[str, Any]) -> dict[str, Any]:
    """Several records' `noted` for one trace, as one."""
    out: dict[str, Any] = {}
    for note in notes:
        for key, values in note.items():
            out.setdefault(key, {}).update(values)
    return out


def census_of(name: str) -> Census:
    """The census named `name` (a key of CENSUSES)."""
    try:
        return CENSUSES[name]
    except KeyError:
        raise ValueError(f"no census named {name!r}; the censuses are {sorted(CENSUSES)}") from None


from ._census_tables import TABLES  # noqa: E402  (the tables are data; this module the mechanism)

CENSUSES: dict[str, Census] = {name: _parse(name, versions, table) for name, (versions, table) in TABLES.items()}
