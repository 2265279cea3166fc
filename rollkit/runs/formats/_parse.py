"""Recognising another tool's file by parsing it, not by looking for a key
in its first bytes.

A JSON document's telling field (a trajectory's `history`, tau2's
`simulations`) may come after any amount of data, so the sniffers parse the
whole document (`document`) or a JSON lines file's first record
(`first_record`) and look at its structure. The parsed document is kept for
the read that follows a successful sniff (one entry, checked against the
file's size and modification time, handed over once), so recognising a file
costs no second parse. Reads nothing but the file it is given; decides no
format itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["document", "first_record", "take_document"]

_kept: tuple[tuple[str, int, int], Any] | None = None


def _key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def document(path: Path) -> Any:
    """The file parsed as one JSON document; raises ValueError (or
    OSError) when it is not one. A file that does not open with `{` is not
    parsed (no format here is a bare list or scalar)."""
    global _kept
    key = _key(path)
    if _kept is not None and _kept[0] == key:
        if isinstance(_kept[1], _NotOne):  # every sniffer asks; the file is read and refused once
            raise ValueError(_kept[1].why)
        return _kept[1]
    with open(path, "rb") as f:
        data = f.read()
    try:
        if not data.lstrip()[:1] == b"{":
            raise ValueError("not a JSON object")
        parsed = json.loads(data.decode("utf-8"))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        _kept = (key, _NotOne(str(exc)))
        raise
    _kept = (key, parsed)
    return parsed


class _NotOne:
    """A file `document` found is not one JSON document, and why."""

    def __init__(self, why: str) -> None:
        self.why = why


def take_document(path: Path) -> Any | None:
    """The document `document` parsed for this very file, handed over once
    (None when it holds no such document)."""
    global _kept
    if _kept is None or _kept[0] != _key(path):
        return None
    parsed = _kept[1]
    _kept = None
    return None if isinstance(parsed, _NotOne) else parsed


def first_record(path: Path) -> Any:
    """The first non-empty line of a JSON lines file, parsed (ValueError
    when it is not JSON)."""
    with open(path, "rb") as f:
        head = f.read(1)
        if head not in (b"{", b" ", b"\n", b"\r", b"\t"):
            raise ValueError("not a JSON object")
        f.seek(0)
        for line in f:
            if line.strip():
                return json.loads(line.decode("utf-8"))
    raise ValueError("empty file")
