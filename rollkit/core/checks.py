"""Checking the numbers users pass as options, with errors that name them.

`SubprocessRuntime(kill_grace="2s")` used to fail deep inside with "could
not convert string to float", naming neither the class nor the option. Every
numeric option of rollkit's public classes goes through `seconds` or `whole`
instead, so a bad value fails at once as `TypeError` (not a number) or
`ValueError` (out of range), saying `Owner(option=...)`, what it must be and
what was given. This module owns those two checks and nothing else.
"""

from __future__ import annotations

from typing import Any

__all__ = ["seconds", "whole"]


def _number(where: str, value: Any, meaning: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{where} must be {meaning}, got {value!r} ({type(value).__name__})")
    return float(value)


def seconds(owner: str, option: str, value: Any, *, zero: bool = True) -> float:
    """`value` as seconds: a number >= 0 (> 0 with `zero=False`)."""
    where = f"{owner}({option}=...)"
    meaning = f"a number of seconds {'>= 0' if zero else '> 0'}"
    number = _number(where, value, meaning)
    if number != number or number < 0 or (not zero and number == 0):  # NaN fails too
        raise ValueError(f"{where} must be {meaning}, got {value!r}")
    return number


def whole(owner: str, option: str, value: Any, *, minimum: int = 0) -> int:
    """`value` as a whole number >= `minimum`."""
    where = f"{owner}({option}=...)"
    meaning = f"a whole number >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where} must be {meaning}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{where} must be {meaning}, got {value!r}")
    return value
