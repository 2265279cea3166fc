"""Paired comparison of runs: `rk.compare`, `rk.frames.compare`,
`rk.plots.compare`, `rollkit compare DIR_A DIR_B`, and the statistics under
them (rollkit.analysis.stats): means with 95% intervals, a bootstrap interval of
the paired difference, the sign-flip permutation test, wins / ties / losses,
tasks in one run only, missing values counted, and each bad input's message."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from test_cli import rollkit_cli

import rollkit as rk
from rollkit.examples import arithmetic_tasks, careful_calculator_model, demo_agent
from rollkit.analysis.compare import CompareError, compare
from rollkit.analysis.stats import EXACT_LIMIT, bootstrap_interval, mean_interval, sign_flip_test, t_critical

TASKS = arithmetic_tasks(12)  # add, sub, mul cycling: 4 subtraction problems
SUB = {t.key for t in TASKS if t.data.operation == "sub"}


def _careful() -> rk.Agent:
    return demo_agent(model=careful_calculator_model())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The flawed toy (wrong on subtraction) and the careful one, 2 repeats each, as run folders."""
    root = tmp_path_factory.mktemp("runs")
    a = rk.evaluate(demo_agent(), TASKS, repeats=2, out=root / "flawed", progress=False)
    b = rk.evaluate(_careful(), TASKS, repeats=2, out=root / "careful", progress=False)
    return a, b


# ---- statistics ----------------------------------------------------------------


def test_mean_interval_is_the_student_t_interval():
    mean, low, high = mean_interval([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)  # t(0.975, 2) * s / sqrt(n)
    assert (mean, round(low, 6), round(high, 6)) == (2.0, round(2 - half, 6), round(2 + half, 6))
    assert mean_interval([0.5]) == (0.5, None, None)
    assert mean_interval([]) == (None, None, None)
    # beyond the table, the expansion meets the known quantiles
    assert abs(t_critical(60) - 2.000) < 1e-3 and abs(t_critical(120) - 1.980) < 1e-3


def test_sign_flip_test_is_exact_up_to_the_limit_and_counts_every_pattern():
    diffs = [1.0, 1.0, 1.0, -0.5, 0.0, 2.0]
    nonzero = [d for d in diffs if d]
    observed = abs(sum(nonzero))
    extreme = sum(abs(sum(s * d for s, d in zip(signs, nonzero))) >= observed - 1e-12
                  for signs in itertools.product((-1, 1), repeat=len(nonzero)))
    assert sign_flip_test(diffs) == extreme / 2 ** len(nonzero)
    assert sign_flip_test([1.0] * 4) == 2 / 16  # all four the same way: 2 of 16 patterns as far out
    assert sign_flip_test([0.0, 0.0]) == 1.0


def test_sign_flip_test_beyond_the_limit_samples_reproducibly():
    diffs = [0.3] * 30 + [-0.1] * 10
    assert len(diffs) > EXACT_LIMIT
    p = sign_flip_test(diffs, resamples=2000, seed=1)
    assert p == sign_flip_test(diffs, resamples=2000, seed=1)
    assert 0 < p < 0.001  # 1/(2000+1) at least: the observed pattern is one of them
    balanced = [0.5, -0.5] * 20
    assert sign_flip_test(balanced, resamples=2000) > 0.5


def test_bootstrap_interval_holds_the_mean_and_is_seeded():
    diffs = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.25]
    low, high = bootstrap_interval(diffs, resamples=1000, seed=3)
    assert low < statistics.mean(diffs) < high
    assert (low, high) == bootstrap_interval(diffs, resamples=1000, seed=3)
    assert bootstrap_interval([2.0, 2.0], resamples=50) == (2.0, 2.0)


# ---- rk.compare ----------------------------------------------------------------


def test_compare_finds_the_flaw_on_subtraction_by_task(runs):
    a, b = runs
    result = rk.compare(a, b)
    reward = result.signal("reward")
    assert (reward.mean_a, reward.mean_b) == (pytest.approx(8 / 12), 1.0)
    assert (reward.scored_a, reward.total_a, reward.scored_b, reward.total_b) == (12, 12, 12, 12)
    assert reward.diff == pytest.approx(4 / 12)
    assert (reward.wins, reward.ties, reward.losses) == (4, 8, 0)
    assert 0 < reward.low < reward.diff < reward.high
    assert reward.p_value == 2 / 16  # exact: 4 non-zero differences, all positive
    wins = {row["key"] for row in result.rows if row["signal"] == "reward" and row["outcome"] == "win"}
    assert wins == SUB
    assert result.signal("metric.used_calculator").diff == 0.0
    assert result.only_a == result.only_b == []
    assert "paired sign-flip permutation test" in result.table()


def test_compare_by_repeat_pairs_task_and_repeat(runs):
    a, b = runs
    result = rk.compare(a.out, b.out, by="repeat", signals=["reward.correct"])
    assert [s.signal for s in result.signals] == ["reward.correct"]
    s = result.signals[0]
    assert (s.pairs, s.wins, s.ties, s.losses) == (24, 8, 16, 0)
    assert s.p_value == 2 / 2**8
    assert result.common == 24 and result.rows[0]["repeat"] in (0, 1)


