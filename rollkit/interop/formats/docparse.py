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

Both read through rollkit.core.safe_read's bounds (a regular file, the
line and document sizes, nesting, the memory a parse may take): a file
that passes them is refused there with a `TraceFileError` naming it, not
parsed here first. A file that is merely not this shape raises ValueError
(the sniffer does not claim it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...core import safe_read

__all__ = ["document", "first_record", "take_document"]

_kept: tuple[tuple[str, int, int], Any] | None = None


def _key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def document(path: Path) -> Any:
    """The file parsed as one JSON document; raises ValueError (or
    OSError) when it is not one, `TraceFileError` when it passes a bound.
    A file that does not open with `{` is not parsed (no format here is a
    bare list or scalar), nor is a JSON lines file (its first line is a
    whole value and more follows)."""
    global _kept
    key = _key(path)
    if _kept is not None and _kept[0] == key:
        if isinstance(_kept[1], _NotOne):  # every sniffer asks; the file is read and refused once
            raise ValueError(_kept[1].why)
        return _kept[1]
    try:
        parsed = _document(path)
    except ValueError as exc:
        if isinstance(exc, safe_read.TraceFileError):
            raise
        _kept = (key, _NotOne(str(exc)))
        raise
    _kept = (key, parsed)
    return parsed


def _first_object_line(path: Path) -> tuple[int, bytes]:
    """The number and bytes of the first line that is not blank, if it opens a JSON object."""
    first = safe_read.first_line(path)
    if first is None:
        raise ValueError("an empty file")
    if first[1].lstrip()[:1] != b"{":
        raise ValueError("not a JSON object")
    return first


def _document(path: Path) -> Any:
    number, line = _first_object_line(path)
    try:
        value = _loads(path, line, number)
    except json.JSONDecodeError:  # the document goes on past its first line
        data = safe_read.read_document(path)
        return _loads(path, data, None)
    if _rest_is_blank(path, number):
        return value  # a document on one line
    raise ValueError("JSON lines, not one document")


def _rest_is_blank(path: Path, number: int) -> bool:
    for later, line in safe_read.lines(path):
        if later > number and (line is None or line.strip()):
            return False
    return True


def _loads(path: Path, data: bytes, number: int | None) -> Any:
    """`data` parsed within the bounds; past one, a TraceFileError naming the file (and line)."""
    try:
        return safe_read.loads(data.decode("utf-8"))
    except safe_read.TooDeep as exc:
        where = f"{path}: line {number}" if number is not None else str(path)
        raise safe_read.TraceFileError(f"{where} {exc}", path=path, line=number) from None


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
    when it is not JSON, `TraceFileError` when it passes a bound)."""
    number, line = _first_object_line(path)
    return _loads(path, line, number)
