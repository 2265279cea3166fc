"""Paired comparison of two runs on the same tasks: `rk.compare(a, b)`.

`compare(a, b)` takes two runs (an `EvalResult`, a run folder or trace file
path, or a list of traces), pairs their rollouts by task (`by="task"`: the
mean over a task's repeats in each run, the default) or by (task, repeat)
(`by="repeat"`), and for every signal (`reward`, the scored total;
`reward.<name>`; `metric.<name>`) reports the mean of each run with its 95%
t interval and n scored / n total, the mean paired difference B - A with a
percentile bootstrap 95% interval, the p-value of a paired sign-flip
permutation test (rollkit.analysis.stats), wins / ties / losses of B per task,
the tasks only one run has, and the pairs missing a value in A, in B or in
both: counted, never dropped silently, never read as 0. Beside the
reward, each run's cost and reward per dollar (`cost_a`, `cost_b`:
rollkit.analysis.stats.run_cost, over every rollout of the run; NA when a
rollout's price is unknown).

Bad input is a `CompareError` naming what is wrong: something that is not a
run, two runs with no task in common. A signal only one run has is not an
error: it is reported (its mean in that run, "only in B") and not compared.

This module owns the pairing and the table; it reads runs through
rollkit.tables.runfolder / rollkit.core.store and builds no DataFrame or
figure (rollkit.analysis.frames.compare and rollkit.notebook.plots.compare
do, from a `Comparison`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.trace import Trace
from ..tables.lazyrun import LazyRun, open_run
from ..tables.rows import signal_values
from .stats import TEST_NAME, RunCost, bootstrap_interval, mean_interval, run_cost, sign_flip_test

__all__ = ["compare", "Comparison", "SignalComparison", "CompareError", "trace_signals", "OUTCOMES"]

# The per-pair outcome vocabulary (frames.compare's `outcome` column), seen from B.
OUTCOMES = ("win", "tie", "loss", "missing in A", "missing in B", "missing in both", "only in A", "only in B")


class CompareError(UsageError, ValueError):
    """Two runs that cannot be compared as given; the message says why and what to pass."""


def trace_signals(trace: Trace) -> dict[str, float | None]:
    """The signals of one trace: `reward` (the scored total, None when not
    scored), `reward.<name>` and `metric.<name>` (None when missing)."""
    # One definition of a trace's signals, read from the fields it needs
    # (the rollouts frame's and the run monitor's: rollkit.tables.rows).
    return signal_values({"phases": trace.phases, "rewards": trace.rewards,
                          "reward_weights": trace.reward_weights, "metrics": trace.metrics})


@dataclass
class SignalComparison:
    """One signal of a comparison. Means are over each run's own units
    (tasks or rollouts, see `Comparison.by`); the difference, its interval,
    the test and the wins are over the pairs where both runs have a value."""

    signal: str
    mean_a: float | None
    low_a: float | None
    high_a: float | None
    scored_a: int
    total_a: int
    mean_b: float | None
    low_b: float | None
    high_b: float | None
    scored_b: int
    total_b: int
    pairs: int = 0
    diff: float | None = None
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    wins: int = 0
    ties: int = 0
    losses: int = 0
    missing_a: int = 0
    missing_b: int = 0
    missing_both: int = 0
    note: str = ""


@dataclass
class Comparison:
    """What `compare` found; `table()` (also `str()`) is what `rollkit compare` prints."""

    label_a: str
    label_b: str
    by: str
    signals: list[SignalComparison]
    rows: list[dict[str, Any]]  # one per (unit, signal): see rollkit.analysis.frames.compare
    common: int
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    resamples: int = 1000
    test: str = TEST_NAME
    cost_a: RunCost | None = None
    cost_b: RunCost | None = None

    def signal(self, name: str) -> SignalComparison:
        for found in self.signals:
            if found.signal == name:
                return found
        raise KeyError(f"no signal {name!r} in this comparison; it has {', '.join(s.signal for s in self.signals)}")

    @property
    def notes(self) -> list[str]:
        return [f"{s.signal}: {s.note}" for s in self.signals if s.note]

    def table(self) -> str:
        return _table(self)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"Comparison({self.label_a!r} vs {self.label_b!r}, {self.common} {self._unit}s paired, {len(self.signals)} signals)"

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.table())}</pre>"

    @property
    def _unit(self) -> str:
        return "task" if self.by == "task" else "rollout"


def _traces_of(run: Any, which: str) -> tuple[list[Trace], str]:
    """The traces of one side and its label."""
    if isinstance(run, (str, os.PathLike)):
        path = Path(run)
        if path.is_dir():
            from ..tables.runfolder import read_folder

            try:
                read_folder(path, traces=False)
                return open_run(path), path.name or str(path)  # type: ignore[return-value]
            except FileNotFoundError as exc:
                raise CompareError(f"run {which}: {exc}; pass a run folder (rollkit eval --out DIR)") from None
        if path.is_file():
            from ..core.store import load

            return open_run(path), path.stem  # type: ignore[return-value]
        raise CompareError(f"run {which}: no run folder or trace file at {path}")
    if getattr(run, "run", None) is not None and getattr(run, "_traces", True) is None:
        run = run.run  # a run read back lazily (rk.load_run): its tables, not its traces
    if isinstance(run, LazyRun):
        return run, which
    traces = getattr(run, "traces", run)  # an EvalResult
    if isinstance(traces, Trace):
        traces = [traces]
    if not isinstance(traces, Iterable) or isinstance(traces, (str, bytes)):
        raise CompareError(
            f"run {which} is a {type(run).__name__}; pass an rk.evaluate result, a run folder path or a list of rk.Trace"
        )
    listed = list(traces)
    for index, trace in enumerate(listed):
        if not isinstance(trace, Trace):
            raise CompareError(f"run {which}: item {index} is a {type(trace).__name__}, not an rk.Trace")
    out = getattr(run, "out", None)
    return listed, (Path(out).name if out else which)


def _units(traces: list[Trace], by: str) -> tuple[dict[str, dict[str, float | None]], set[str]]:
    """unit key -> signal -> value (None: missing), and every signal seen."""
    names: set[str] = set()
    per_rollout: dict[str, list[tuple[str, dict[str, float | None]]]] = {}
    seen: dict[str, int] = {}
    for task, repeat, values in _signal_rows(traces):
        if repeat is None:  # traces without batch ids: their order among the task's
            repeat = seen.get(task, 0)
        seen[task] = seen.get(task, 0) + 1
        names.update(values)
        per_rollout.setdefault(task, []).append((f"{task}#{repeat}", values))
    units: dict[str, dict[str, float | None]] = {}
    for task, rollouts in per_rollout.items():
        if by == "repeat":
            for key, values in rollouts:
                units[key] = values
            continue
        merged: dict[str, float | None] = {}
        for name in {n for _, values in rollouts for n in values}:
            present = [v for _, values in rollouts if (v := values.get(name)) is not None]
            merged[name] = sum(present) / len(present) if present else None
        units[task] = merged
    return units, names


def _signal_rows(traces: Any) -> Iterator[tuple[str, Any, dict[str, float | None]]]:
    """(task, repeat, signals) per rollout: from the traces, or from a lazy
    run's rollouts table (no Trace built; the same values)."""
    if isinstance(traces, list):
        for trace in traces:
            yield str(trace.info.get("example_id", trace.task.key)), trace.info.get("repeat"), trace_signals(trace)
        return
    table = traces.arrow("rollouts")
    named = [n for n in table.column_names if n.startswith(("reward.", "metric."))]
    columns = {n: table.column(n).to_pylist() for n in ("example_id", "task_key", "repeat", "reward", "_scored", *named)}
    for i in range(table.num_rows):
        example = columns["example_id"][i]
        scored = columns["_scored"][i]
        values: dict[str, float | None] = {"reward": _value(columns["reward"][i])}
        for n in named:  # every name some trace has: the same union of names, missing values None
            values[n] = _value(columns[n][i]) if scored else None
        yield str(columns["task_key"][i] if example is None else example), columns["repeat"][i], values


