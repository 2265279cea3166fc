"""Saving and loading traces: one JSON object per line (JSONL).

A trace file is append-friendly: each finished trace is one line, so a crash
loses at most what was in flight, and a reader can load the good lines of a
damaged file. `load` reports a bad line with its number; with
`errors="skip"` the good lines still load and the bad ones come back as
warnings. This module knows traces and files, nothing about running.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import pydantic

from .trace import Trace

__all__ = ["save", "load", "TraceFileError", "append_trace"]


class TraceFileError(ValueError):
    """A trace file (or one of its lines) is not what rollkit wrote."""

    def __init__(self, message: str, *, path: Path, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


def _resolve(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if path.is_dir():
        return path / "traces.jsonl"
    return path


def save(traces: Trace | Iterable[Trace], path: str | os.PathLike[str]) -> Path:
    """Write traces to `path` (a .jsonl file, or a folder that gets traces.jsonl),
    replacing what was there. Returns the file written."""
    if isinstance(traces, Trace):
        traces = [traces]
    path = _resolve(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for trace in traces:
            f.write(trace.model_dump_json())
            f.write("\n")
    os.replace(tmp, path)
    return path


def append_trace(trace: Trace, file) -> None:  # type: ignore[no-untyped-def]
    """Append one trace as one line and flush, so it survives a crash."""
    file.write(trace.model_dump_json() + "\n")
    file.flush()


def load(path: str | os.PathLike[str], *, errors: str = "raise") -> list[Trace]:
    """Read traces from a .jsonl file or a folder holding traces.jsonl.

    A line that is not a trace raises `TraceFileError` naming its line number;
    with errors="skip" it is skipped with a warning and the good lines load.
    A last line without its newline (torn by a crash) is always skipped with a
    warning: the run that wrote it never finished that write."""
    if errors not in ("raise", "skip"):
        raise ValueError("errors must be 'raise' or 'skip'")
    path = _resolve(path)
    if not path.exists():
        raise FileNotFoundError(f"no trace file at {path}")
    traces: list[Trace] = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    torn = lines[-1] != ""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            traces.append(Trace.model_validate_json(line))
        except (pydantic.ValidationError, json.JSONDecodeError, ValueError) as exc:
            last = number == len(lines)
            if last and torn:
                warnings.warn(f"{path}: line {number} is torn (no newline at the end, a write cut short); skipped", stacklevel=2)
                continue
            detail = str(exc).splitlines()[0]
            message = f"{path}: line {number} is not a rollkit trace ({detail})"
            if errors == "skip":
                warnings.warn(message + "; skipped", stacklevel=2)
                continue
            raise TraceFileError(message + "; load with errors='skip' to read the good lines", path=path, line=number) from None
    return traces
