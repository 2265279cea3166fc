"""What rollkit's inspect-ai reader (inspect_log) and writer (inspect_write)
both need of inspect-ai: its log API, imported on first use with an error
naming the extra when it is missing, and a way to call its sync reader or
writer from inside a running event loop. Nothing else."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

__all__ = ["EXTRA", "log_api", "off_loop"]

EXTRA = "pip install 'rollkit[inspect]' (inspect-ai)"


def log_api() -> Any:
    """inspect-ai's `inspect_ai.log`, or an error saying how to install it."""
    try:
        from inspect_ai import log
    except ImportError:
        raise ModuleNotFoundError(f"reading or writing inspect-ai logs needs inspect-ai: {EXTRA}") from None
    return log


def off_loop(fn: Any, *args: Any) -> Any:
    """Call inspect's sync reader or writer outside any running event loop.

    Inside one (a notebook cell, an async test) inspect runs its coroutine
    through nest-asyncio, which patches asyncio for the whole process; a
    worker thread has no loop, so inspect uses plain asyncio.run there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollkit-inspect") as pool:
        return pool.submit(fn, *args).result()
