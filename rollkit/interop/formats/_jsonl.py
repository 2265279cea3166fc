"""Reading a JSON lines file of another tool, record by record.

One place for what every JSON lines importer needs: a line that is not
UTF-8 or not JSON, or a record the importer refuses, is a TraceFileError
naming the file and line (and the field); errors="skip" skips it with a
warning; a last line cut short (no newline) is skipped with a warning, as
for rollkit's own files.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...core.store import SKIP_HINT, TraceFileError
from ...core.trace import Trace
from ...core import safe_read
from ._build import Where, converting

__all__ = ["each_line"]


def each_line(path: Path, errors: str, kind: str, convert: Callable[[Any, Where, int], Trace],
              beside: bytes = b"") -> list[Trace]:
    """`convert(record, where, index)` for each non-empty line of `path`.
    `where.read` is the line (without its line ending) after `beside`, what
    the importer read beside the file that every line draws on: a trace made
    from that alone gets its id from it."""
    traces = []
    for number, raw in safe_read.lines(path):  # regular files only, each line bounded
        where = Where(path, f"line {number}", line=number,
                      read=None if raw is None else beside + raw.rstrip(b"\r\n"))
        try:
            if raw is None:
                raise safe_read.too_long(path, number)
            if not raw.strip():
                continue
            try:
                record = safe_read.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as bad:
                raise where.error(None, f"is not valid UTF-8 (byte 0x{raw[bad.start]:02x} at column "
                                        f"{bad.start + 1})") from None
            except safe_read.TooDeep as exc:
                raise where.error(None, str(exc)) from None
            except json.JSONDecodeError as exc:
                if not raw.endswith(b"\n"):
                    warnings.warn(f"{path}: line {number} is torn (no newline at the end, a write cut short); "
                                  "skipped", stacklevel=4)
                    continue
                raise where.error(None, f"is not a {kind} (not JSON: {exc})") from None
            with converting(where):
                traces.append(convert(record, where, len(traces)))
        except TraceFileError as exc:
            if errors == "skip":
                warnings.warn(f"{exc}; skipped", stacklevel=4)
                continue
            raise TraceFileError(exc.reason, path=exc.path, line=exc.line, field=exc.field,
                                 hint=SKIP_HINT) from None
    return traces
