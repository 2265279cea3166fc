"""Reading trace files that may be hostile, with bounded memory and time.

Every reader of a trace file (rollkit's own JSON lines, and each importer in
rollkit.interop.formats) goes through here, so one place refuses what would
hang or exhaust the process, each time with a `TraceFileError` naming the
file (and the line):

- anything but a regular file (a FIFO blocks forever, a device such as
  /dev/zero, or a symlink to one, never ends, a folder is no file) is
  refused before a byte is read;
- a JSON line longer than `MAX_LINE` is refused without holding it (its
  bytes are skipped in chunks), a whole-file JSON document larger than
  `MAX_DOCUMENT` is refused before it is read;
- JSON nested deeper than `MAX_DEPTH` (Python's recursion limit, which
  bounds its JSON parser; pydantic's own parser stops sooner) is refused
  as nested too deep, not a bare RecursionError;
- a zip (inspect's .eval) whose member or total decompressed size, as its
  directory declares them, passes `MAX_MEMBER` / `MAX_UNZIPPED` is refused
  before it is opened (Python's zip reader never inflates past the size
  a member declares);
- a line or document whose values would take more than `MAX_PARSED` in
  memory (estimated from its size and its count of brackets, braces,
  commas and quotes, before parsing: a file of empty lists takes many
  times its size once parsed) is
  refused; a document whose size alone says so (`MAX_DOCUMENT`) is
  refused before it is read. Format sniffers read through the same bounds
  (rollkit.interop.formats.docparse): recognising a file costs no more than
  reading it;
- a UTF-8 byte-order mark at the start of a file is dropped.

`TraceFileError` is defined here (rollkit.core.store re-exports it as
`rk.TraceFileError`). This module knows file bytes and JSON only; what a record means is the
format's.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import RollkitError

__all__ = ["TraceFileError", "MAX_LINE", "MAX_DOCUMENT", "MAX_DEPTH", "MAX_MEMBER", "MAX_UNZIPPED", "BOM",
           "MAX_PARSED", "DEEP", "TooDeep", "too_costly", "parse_cost", "check_regular", "check_document",
           "read_head", "read_document", "lines", "first_line", "line_batches", "too_long", "loads", "check_zip"]

# What one parse may hold: the text, its decoded copy and the values made
# from it (so a rollout's peak memory is bounded whatever file it is given).
MAX_PARSED = 192 * 2**20
MAX_LINE = 64 * 2**20  # one JSON line: one trace or one record
# A file that is one JSON document: its bytes, its text and its values are
# three times its size at least, all held at once.
MAX_DOCUMENT = MAX_PARSED // 3
MAX_DEPTH = 1000  # arrays and objects inside one another: Python's recursion limit bounds its JSON parser
DEEP = "is nested too deep (more than about 1000 arrays or objects inside one another)"
MAX_MEMBER = 256 * 2**20  # one member of a zip, decompressed
MAX_UNZIPPED = 1024 * 2**20  # all members of a zip, decompressed
BOM = b"\xef\xbb\xbf"


class TraceFileError(RollkitError, ValueError):
    """A trace file (or one of its lines or samples) is not what its format
    says. `line` is the line number (JSON lines) or None, `field` the dotted
    path of the bad field (e.g. "model_calls.0.usage.input_tokens") or None
    when the record is no JSON at all. `reason` is the message without the
    advice for Python callers (`hint`, e.g. "load with errors='skip'"), so
    the command line can give its own."""

    def __init__(self, message: str, *, path: Path, line: int | None = None, field: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(f"{message}; {hint}" if hint else message)
        self.reason = message
        self.path = path
        self.line = line
        self.field = field


def _error(path: Path, message: str, line: int | None = None) -> Exception:
    return TraceFileError(f"{path}: {message}", path=path, line=line)


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def check_regular(path: Path) -> os.stat_result:
    """Refuse anything but a regular file (a symlink is followed first)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _error(path, f"cannot be read: {exc.strerror}") from None
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return info
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")
    raise _error(path, f"is {kind}, not a trace file: rk.load reads regular files only")


def read_head(path: Path, size: int) -> bytes:
    """The first `size` bytes of a regular file, a byte-order mark dropped."""
    check_regular(path)
    with open(path, "rb") as f:
        head = f.read(size)
    return head[len(BOM):] if head.startswith(BOM) else head


def check_document(path: Path) -> None:
    """Refuse a JSON document file larger than MAX_DOCUMENT before reading it."""
    info = check_regular(path)
    if info.st_size > MAX_DOCUMENT:
        raise _error(path, f"is {_mib(info.st_size)}, more than the {_mib(MAX_DOCUMENT)} a JSON document "
                           "may be (rollkit.core.safe_read.MAX_DOCUMENT: parsing holds it three times over); "
                           "split it")


def read_document(path: Path) -> bytes:
    """All of a file that is one JSON document, a byte-order mark dropped."""
    check_document(path)
    with open(path, "rb") as f:
        data = f.read(MAX_DOCUMENT + 1)
    if len(data) > MAX_DOCUMENT:  # it grew since
        raise _error(path, f"is more than the {_mib(MAX_DOCUMENT)} a JSON document may be")
    return data[len(BOM):] if data.startswith(BOM) else data


def first_line(path: Path) -> tuple[int, bytes] | None:
    """(number, bytes) of the first line of a regular file that is not
    blank, a byte-order mark dropped, holding no more than MAX_LINE of it
    (a longer line is refused, `too_long`); None for a blank file."""
    check_regular(path)
    number = 0
    with open(path, "rb") as f:
        if f.read(len(BOM)) != BOM:
            f.seek(0)
        while True:
            pieces: list[bytes] = []
            held = 0
            while True:
                start = f.tell()
                block = f.read(min(_BLOCK, MAX_LINE + 1 - held))
                end = block.find(b"\n")
                if end >= 0:
                    pieces.append(block[:end + 1])
                    f.seek(start + end + 1)
                    break
                if not block:
                    break
                pieces.append(block)
                held += len(block)
                if held > MAX_LINE:
                    raise too_long(path, number + 1)
            if not pieces:
                return None
            number += 1
            line = b"".join(pieces)
            if line.strip():
                return number, line


