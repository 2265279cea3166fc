"""One way to add up a trace's floats: left to right.

Python 3.12's sum() compensates each float's rounding (Neumaier), so the
same rewards summed under 3.11 and 3.13 gave different floats, and the
tables DuckDB builds (list_reduce, left to right) agreed with one Python
and not the other. Every value a trace or its tables hold as a sum of
floats (the reward, agent and model time, a logprob sum) adds with
`sum_in_order`, the same on every Python and in DuckDB.

This module imports nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["sum_in_order"]


def sum_in_order(values: Iterable[float]) -> float:
    """The values added left to right from 0, as sum() did before Python 3.12 (0 when there are none)."""
    total: float = 0
    for value in values:
        total = total + value
    return total
