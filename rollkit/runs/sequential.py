"""Anytime-valid intervals for a mean that is watched as data arrive.

A fixed-n interval (a t interval, a bootstrap) is valid only when looked at
once, at a sample size chosen in advance; recomputed after every pair and
acted on the first time it excludes 0, it errs far more often than its 5%
(the optional-stopping error; `tests/test_turn_values_and_ab.py` shows it).
A confidence sequence is a sequence of intervals that covers the true mean
at every time at once with probability 1 - alpha, so it may be watched
continuously and the run stopped whenever it is decided.

`ConfidenceSequence` is the predictable plug-in empirical-Bernstein
confidence sequence of Waudby-Smith and Ramdas, "Estimating means of
bounded random variables by betting", JRSS-B 86(1), 2024, Theorem 2 (the
"PrPl-EB" sequence), for observations in a known range [low, high], which
a paired difference of rewards in [0, 1] is (range [-1, 1]). With x_i
rescaled to [0, 1]:

    mu_t      = (1/2 + sum_{i<=t} x_i) / (t + 1)
    var_t     = (1/4 + sum_{i<=t} (x_i - mu_i)^2) / (t + 1)
    lambda_t  = min(sqrt(2 log(2/alpha) / (var_{t-1} t log(1 + t))), 1/2)
    v_i       = 4 (x_i - mu_{i-1})^2,   psi(l) = (-log(1 - l) - l) / 4
    C_t       = sum lambda_i x_i / sum lambda_i
                +- (log(2/alpha) + sum v_i psi(lambda_i)) / sum lambda_i

intersected with every earlier interval (still valid, and never widening).
An update is a handful of float operations: O(1) per observation.

The guarantee holds when the observations are independent draws with a
common mean, or more generally when each has the same conditional mean
given the past; `ab_test` takes the (task, repeat) pairs in a seeded random
order and adds them in that order, whatever order they finish in, so their
durations cannot bias it.

`stopping_rule(...)` says what a sequence has decided: "B better",
"A better", "no difference that matters" (the interval inside
[-margin, margin], futility), or nothing yet. `simulate` runs the same
sequence on many simulated streams at once (numpy), for the sample-size
planner and the coverage tests.

This module knows numbers only: no traces, no runs.
"""

from __future__ import annotations

import math
from typing import Any
from ..core.dependencies import np

__all__ = ["ConfidenceSequence", "decision", "simulate", "METHOD"]

METHOD = "predictable plug-in empirical-Bernstein confidence sequence (Waudby-Smith & Ramdas 2024)"
_CAP = 0.5  # the largest bet: the paper's c = 1/2


class ConfidenceSequence:
    """Anytime-valid (1 - alpha) interval for the mean of observations in
    [low, high]; `add(x)` one observation, then read `interval`."""

    __slots__ = ("alpha", "low", "high", "n", "_log", "_sum", "_mu", "_var_sum", "_lam_sum", "_lam_x",
                 "_penalty", "_lower", "_upper", "_mean_sum")

    def __init__(self, alpha: float = 0.05, low: float = -1.0, high: float = 1.0) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha is a probability between 0 and 1, got {alpha!r}")
        if not high > low:
            raise ValueError(f"the range must have high > low, got [{low}, {high}]")
        self.alpha, self.low, self.high = alpha, low, high
        self.n = 0
        self._log = math.log(2.0 / alpha)
        self._sum = 0.0  # of rescaled x
        self._mu = 0.5  # mu_{t-1}
        self._var_sum = 0.25
        self._lam_sum = 0.0
        self._lam_x = 0.0
        self._penalty = 0.0
        self._lower, self._upper = 0.0, 1.0
        self._mean_sum = 0.0  # of raw x, for the plain mean

    def add(self, x: float) -> tuple[float, float]:
        """Add one observation; returns the interval (low, high) after it."""
        if not self.low <= x <= self.high:
            raise ValueError(f"observation {x!r} is outside the sequence's range [{self.low}, {self.high}]")
        t = self.n + 1
        y = (x - self.low) / (self.high - self.low)
        var_prev = self._var_sum / t  # var_{t-1} = (1/4 + sum_{i<t} ...)/t
        lam = min(math.sqrt(2.0 * self._log / (var_prev * t * math.log(1.0 + t))), _CAP)
        self._penalty += 4.0 * (y - self._mu) ** 2 * (-math.log(1.0 - lam) - lam) / 4.0
        self._lam_sum += lam
        self._lam_x += lam * y
        self._sum += y
        self._mean_sum += x
        mu = (0.5 + self._sum) / (t + 1)
        self._var_sum += (y - mu) ** 2
        self._mu = mu
        self.n = t
        centre = self._lam_x / self._lam_sum
        half = (self._log + self._penalty) / self._lam_sum
        self._lower = max(self._lower, centre - half)
        self._upper = min(self._upper, centre + half)
        return self.interval

    @property
    def interval(self) -> tuple[float, float]:
        """The current (low, high), in the observations' own units."""
        span = self.high - self.low
        lower, upper = self._lower, self._upper
        if lower > upper:  # the running intersection emptied (probability <= alpha): report the point between
            lower = upper = (lower + upper) / 2
        return self.low + span * lower, self.low + span * upper

    @property
    def mean(self) -> float | None:
        return self._mean_sum / self.n if self.n else None


def decision(low: float, high: float, margin: float | None = None) -> str | None:
    """What an interval of B - A has decided: "B better" (it lies above 0),
    "A better" (below 0), "no difference that matters" (inside
    [-margin, margin]), or None."""
    if low > 0:
        return "B better"
    if high < 0:
        return "A better"
    if margin is not None and -margin <= low and high <= margin:
        return "no difference that matters"
    return None


def simulate(draws: Any, alpha: float = 0.05, low: float = -1.0, high: float = 1.0) -> tuple[Any, Any]:
    """The sequence over many streams at once: `draws` is an array
    (streams x time) of observations; returns (lower, upper) arrays of the
    same shape, the interval of each stream after each observation, equal
    to what `ConfidenceSequence.add` gives one at a time."""
    x = (np.asarray(draws, dtype=float) - low) / (high - low)
    streams, steps = x.shape
    log = math.log(2.0 / alpha)
    total = np.zeros(streams)
    mu = np.full(streams, 0.5)
    var_sum = np.full(streams, 0.25)
    lam_sum = np.zeros(streams)
    lam_x = np.zeros(streams)
    penalty = np.zeros(streams)
    lower = np.zeros((streams, steps))
    upper = np.ones((streams, steps))
    running_low, running_high = np.zeros(streams), np.ones(streams)
    for i in range(steps):
        t = i + 1
        y = x[:, i]
        lam = np.minimum(np.sqrt(2.0 * log / (var_sum / t * t * math.log(1.0 + t))), _CAP)
        penalty += (y - mu) ** 2 * (-np.log1p(-lam) - lam)
        lam_sum += lam
        lam_x += lam * y
        total += y
        mu = (0.5 + total) / (t + 1)
        var_sum += (y - mu) ** 2
        centre = lam_x / lam_sum
        half = (log + penalty) / lam_sum
        np.maximum(running_low, centre - half, out=running_low)
        np.minimum(running_high, centre + half, out=running_high)
        lower[:, i], upper[:, i] = running_low, running_high
    span = high - low
    return low + span * lower, low + span * upper
