"""Old spellings kept for one release: each warns, naming the new one.

rollkit spells sync and async one way (the README's "One spelling per
idea"): `name(...)` runs to the end and returns the result; `name_async(...)`
is the same work, to await. Names from before that rule still work for one
release through the helpers here, with a DeprecationWarning that says what
to write instead. This module imports nothing of rollkit; whoever renamed
something says so where the old name lived.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["renamed_method", "warn_renamed"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 2) -> None:
    """Warn that `old` is deprecated and `new` is its spelling now
    (`stacklevel` as for warnings.warn, counted from the caller)."""
    warnings.warn(f"{old} is deprecated and goes in the next release: write {new}", DeprecationWarning,
                  stacklevel=stacklevel + 1)


def renamed_method(new: Callable[..., Any], old: str, spelled: str) -> Callable[..., Any]:
    """A method under its old name that warns and calls `new`:
    `astep = renamed_method(step_async, "ro.astep()", "ro.step_async()")`."""

    @functools.wraps(new)
    def alias(self: Any, *args: Any, **kwargs: Any) -> Any:
        warn_renamed(old, spelled)
        return getattr(self, new.__name__)(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old.split(".")[-1].removesuffix("()")
    alias.__doc__ = f"Deprecated spelling of {spelled}: goes in the next release."
    return alias