def lines(path: Path) -> Iterator[tuple[int, bytes | None]]:
    """(number, bytes) for each line of a regular file; bytes is None for a
    line longer than MAX_LINE, whose bytes were skipped unread into memory."""
    for _, batch in line_batches(path):
        yield from batch


_BLOCK = 4 * 2**20


def line_batches(path: Path) -> Iterator[tuple[bytes, list[tuple[int, bytes | None]]]]:
    """The lines of a regular file as `lines` gives them, a block at a
    time: (the bytes of the batch's lines, [(number, bytes), ...]), so a
    reader can scan a whole batch at once (is "NaN" anywhere in it?) and
    pays no read call per line. At most one block (4 MiB) or one line
    (MAX_LINE) is held beside the batch."""
    check_regular(path)
    number = 0
    head: list[bytes] = []  # the start of a line a block cut short
    held = 0  # its length
    skipping = False  # inside a line longer than MAX_LINE
    with open(path, "rb") as f:
        block = f.read(_BLOCK)
        if block.startswith(BOM):
            block = block[len(BOM):]
        while block:
            limit = MAX_LINE
            pieces = block.split(b"\n")
            rest = pieces.pop()  # after the block's last newline (b"" when it ends with one)
            if pieces and (head or skipping):
                first = pieces.pop(0)
                number += 1
                if skipping or held + len(first) > limit:
                    yield b"", [(number, None)]
                else:
                    line = b"".join((*head, first, b"\n"))
                    yield line, [(number, line)]
                head, held, skipping = [], 0, False
            if pieces:
                batch = [(number + i, piece + b"\n" if len(piece) <= limit else None)
                         for i, piece in enumerate(pieces, 1)]
                number += len(pieces)
                yield block, batch
            if rest and not skipping:
                head.append(rest)
                held += len(rest)
                if held > limit:
                    head, held, skipping = [], 0, True
            block = f.read(_BLOCK)
        if head or skipping:  # the last line, without its newline
            number += 1
            line = b"".join(head)
            yield line, [(number, None if skipping else line)]


def too_long(path: Path, number: int) -> Exception:
    return _error(path, f"line {number} is longer than the {_mib(MAX_LINE)} a line may be "
                        "(rollkit.core.safe_read.MAX_LINE)", line=number)


class TooDeep(ValueError):
    """JSON nested deeper than MAX_DEPTH."""


# What parsing one element of JSON costs in Python, at most (measured on
# CPython 3.11, 64-bit): an array 64 bytes, an object 72 to 232 (with its
# first entries), a value after a comma its pointer, up to a float (32) and
# the list's spare room, a string (a quote of its two) half its 50-byte
# header or a new key. The text itself is counted apart (parse_cost).
_COSTS = ((b"[", 64), (b"{", 192), (b",", 40), (b'"', 32))


def parse_cost(text: str | bytes) -> int:
    """An upper estimate of the bytes parsing `text` holds at its peak: the
    text, its decoded copy (four bytes a character where one is outside
    Latin-1) and the values made from it."""
    if isinstance(text, str):
        held = len(text) + sys.getsizeof(text)  # its bytes (one a character if ASCII) and the text itself
        return held + sum(text.count(mark.decode()) * cost for mark, cost in _COSTS)
    width = 1 if text.isascii() else 4
    return len(text) * (1 + width) + sum(text.count(mark) * cost for mark, cost in _COSTS)


def too_costly(text: str | bytes) -> str | None:
    """Why parsing a JSON text would take more memory than MAX_PARSED
    (None: it would not), e.g. 100 MB of `[],`."""
    if len(text) * (5 + 192) <= MAX_PARSED:  # whatever it holds, it fits: no count needed
        return None
    cost = parse_cost(text)
    if cost <= MAX_PARSED:
        return None
    opening = ("[", "{") if isinstance(text, str) else (b"[", b"{")
    many = text.count(opening[0]) + text.count(opening[1])  # type: ignore[arg-type]
    return (f"would take about {_mib(cost)} of memory to parse ({many:,} arrays or objects in "
            f"{_mib(len(text))}), more than the {_mib(MAX_PARSED)} one record or document may "
            "(rollkit.core.safe_read.MAX_PARSED)")


def loads(text: str | bytes) -> Any:
    """json.loads, refusing nesting deeper than Python's parser goes and a
    text whose values would take more than MAX_PARSED (TooDeep, a ValueError)."""
    costly = too_costly(text)
    if costly is not None:
        raise TooDeep(costly)
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep(DEEP) from None


def check_zip(path: Path) -> None:
    """Refuse a zip whose members would decompress past the bounds."""
    check_regular(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # a damaged zip: the format's reader says what is wrong with it
    total = 0
    for member in members:
        if member.file_size > MAX_MEMBER:
            raise _error(path, f"zip member {member.filename!r} decompresses to {_mib(member.file_size)}, more than "
                               f"the {_mib(MAX_MEMBER)} a member may be (rollkit.core.safe_read.MAX_MEMBER)")
        total += member.file_size
    if total > MAX_UNZIPPED:
        raise _error(path, f"decompresses to {_mib(total)} in all, more than the {_mib(MAX_UNZIPPED)} a zip may be "
                           "(rollkit.core.safe_read.MAX_UNZIPPED)")