def test_missing_values_are_counted_and_tasks_in_one_run_listed(runs):
    a, _ = runs
    flaky = rk.Agent(model=rk.ScriptedModel(lambda request: _flaky_reply(request)))
    b = rk.evaluate(flaky, TASKS[:9], progress=False)  # three tasks fewer, mul tasks fail
    result = compare(a, b, labels=("flawed", "flaky"))
    reward = result.signal("reward")
    mul_common = [t.key for t in TASKS[:9] if t.data.operation == "mul"]
    assert reward.missing_b == len(mul_common) == 3 and reward.missing_a == reward.missing_both == 0
    assert reward.pairs == 6 and (reward.scored_b, reward.total_b) == (6, 9)
    assert result.only_a == [t.key for t in TASKS[9:]] and result.only_b == []
    rows = [r for r in result.rows if r["signal"] == "reward"]
    assert len(rows) == 12  # every task of either run keeps its row
    assert {r["key"] for r in rows if r["outcome"] == "missing in B"} == set(mul_common)
    assert {r["outcome"] for r in rows if r["key"] in result.only_a} == {"only in A"}
    table = result.table()
    assert "only in A: 3 tasks, not paired" in table
    assert "missing A/B/both" in table and " 0/3/0" in table


def _flaky_reply(request: rk.Request):  # type: ignore[no-untyped-def]
    question = next(m.content for m in request.messages if m.role == "user")
    if "each" in question:
        raise RuntimeError("model down on multiplication")
    last = request.messages[-1]
    if last.role == "tool":
        return f"The answer is {last.content}."
    import re

    x, y = re.findall(r"\d+", question)[:2]
    op = "-" if "gives away" in question else "+"
    return rk.ScriptedModel.call("calculator", expression=f"{x} {op} {y}")


def test_a_signal_in_one_run_only_is_reported_not_compared(runs):
    a, _ = runs
    plain = rk.evaluate(rk.Agent(model="echo"), [rk.Task(id=t.key, prompt="hi") for t in TASKS], progress=False)
    result = compare(a, plain)
    only = result.signal("reward.correct")
    assert only.note == "only in A: not compared" and only.diff is None and only.mean_a == pytest.approx(8 / 12)
    assert "note: reward.correct: only in A: not compared" in result.table()


def test_runs_with_no_task_in_common_are_refused_with_the_reason(runs):
    a, _ = runs
    other = rk.evaluate(demo_agent(), arithmetic_tasks(3, seed=5), progress=False)
    with pytest.raises(CompareError, match=r"have no task in common \(12 in A, e.g. 'arith-0-000'; 3 in B, "
                                           r"e.g. 'arith-5-000'\): compare runs of the same task set"):
        compare(a, other)


def test_bad_input_is_named(tmp_path, runs):
    a, _ = runs
    with pytest.raises(CompareError, match="run B is a int; pass an rk.evaluate result, a run folder path or a list"):
        compare(a, 3)
    with pytest.raises(CompareError, match=f"run B: no run folder or trace file at {tmp_path / 'nope'}"):
        compare(a, tmp_path / "nope")
    with pytest.raises(CompareError, match="is not a run folder"):
        compare(a, tmp_path)
    with pytest.raises(CompareError, match="by must be 'task'"):
        compare(a, a, by="turn")
    with pytest.raises(CompareError, match="no signal 'reward.nope' in either run"):
        compare(a, a, signals=["reward.nope"])
    with pytest.raises(CompareError, match=r"run A \(A\) has no traces"):
        compare([], a)


# ---- frames, plots, the command line ----------------------------------------------


def test_frames_compare_is_one_row_per_task_and_signal(runs):
    a, b = runs
    frame = rk.frames.compare(a, b, signals=["reward"])
    assert list(frame.columns) == ["key", "example_id", "repeat", "signal", "a", "b", "diff", "outcome"]
    assert len(frame) == 12
    assert set(frame.loc[frame.outcome == "win", "example_id"]) == SUB
    assert frame["diff"].sum() == pytest.approx(4.0)


def test_plots_compare_draws_each_difference_with_its_interval_and_the_tasks(runs):
    a, b = runs
    result = rk.compare(a, b)
    fig = rk.plots.compare(result)
    diffs, diagonal, tasks = fig.data
    compared = [s for s in result.signals if s.diff is not None]
    assert list(diffs.x) == [s.diff for s in compared]
    assert list(diffs.error_x.array) == pytest.approx([s.high - s.diff for s in compared])
    counts = [n for n, _ in tasks.customdata]  # tasks with the same two values share a point
    assert sum(counts) == 12 and sum(n for n, x, y in zip(counts, tasks.x, tasks.y) if y > x) == 4
    assert "reward per task" in fig.layout.annotations[1].text
    with pytest.raises(KeyError, match="no signal 'nope'"):
        rk.plots.compare(result, signal="nope")


def test_cli_compare_prints_the_table_and_names_bad_input(runs, tmp_path):
    a, b = runs
    done = rollkit_cli("compare", str(a.out), str(b.out))
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.startswith(("reward", "metric"))}
    assert lines["reward"][:7] == ["reward", "0.667", "12/12", "1.000", "12/12", "0.333", "[0.083,"]
    assert lines["reward"][-3:] == ["0.125", "4/8/0", "0/0/0"]
    missing = rollkit_cli("compare", str(a.out), str(tmp_path / "none"))
    assert missing.returncode == 2 and f"{tmp_path / 'none'} does not exist" in missing.stderr  # a usage error (issue 54)
    (tmp_path / "empty").mkdir()
    empty = rollkit_cli("compare", str(a.out), str(tmp_path / "empty"))
    assert empty.returncode == 1 and "is not a run folder" in empty.stderr
