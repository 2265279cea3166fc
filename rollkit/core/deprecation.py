"""Deprecations: how an old spelling is kept for a while, and the list of them.

The policy (docs/concepts.md, "Deprecations"): a public name that changes keeps its old
spelling for at least one released version, warning (DeprecationWarning)
with the new spelling and the version that removes the old one; nothing that
was never released is deprecated, it is simply changed. Every deprecation is
registered here when its module loads, so `rollkit deprecations` lists them
all. rollkit 0.1.0 has none.

This module imports nothing of rollkit; whoever deprecates a name says so
where the old name lives, through `deprecate` and `renamed_method`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Deprecation", "deprecate", "deprecations", "renamed_method"]


@dataclass(frozen=True)
class Deprecation:
    """An old spelling, what to write instead, and the version that removes it."""

    old: str
    new: str
    removed_in: str

    def warn(self, *, stacklevel: int = 2) -> None:
        """Warn the caller `stacklevel` frames up (as for warnings.warn)."""
        warnings.warn(f"{self.old} is deprecated and goes in rollkit {self.removed_in}: write {self.new}",
                      DeprecationWarning, stacklevel=stacklevel + 1)


_REGISTERED: dict[str, Deprecation] = {}


def deprecate(old: str, new: str, *, removed_in: str) -> Deprecation:
    """Register that `old` is spelled `new` now and goes in `removed_in`."""
    if not removed_in or not removed_in[0].isdigit():
        raise ValueError(f"a deprecation names the version that removes it, e.g. removed_in='0.3.0'; got {removed_in!r}")
    deprecation = Deprecation(old, new, removed_in)
    _REGISTERED[old] = deprecation
    return deprecation


def deprecations() -> list[Deprecation]:
    """Every deprecation registered so far, by the version that removes it."""
    return sorted(_REGISTERED.values(), key=lambda d: (tuple(int(p) for p in d.removed_in.split(".") if p.isdigit()), d.old))


def renamed_method(new: Callable[..., Any], old: str, spelled: str, *, removed_in: str) -> Callable[..., Any]:
    """A method under its old name that warns and calls `new`:
    `astep = renamed_method(step_async, "ro.astep()", "ro.step_async()", removed_in="0.3.0")`."""
    deprecation = deprecate(old, spelled, removed_in=removed_in)

    @functools.wraps(new)
    def alias(self: Any, *args: Any, **kwargs: Any) -> Any:
        deprecation.warn()
        return getattr(self, new.__name__)(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old.split(".")[-1].removesuffix("()")
    alias.__doc__ = f"Deprecated spelling of {spelled}: goes in rollkit {removed_in}."
    return alias
