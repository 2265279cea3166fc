"""A live A/B test of two agents on the same tasks that stops when it is decided.

`ab_test(a, b, tasks, repeats=...)` runs both agents on every (task, repeat)
pair, interleaved, and after each pair updates an anytime-valid confidence
sequence (rollkit.runs.sequential) for the mean paired difference B - A of
one signal. The sequence may be watched after every pair and the run
stopped the first time it is decided, without the optional-stopping error
of a fixed-n test peeked at. It stops (with `stop=True`, the default) when:

- the interval lies above or below 0: "B better" / "A better";
- it lies inside [-margin, margin], with `margin=` given: "no difference
  that matters" (futility: more pairs would not change the answer);
- `max_pairs` pairs are in: "budget";
- the pairs run out: "pairs exhausted".

The pairs are taken in a seeded random order of (task, repeat) and added to
the sequence in that order, whatever order their rollouts finish in (a pair
whose rollouts fail faster must not be counted earlier). What it estimates
is the mean of B - A over the pairs as drawn: the sequence's guarantee is
exact when the pairs are independent draws with a common mean (tasks drawn
at random from a larger set, one repeat each); with several repeats of a
task, or a small task list taken without replacement, the pairs are not
quite independent, and the sequence is conservative in practice (in a
simulation with heterogeneous tasks it missed the task set's mean far
less often than alpha). A pair where
either side has no value for the signal (failed, unscored) is counted as
missing, never as 0, and left out of the sequence: the interval is then of
the pairs where both sides scored, which differs from the whole when one
agent fails more often on hard tasks (compare `missing` with the pairs). Rollouts still in
flight when the run stops are aborted; pairs that finished beyond the
stopping point are kept on the result but not counted.

`plan_ab(p_a, p_b)` is the sample-size planner: given a guess of the two
success rates, how many pairs the test is expected to need, by simulating
the same sequence and rule.

This module owns the scheduling, the pairing and the stopping; the
statistics are rollkit.runs.sequential's, the figures the notebook layer's
(`rk.plots.ab`, `rk.notebook.ABMonitor`).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.agent import Agent
from ..core.errors import UsageError
from ..core.task import Task
from ..core.trace import Trace
from ..analysis.compare import trace_signals
from ..analysis.stats import RunCost, run_cost
from .evaluation import as_task_list
from .interrupts import run_sync
from ..tables.livetables import TraceLog
from .runner import run_rollout
from .sequential import METHOD, ConfidenceSequence, decision, simulate
from ..core.dependencies import np, pandas

if TYPE_CHECKING:
    import pandas

__all__ = ["ab_test", "ab_test_async", "ABResult", "ABState", "plan_ab", "ABPlan", "ABTestError", "ABFollower",
           "AB_LOG"]

AB_LOG = "ab.jsonl"  # in an A/B test's out= folder: a start line, one line per pair counted, an end line


class ABTestError(UsageError, ValueError):
    """An A/B test that cannot run as asked; the message names why."""


@dataclass
class ABState:
    """Where the test stands after a pair: what a live view draws."""

    pairs: int  # pairs counted in the sequence
    missing: int  # pairs with no value on one side
    mean: float | None
    low: float
    high: float
    decision: str | None
    planned: int


@dataclass
class ABResult:
    """What an A/B test found. `decision` is "B better", "A better", "no
    difference that matters", or None (undecided when it stopped);
    `reason` why it stopped; `history` the interval after each pair."""

    signal: str
    alpha: float
    margin: float | None
    decision: str | None
    reason: str
    pairs: int
    missing: int
    mean: float | None
    low: float
    high: float
    history: list[ABState]
    a: list[Trace] = field(default_factory=list)  # every trace of A that finished, in pair order
    b: list[Trace] = field(default_factory=list)
    # The (A, B) traces of the pairs the sequence counted, in the order counted
    # (a and b may also hold rollouts that finished beyond the stopping point).
    pairs_counted: list[tuple[Trace, Trace]] = field(default_factory=list)
    method: str = METHOD
    seconds: float = 0.0

    def frame(self) -> pandas.DataFrame:
        """The interval after each pair: pairs, missing, mean, low, high, decision."""
        return pandas.DataFrame([vars(s) for s in self.history],
                                columns=["pairs", "missing", "mean", "low", "high", "decision", "planned"])

    @property
    def cost_a(self) -> RunCost:
        """A's cost and reward per dollar over its finished rollouts (NA
        when one has no price; rollkit.analysis.stats.run_cost)."""
        return run_cost([t.cost_usd for t in self.a], [t.scored_reward for t in self.a])

    @property
    def cost_b(self) -> RunCost:
        return run_cost([t.cost_usd for t in self.b], [t.scored_reward for t in self.b])

    def summary(self) -> str:
        mean = "-" if self.mean is None else f"{self.mean:+.3f}"
        verdict = self.decision or "undecided"
        return (f"B - A on {self.signal}: {mean}, {100 * (1 - self.alpha):.0f}% anytime-valid interval "
                f"[{self.low:+.3f}, {self.high:+.3f}] after {self.pairs} pairs ({self.missing} missing): "
                f"{verdict}; stopped: {self.reason}. A {self.cost_a.text()}. B {self.cost_b.text()}")

    def __repr__(self) -> str:
        return f"<ABResult {self.summary()}>"


def _signal_value(trace: Trace, signal: str, bounds: tuple[float, float]) -> float | None:
    if trace.failed:
        return None
    value = trace_signals(trace).get(signal)
    if value is not None and not bounds[0] <= value <= bounds[1]:
        raise ABTestError(
            f"{signal} = {value} in rollout {trace.info.get('rollout_id')} is outside bounds={bounds}: "
            "pass the signal's range as bounds=(low, high)"
        )
    return value


def _check(tasks: Any, repeats: Any, alpha: Any, margin: Any, max_pairs: Any, bounds: Any, concurrency: Any,
           a: Any, b: Any) -> list[Task]:
    for name, agent in (("a", a), ("b", b)):
        if not isinstance(agent, Agent):
            raise ABTestError(f"{name} must be a rk.Agent, got {type(agent).__name__}")
    task_list = as_task_list(tasks)
    for name, value in (("repeats", repeats), ("concurrency", concurrency)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ABTestError(f"{name} must be a whole number >= 1, got {value!r}")
    if max_pairs is not None and (isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1):
        raise ABTestError(f"max_pairs must be a whole number >= 1 or None, got {max_pairs!r}")
    if not isinstance(alpha, float) or not 0 < alpha < 1:
        raise ABTestError(f"alpha must be a float between 0 and 1 (e.g. 0.05), got {alpha!r}")
    low, high = bounds
    if not high > low:
        raise ABTestError(f"bounds must be (low, high) with high > low: the range of the signal, got {bounds!r}")
    if margin is not None and not 0 < margin < high - low:
        raise ABTestError(f"margin must be above 0 and below the signal's range {high - low}, got {margin!r}")
    return task_list


class _Test:
    def __init__(self, a: Agent, b: Agent, tasks: list[Task], *, repeats: int, signal: str, alpha: float,
                 margin: float | None, max_pairs: int | None, stop: bool, bounds: tuple[float, float],
                 concurrency: int, seed: int, out: Path | None, on_pair: Callable[[ABState], Any] | None,
                 on_start: Callable[[dict[str, Any]], Any] | None = None) -> None:
        pairs = [(t, r) for t in tasks for r in range(repeats)]
        random.Random(seed).shuffle(pairs)
        self.pairs = pairs[:max_pairs] if max_pairs else pairs
        self.agents = {"a": a, "b": b}
        self.signal, self.alpha, self.margin, self.stop = signal, alpha, margin, stop
        span = bounds[1] - bounds[0]
        self.bounds = bounds
        self.sequence = ConfidenceSequence(alpha, -span, span)
        self.error: BaseException | None = None
        self.concurrency, self.out, self.on_pair, self.on_start = concurrency, out, on_pair, on_start
        self.done: dict[tuple[int, str], Trace] = {}
        self.next = 0
        self.missing = 0
        self.history: list[ABState] = []
        self.decided: str | None = None
        self.finished = asyncio.Event()
        self.files: dict[str, Any] = {}
        self.log: Any = None
        self.counted: list[tuple[Trace, Trace]] = []
        self.run_id = f"ab-{seed}-{int(time.time())}"

    def state(self) -> ABState:
        low, high = self.sequence.interval
        return ABState(self.sequence.n, self.missing, self.sequence.mean, low, high, self.decided, len(self.pairs))

    def _log(self, record: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()  # a line per pair: `rollkit view DIR` follows it as it grows

    def landed(self, index: int, arm: str, trace: Trace) -> None:
        try:
            self._land(index, arm, trace)
        except BaseException as exc:
            # A bad value, a broken on_pair or a full disk stops the whole
            # test at once, not one worker while the others go on.
            self.error = exc
            self.finished.set()
            raise

    def _land(self, index: int, arm: str, trace: Trace) -> None:
        self.done[(index, arm)] = trace
        if arm in self.files:
            self.files[arm].append(trace)
        # Pairs count in their planned order only (see the module docstring).
        while self.next < len(self.pairs) and (self.next, "a") in self.done and (self.next, "b") in self.done \
                and not self.finished.is_set():
            va = _signal_value(self.done[(self.next, "a")], self.signal, self.bounds)
            vb = _signal_value(self.done[(self.next, "b")], self.signal, self.bounds)
            self.counted.append((self.done[(self.next, "a")], self.done[(self.next, "b")]))
            self.next += 1
            if va is None or vb is None:
                self.missing += 1
            else:
                self.sequence.add(vb - va)
                self.decided = decision(*self.sequence.interval, self.margin)
            state = self.state()
            self.history.append(state)
            self._log({"kind": "pair", **vars(state)})
            if self.on_pair is not None:
                self.on_pair(state)
            if self.stop and self.decided is not None:
                self.finished.set()
        if self.next == len(self.pairs):
            self.finished.set()

    async def worker(self, jobs: Any) -> None:
        for index, arm in jobs:
            if self.finished.is_set():
                return
            task, repeat = self.pairs[index]
            info = {"example_id": task.key, "repeat": repeat, "rollout_id": f"{task.key}#{repeat}",
                    "run_id": self.run_id, "arm": arm}
            trace = await run_rollout(self.agents[arm], task, info)
            self.landed(index, arm, trace)

    async def run(self) -> ABResult:
        started = time.perf_counter()
        workers: list[asyncio.Future[None]] = []
        ended = "interrupted"
        try:
            if self.out is not None:
                self.out.mkdir(parents=True, exist_ok=True)
                # "x": an A/B folder is written by one test only; each file is
                # kept as soon as it is open, so the finally closes it.
                for arm in ("a", "b"):
                    self.files[arm] = TraceLog(self.out / f"{arm}.jsonl", mode="xb")  # with its tables
                self.log = open(self.out / AB_LOG, "x", encoding="utf-8")
            plan = {"signal": self.signal, "alpha": self.alpha, "margin": self.margin,
                    "planned": len(self.pairs), "method": METHOD}
            self._log({"kind": "start", **plan})
            if self.on_start is not None:
                self.on_start(plan)
            jobs = iter([(i, arm) for i in range(len(self.pairs)) for arm in ("a", "b")])
            workers = [asyncio.ensure_future(self.worker(jobs))
                       for _ in range(min(self.concurrency, 2 * len(self.pairs)))]
            waiter = asyncio.ensure_future(self.finished.wait())
            all_done = asyncio.gather(*workers, return_exceptions=True)
            try:
                await asyncio.wait([waiter, all_done], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            ended = self._reason() if self.error is None else f"error: {type(self.error).__name__}"
        finally:
            for worker in workers:
                if not worker.done():
                    worker.cancel()  # its rollout aborts (run_rollout) and the worker ends
            if workers:
                await asyncio.wait(workers)
            for file in self.files.values():
                file.close(wait=False)  # an open of an arm's file waits for its last part
            if self.log is not None:
                self._log({"kind": "end", "decision": self.decided, "pairs": self.sequence.n, "reason": ended})
                self.log.close()
        if self.error is not None:
            raise self.error
        for worker in workers:  # a bug in a worker is the caller's to see, not a silent stop
            if not worker.cancelled() and worker.exception() is not None:
                raise worker.exception()  # type: ignore[misc]
        low, high = self.sequence.interval
        order = sorted(self.done)
        return ABResult(
            self.signal, self.alpha, self.margin, self.decided, ended, self.sequence.n, self.missing,
            self.sequence.mean, low, high, self.history,
            a=[self.done[k] for k in order if k[1] == "a"], b=[self.done[k] for k in order if k[1] == "b"],
            pairs_counted=self.counted, seconds=time.perf_counter() - started,
        )

    def _reason(self) -> str:
        if self.decided is not None and self.stop:
            return "decided" if self.decided != "no difference that matters" else "futility"
        if self.next >= len(self.pairs) and len(self.pairs) < self._planned_total:
            return "budget"
        return "pairs exhausted"

    _planned_total = 0


async def ab_test_async(a: Agent, b: Agent, tasks: Iterable[Task] | Task, **options: Any) -> ABResult:
    """See `ab_test`."""
    return await _prepare(a, b, tasks, **options).run()


def _prepare(a: Agent, b: Agent, tasks: Any, *, repeats: int = 1, signal: str = "reward", alpha: float = 0.05,
             margin: float | None = None, max_pairs: int | None = None, stop: bool = True,
             bounds: tuple[float, float] = (0.0, 1.0), concurrency: int = 16, seed: int = 0,
             out: str | os.PathLike[str] | None = None, on_pair: Callable[[ABState], Any] | None = None,
             on_start: Callable[[dict[str, Any]], Any] | None = None) -> _Test:
    task_list = _check(tasks, repeats, alpha, margin, max_pairs, bounds, concurrency, a, b)
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise ABTestError(f"out={out} is a file; pass a folder for the test's traces")
    if out is not None and Path(out).exists() and any(Path(out).glob("*.jsonl")):
        raise ABTestError(f"{out} already holds an A/B test's traces; pass a new folder")
    test = _Test(a, b, task_list, repeats=repeats, signal=signal, alpha=alpha, margin=margin, max_pairs=max_pairs,
                 stop=stop, bounds=bounds, concurrency=concurrency, seed=seed,
                 out=Path(out) if out is not None else None, on_pair=on_pair, on_start=on_start)
    test._planned_total = len(task_list) * repeats
    return test


def ab_test(a: Agent, b: Agent, tasks: Iterable[Task] | Task, *, repeats: int = 1, signal: str = "reward",
            alpha: float = 0.05, margin: float | None = None, max_pairs: int | None = None, stop: bool = True,
            bounds: tuple[float, float] = (0.0, 1.0), concurrency: int = 16, seed: int = 0,
            out: str | os.PathLike[str] | None = None, on_pair: Callable[[ABState], Any] | None = None,
            on_start: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """Run agents `a` and `b` on the same (task, repeat) pairs and stop when
    the paired difference B - A of `signal` is decided (module docstring).

    - `alpha`: 1 - the sequence's coverage, at every pair at once;
    - `margin`: a difference smaller than this does not matter (futility stop);
    - `max_pairs`: the budget; `stop=False` runs every pair (still watched);
    - `bounds`: the range of `signal` (rewards in [0, 1] by default);
    - `seed`: the pairs' order; `concurrency`: rollouts in flight;
    - `out=DIR`: DIR/a.jsonl and DIR/b.jsonl get each trace as it finishes
      (and their columnar tables, as rk.evaluate's run folder does),
      DIR/ab.jsonl the interval after each pair (`rollkit view DIR` follows it);
    - `on_pair(state)`: called after each pair counts; `on_start(plan)` once
      the test starts, with its signal, alpha, margin, planned pairs and
      method (what DIR/ab.jsonl's first line holds). `rk.ab_test(...,
      monitor=True)` (rollkit.notebook.running) draws the interval narrowing
      in a notebook through these two.

    It runs and returns an `ABResult`; in async code (a notebook cell)
    write `await rk.ab_test_async(...)`: called where an event loop runs,
    it raises a UsageError saying so, as rk.evaluate does.
    """
    test = _prepare(a, b, tasks, repeats=repeats, signal=signal, alpha=alpha, margin=margin, max_pairs=max_pairs,
                    stop=stop, bounds=bounds, concurrency=concurrency, seed=seed, out=out, on_pair=on_pair,
                    on_start=on_start)
    return run_sync(test.run(), what="A/B test", called="rk.ab_test(...)", instead="await rk.ab_test_async(...)")


class ABFollower:
    """Reads an A/B test's DIR/ab.jsonl as it grows: `read()` returns the
    states of the pairs counted since the last read; `start` holds the
    test's signal, alpha, margin and planned pairs once its first line is
    in, `ended` its end line. A half-written last line waits for the next read."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = Path(folder) / AB_LOG
        self.offset = 0
        self.start: dict[str, Any] | None = None
        self.ended: dict[str, Any] | None = None

    def read(self) -> list[ABState]:
        try:
            with open(self.path, "rb") as file:
                file.seek(self.offset)
                chunk = file.read()
        except FileNotFoundError:
            return []
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(whole)
        states = []
        for line in whole.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # not the test's writing (it writes whole lines): nothing to draw
            kind = record.pop("kind", None)
            if kind == "start":
                self.start = record
            elif kind == "end":
                self.ended = record
            elif kind == "pair":
                states.append(ABState(**record))
        return states


@dataclass
class ABPlan:
    """What `plan_ab` expects: pairs needed to decide (median and 90th
    percentile over the simulated tests that decided), and the share of
    tests deciding each way, for futility, and undecided at the budget."""

    p_a: float
    p_b: float
    median_pairs: float | None
    p90_pairs: float | None
    right: float
    wrong: float
    futile: float
    undecided: float
    sims: int

    def __str__(self) -> str:
        median = "-" if self.median_pairs is None else f"{self.median_pairs:.0f}"
        p90 = "-" if self.p90_pairs is None else f"{self.p90_pairs:.0f}"
        return (f"success {self.p_a:.2f} (A) vs {self.p_b:.2f} (B): about {median} pairs to decide "
                f"(90% of tests by {p90}); decides the right way {self.right:.0%}, the wrong way {self.wrong:.1%}, "
                f"no difference {self.futile:.0%}, undecided at the budget {self.undecided:.0%} ({self.sims} simulated tests)")


def plan_ab(p_a: float, p_b: float, *, alpha: float = 0.05, margin: float | None = None, max_pairs: int = 2000,
            sims: int = 400, seed: int = 0) -> ABPlan:
    """How many pairs an A/B test of success rates `p_a` and `p_b` (0/1
    rewards, the two sides independent) is expected to need with this
    module's sequence and stopping rule, by simulating `sims` tests of at
    most `max_pairs` pairs (numpy, seeded)."""
    for name, p in (("p_a", p_a), ("p_b", p_b)):
        if not 0.0 <= p <= 1.0:
            raise ABTestError(f"{name} is a success rate from 0 to 1, got {p!r}")
    rng = np.random.default_rng(seed)
    diffs = (rng.random((sims, max_pairs)) < p_b).astype(float) - (rng.random((sims, max_pairs)) < p_a)
    lower, upper = simulate(diffs, alpha)
    decided_b, decided_a = lower > 0, upper < 0
    futile = (lower >= -margin) & (upper <= margin) if margin is not None else np.zeros_like(lower, dtype=bool)
    stopped = decided_b | decided_a | futile
    any_stop = stopped.any(axis=1)
    first = np.where(any_stop, stopped.argmax(axis=1), max_pairs - 1)
    rows = np.arange(sims)
    b_wins, a_wins = decided_b[rows, first] & any_stop, decided_a[rows, first] & any_stop
    futile_at = futile[rows, first] & any_stop & ~b_wins & ~a_wins
    truth = p_b - p_a
    right = b_wins.mean() if truth > 0 else a_wins.mean() if truth < 0 else 0.0
    wrong = a_wins.mean() if truth > 0 else b_wins.mean() if truth < 0 else (a_wins | b_wins).mean()
    counts = first[any_stop] + 1
    return ABPlan(
        p_a, p_b, float(np.median(counts)) if counts.size else None,
        float(np.percentile(counts, 90)) if counts.size else None,
        float(right), float(wrong), float(futile_at.mean()), float((~any_stop).mean()), sims,
    )
