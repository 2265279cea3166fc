"""The statistics behind summaries and comparisons of runs.

This module owns five computations and says which method each uses:

- `mean_interval(values)`: the mean with a 95% Student-t interval
  (mean +/- t(0.975, n-1) * s / sqrt(n)); standard library only, so
  `result.summary()` and `rollkit show` need no numpy.
- `bootstrap_interval(diffs)`: a percentile bootstrap 95% interval of the
  mean of paired differences (resampling the pairs, numpy, seeded).
- `wilson_interval(successes, n)`: the 95% Wilson score interval of a
  success rate (Wilson 1927), which stays inside [0, 1] and keeps its
  coverage at small n and at rates near 0 or 1, where the normal
  approximation fails.
- `sign_flip_test(diffs)`: the paired permutation test of "no difference":
  each pair's difference keeps its size and gets a random sign; the p-value
  is the share of sign patterns whose mean is at least as far from 0 as the
  observed one (two-sided). Exact (every pattern) up to 16 non-zero
  differences, Monte Carlo with `resamples` patterns beyond that.
- `run_cost(costs, rewards)`: what a run cost (dollars per rollout summed;
  None when one rollout's price is unknown: a partial sum would flatter the
  run) and its reward per dollar, the mean reward over the scored rollouts
  divided by the mean cost over all of them (None when the cost is unknown
  or 0).

It knows numbers only: no traces, no runs, no files. numpy is imported
inside the functions that need it, never at module level.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.prices import dollars
from typing import Any
from ..core.dependencies import np

__all__ = ["run_cost", "RunCost", "mean_interval", "wilson_interval", "bootstrap_interval", "sign_flip_test", "t_critical", "EXACT_LIMIT", "TEST_NAME"]

TEST_NAME = "paired sign-flip permutation test"
EXACT_LIMIT = 16  # non-zero differences up to which every sign pattern is enumerated (2**16)
_CHUNK_CELLS = 2_000_000  # resamples x pairs drawn at once: bounded memory for large runs

# t(0.975, df) for df = 1..30; beyond, a Cornish-Fisher expansion around z.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


@dataclass(frozen=True)
class RunCost:
    """A run's dollars: `total` and `mean` per rollout (None: a rollout's
    price is unknown, `unpriced` of them), and reward per dollar."""

    total: float | None
    mean: float | None
    rollouts: int
    unpriced: int
    reward_per_dollar: float | None

    def text(self) -> str:
        """One line for a summary or a comparison table."""
        if self.total is None:
            return (f"cost: - ({self.unpriced} of {self.rollouts} rollouts have no price: "
                    "give one with rk.prices); reward per dollar: -")
        per = "-" if self.reward_per_dollar is None else f"{self.reward_per_dollar:.4g}"
        return (f"cost: {dollars(self.total)} ({dollars(self.mean)} per rollout over {self.rollouts}); "
                f"reward per dollar: {per}")


def run_cost(costs: Sequence[float | None], rewards: Sequence[float | None]) -> RunCost:
    """See the module docstring; `costs` and `rewards` are per rollout (a
    NaN reads as None)."""
    costs = [None if c is None or c != c else float(c) for c in costs]
    unpriced = sum(c is None for c in costs)
    if unpriced or not costs:
        return RunCost(None, None, len(costs), unpriced, None)
    total = sum(costs)  # type: ignore[arg-type]
    mean = total / len(costs)
    scored = [r for r in rewards if r is not None and r == r]
    per = sum(scored) / len(scored) / mean if scored and mean > 0 else None
    return RunCost(total, mean, len(costs), 0, per)


def t_critical(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_interval(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high) of the 95% t interval; the bounds are None with one
    value (no spread to estimate), everything None with none."""
    n = len(values)
    if n == 0:
        return None, None, None
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None, None
    half = t_critical(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """(low, high) of the Wilson score interval for `successes` out of `n`."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _rng(seed: int) -> Any:
    return np.random.default_rng(seed)


def bootstrap_interval(diffs: Sequence[float], *, resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the mean of `diffs` (at least one)."""
    d = np.asarray(diffs, dtype=float)
    n = len(d)
    if n == 0:
        raise ValueError("no paired differences to resample")
    rng = _rng(seed)
    means = np.empty(resamples)
    step = max(1, _CHUNK_CELLS // n)
    for start in range(0, resamples, step):
        stop = min(resamples, start + step)
        picks = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = d[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def sign_flip_test(diffs: Sequence[float], *, resamples: int = 1000, seed: int = 0) -> float:
    """Two-sided p-value of the paired sign-flip permutation test (see the
    module docstring). Pairs with a zero difference carry no sign; with no
    non-zero difference at all the p-value is 1."""
    d = np.asarray([x for x in diffs if x != 0], dtype=float)
    m = len(d)
    if m == 0:
        return 1.0
    observed = abs(d.sum())
    tolerance = 1e-9 * max(1.0, float(np.abs(d).sum()))
    if m <= EXACT_LIMIT:
        patterns = ((np.arange(2**m)[:, None] >> np.arange(m)) & 1) * 2 - 1
        sums = np.abs(patterns @ d)
        return float(np.mean(sums >= observed - tolerance))
    rng = _rng(seed)
    extreme = 0
    step = max(1, _CHUNK_CELLS // m)
    for start in range(0, resamples, step):
        count = min(resamples, start + step) - start
        signs = rng.integers(0, 2, size=(count, m), dtype=np.int8) * 2 - 1
        extreme += int(np.count_nonzero(np.abs(signs @ d) >= observed - tolerance))
    # The observed pattern is one of the possible ones: never a p of 0.
    return (extreme + 1) / (resamples + 1)