def _cost(traces: Any) -> RunCost:
    """A run's cost and reward per dollar: from the traces, or from a lazy
    run's rollouts table (the same values)."""
    if isinstance(traces, list):
        return run_cost([t.cost_usd for t in traces], [t.scored_reward for t in traces])
    table = traces.arrow("rollouts")
    return run_cost(table.column("cost_usd").to_pylist(), table.column("reward").to_pylist())


def _value(value: float | None) -> float | None:
    return None if value is None or value != value else value


def compare(
    a: Any,
    b: Any,
    *,
    by: str = "task",
    signals: Iterable[str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
    labels: tuple[str, str] | None = None,
) -> Comparison:
    """Compare run `b` against run `a` on the tasks both ran (see the module
    docstring). `signals` limits the signals compared; `resamples` is the
    number of bootstrap resamples (and of sign patterns beyond 16 pairs);
    `seed` makes both reproducible; `labels` names the runs in the table."""
    if by not in ("task", "repeat"):
        raise CompareError(f"by must be 'task' (a task's repeats averaged) or 'repeat' (pairs by task and repeat), got {by!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise CompareError(f"resamples must be a whole number >= 1, got {resamples!r}")
    traces_a, label_a = _traces_of(a, "A")
    traces_b, label_b = _traces_of(b, "B")
    if labels is not None:
        label_a, label_b = labels
    elif label_a == label_b:
        label_a, label_b = f"A ({label_a})", f"B ({label_b})"
    for traces, which, label in ((traces_a, "A", label_a), (traces_b, "B", label_b)):
        if not traces:
            raise CompareError(f"run {which} ({label}) has no traces: nothing to compare")
    units_a, names_a = _units(traces_a, by)
    units_b, names_b = _units(traces_b, by)
    common = [key for key in units_a if key in units_b]
    if not common:
        unit = "task" if by == "task" else "(task, repeat)"
        raise CompareError(
            f"runs {label_a} and {label_b} have no {unit} in common ({len(units_a)} in A, e.g. {next(iter(units_a))!r}; "
            f"{len(units_b)} in B, e.g. {next(iter(units_b))!r}): compare runs of the same task set"
        )
    wanted = sorted(names_a | names_b, key=lambda n: (n != "reward", not n.startswith("reward."), n))
    if signals is not None:
        asked = list(signals)
        unknown = [s for s in asked if s not in names_a | names_b]
        if unknown:
            raise CompareError(f"no signal {', '.join(map(repr, unknown))} in either run; they have {', '.join(wanted)}")
        wanted = asked
    only_a = [key for key in units_a if key not in units_b]
    only_b = [key for key in units_b if key not in units_a]
    result = Comparison(label_a, label_b, by, [], [], len(common), only_a, only_b, resamples,
                        cost_a=_cost(traces_a), cost_b=_cost(traces_b))
    for name in wanted:
        result.signals.append(_signal(name, units_a, units_b, common, names_a, names_b, result, resamples, seed))
    return result


def _side(units: dict[str, dict[str, float | None]], name: str) -> tuple[tuple[float | None, ...], int, int]:
    values = [v for unit in units.values() if (v := unit.get(name)) is not None]
    return mean_interval(values), len(values), len(units)


def _signal(name: str, units_a: dict[str, dict[str, float | None]], units_b: dict[str, dict[str, float | None]],
            common: list[str], names_a: set[str], names_b: set[str], result: Comparison,
            resamples: int, seed: int) -> SignalComparison:
    (mean_a, low_a, high_a), scored_a, total_a = _side(units_a, name)
    (mean_b, low_b, high_b), scored_b, total_b = _side(units_b, name)
    found = SignalComparison(name, mean_a, low_a, high_a, scored_a, total_a, mean_b, low_b, high_b, scored_b, total_b)
    rows = result.rows
    if name not in names_a or name not in names_b:
        where = "B" if name in names_b else "A"
        found.note = f"only in {where}: not compared"
        for key in common:
            rows.append(_row(result, key, name, units_a[key].get(name), units_b[key].get(name), f"only in {where}"))
        return found
    diffs = []
    for key in common:
        va, vb = units_a[key].get(name), units_b[key].get(name)
        if va is None or vb is None:
            outcome = "missing in both" if va is None and vb is None else ("missing in A" if va is None else "missing in B")
            found.missing_both += outcome == "missing in both"
            found.missing_a += outcome == "missing in A"
            found.missing_b += outcome == "missing in B"
        else:
            diffs.append(vb - va)
            outcome = "win" if vb > va else "loss" if vb < va else "tie"
            found.wins += outcome == "win"
            found.losses += outcome == "loss"
            found.ties += outcome == "tie"
        rows.append(_row(result, key, name, va, vb, outcome))
    for key in result.only_a:
        rows.append(_row(result, key, name, units_a[key].get(name), None, "only in A"))
    for key in result.only_b:
        rows.append(_row(result, key, name, None, units_b[key].get(name), "only in B"))
    found.pairs = len(diffs)
    if diffs:
        found.diff = sum(diffs) / len(diffs)
        found.low, found.high = bootstrap_interval(diffs, resamples=resamples, seed=seed)
        found.p_value = sign_flip_test(diffs, resamples=resamples, seed=seed)
    else:
        found.note = "no pair has a value in both runs: not compared"
    return found


def _row(result: Comparison, key: str, name: str, va: float | None, vb: float | None, outcome: str) -> dict[str, Any]:
    task, _, repeat = key.rpartition("#") if result.by == "repeat" else (key, "", "")
    return {
        "key": key, "example_id": task, "repeat": int(repeat) if repeat.isdigit() else None, "signal": name,
        "a": va, "b": vb, "diff": None if va is None or vb is None else vb - va, "outcome": outcome,
    }


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def _table(c: Comparison) -> str:
    unit = c._unit
    lines = [
        f"A = {c.label_a}, B = {c.label_b}: {c.common} {unit}s paired"
        f"{' (by task: repeats averaged)' if c.by == 'task' else ' (by task and repeat)'}",
        f"difference B - A with a bootstrap 95% interval ({c.resamples} resamples); p: {c.test}",
        "",
    ]
    w = max([len(s.signal) for s in c.signals] + [6])
    header = (f"{'signal':<{w}} {'mean A':>7} {'n A':>9} {'mean B':>7} {'n B':>9} {'B - A':>7} "
              f"{'95% interval':>18} {'p':>6} {'W/T/L':>10} {'missing A/B/both':>16}")
    lines.append(header)
    for s in c.signals:
        p = "-" if s.p_value is None else f"{s.p_value:.3f}"
        wtl = f"{s.wins}/{s.ties}/{s.losses}"
        missing = f"{s.missing_a}/{s.missing_b}/{s.missing_both}"
        lines.append(
            f"{s.signal:<{w}} {_num(s.mean_a):>7} {f'{s.scored_a}/{s.total_a}':>9} {_num(s.mean_b):>7} "
            f"{f'{s.scored_b}/{s.total_b}':>9} {_num(s.diff):>7} {_interval(s.low, s.high):>18} {p:>6} {wtl:>10} {missing:>16}"
        )
    lines.append("")
    for which, cost in (("A", c.cost_a), ("B", c.cost_b)):
        if cost is not None:
            lines.append(f"{which}: {cost.text()}")
    lines.append(f"n = {unit}s with a value / {unit}s in the run; W/T/L = B better / equal / worse, per {unit}")
    for which, keys in (("A", c.only_a), ("B", c.only_b)):
        if keys:
            shown = ", ".join(keys[:5]) + (f", ... ({len(keys)} in all)" if len(keys) > 5 else "")
            lines.append(f"only in {which}: {len(keys)} {unit}s, not paired: {shown}")
    lines.extend(f"note: {note}" for note in c.notes)
    return "\n".join(lines)
