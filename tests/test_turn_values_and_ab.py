"""Turn values (rk.turn_values) and the live A/B test (rk.ab_test): the
statistics are proven on simulated data and on the seeded slippery toy, whose
true chance of success from every turn is known in closed form."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import rollkit as rk
from rollkit.examples import (
    arithmetic_tasks, careful_calculator_model, chain_agent, chain_tasks, success_chance, toy_calculator_model,
)
from rollkit.runs.ab import ABTestError
from rollkit.runs.sequential import ConfidenceSequence, decision, simulate
from rollkit.analysis.stats import t_critical, wilson_interval
from rollkit.runs.turnvalues import TurnValueError

SLIP = 0.2
STEPS = 6


# ---- the confidence sequence ------------------------------------------------

def _streams(p_a: float, p_b: float, streams: int, pairs: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((streams, pairs)) < p_b).astype(float) - (rng.random((streams, pairs)) < p_a)


def test_confidence_sequence_covers_the_true_difference_at_every_pair_at_its_stated_rate():
    # 2,000 simulated A/B tests of 400 pairs with a true difference of +0.1:
    # the share whose interval EVER excludes the truth, looked at after
    # every pair, stays within alpha (plus Monte Carlo error).
    diffs = _streams(0.5, 0.6, 2000, 400, seed=11)
    lower, upper = simulate(diffs, alpha=0.05)
    ever_missed = ((lower > 0.1) | (upper < 0.1)).any(axis=1).mean()
    assert ever_missed <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 2000)


def test_a_fixed_n_interval_peeked_at_after_every_pair_does_not_keep_its_rate():
    # The contrast: the 95% t interval recomputed after every pair, on the
    # same kind of data, excludes the truth at some point in far more than
    # 5% of the tests (the optional-stopping error the sequence avoids).
    diffs = _streams(0.5, 0.6, 2000, 400, seed=11)
    n = np.arange(1, 401)
    mean = diffs.cumsum(axis=1) / n
    var = (np.cumsum(diffs**2, axis=1) - n * mean**2) / np.maximum(n - 1, 1)
    half = np.array([t_critical(max(k - 1, 1)) for k in n]) * np.sqrt(np.maximum(var, 0) / n)
    looked = n >= 10  # even waiting for 10 pairs before the first look
    missed = (((mean - half > 0.1) | (mean + half < 0.1)) & looked).any(axis=1).mean()
    assert missed > 0.20


def test_the_vectorised_sequence_is_the_one_added_pair_by_pair():
    diffs = _streams(0.3, 0.7, 3, 200, seed=3)
    lower, upper = simulate(diffs)
    for stream in range(3):
        sequence = ConfidenceSequence()
        for i, d in enumerate(diffs[stream]):
            low, high = sequence.add(float(d))
            assert low == pytest.approx(lower[stream, i], abs=1e-12)
            assert high == pytest.approx(upper[stream, i], abs=1e-12)


def test_the_sequence_never_widens_and_refuses_an_observation_outside_its_range():
    sequence = ConfidenceSequence(0.05, -1.0, 1.0)
    widths = [(lambda iv: iv[1] - iv[0])(sequence.add(d)) for d in [1.0, 0.0, -1.0, 1.0, 1.0, 0.0] * 20]
    assert all(b <= a for a, b in zip(widths, widths[1:]))
    with pytest.raises(ValueError, match=r"observation 1.5 is outside the sequence's range \[-1.0, 1.0\]"):
        sequence.add(1.5)


def test_decision_reads_the_interval():
    assert decision(0.01, 0.3) == "B better"
    assert decision(-0.3, -0.01) == "A better"
    assert decision(-0.04, 0.05, margin=0.05) == "no difference that matters"
    assert decision(-0.04, 0.06, margin=0.05) is None


def test_wilson_interval_matches_its_formula_and_stays_in_range():
    low, high = wilson_interval(8, 16)
    assert (round(low, 4), round(high, 4)) == (0.2800, 0.7200)
    assert wilson_interval(0, 16)[0] == 0.0 and wilson_interval(16, 16)[1] == 1.0
    with pytest.raises(ValueError, match="need 0 <= successes <= n"):
        wilson_interval(3, 2)


# ---- turn values on the slippery toy ----------------------------------------

def _truth_after(trace: rk.Trace, turn: int) -> float:
    """The true chance of success once turn `turn`'s reply (and its tool
    result) is in: is the running total still right, and how many steps are left."""
    task = chain_tasks(8)[[t.key for t in chain_tasks(8)].index(trace.task.key)]
    results = [m.content for m in trace.messages if m.role == "tool"][:turn]
    total = task.data.start
    lost = False
    for (op, operand), got in zip(task.data.steps, results):
        total = {"+": total + operand, "-": total - operand, "*": total * operand}[op]
        lost = int(got) != total
    return success_chance(STEPS - min(turn, STEPS), lost, SLIP)


@pytest.fixture(scope="module")
def sources() -> list[rk.Trace]:
    result = rk.evaluate(chain_agent(slip=SLIP), chain_tasks(8), repeats=1, progress=False)
    return sorted(result.traces, key=lambda t: t.task.key)


@pytest.fixture(scope="module")
def batch(sources):
    return rk.turn_values_many(sources, chain_agent(slip=SLIP), n=32, progress=False)


def test_turn_value_intervals_cover_the_true_per_turn_success_rate_of_the_toy(batch):
    # Only the rows whose truth is strictly between 0 and 1 say anything: a
    # lost rollout (truth 0) and the last step's rows are covered by construction.
    covered, total = 0, 0
    for values in batch.values:
        for row in values.rows:
            truth = _truth_after(values.trace, row["turn"])
            if row["forked"] and 0 < truth < 1:
                total += 1
                covered += row["low"] <= truth <= row["high"]
    assert total >= 20
    # 95% intervals: more than 3 misses in 20+ would be a 1-in-50 event.
    assert total - covered <= max(3, round(0.1 * total))


def test_a_lost_rollout_never_succeeds_again_and_the_final_turn_is_its_own_outcome(batch):
    for values in batch.values:
        for row in values.rows:
            if row["forked"] and _truth_after(values.trace, row["turn"]) == 0.0:
                assert (row["successes"], row["rate"]) == (0, 0.0)
        last = values.rows[-1]
        assert (last["turn"], last["forked"], last["n"]) == (values.trace.num_turns, False, 1)
        assert last["rate"] == values.trace.reward


def test_the_largest_drop_of_a_failed_rollout_is_the_turn_it_slipped(batch):
    failed = [v for v in batch.values if v.trace.reward == 0.0]
    assert failed, "the seeded toy fails some of these eight"
    for values in failed:
        slipped = next(k for k in range(1, STEPS + 1) if _truth_after(values.trace, k) == 0.0)
        assert values.drop[0] == slipped
        assert "calculator(" in values.rows[slipped]["action"]


def test_drops_frame_and_histogram_count_failed_rollouts(batch):
    drops = batch.drops()
    assert list(drops.columns) == ["trace_id", "example_id", "succeeded", "drop_turn", "drop", "turns"]
    assert int((drops["succeeded"] == False).sum()) == sum(v.trace.reward == 0.0 for v in batch.values)  # noqa: E712
    figure = rk.plots.drop_turns(batch)
    assert sum(sum(bar.y) for bar in figure.data) == int((drops["succeeded"] == False).sum())  # noqa: E712


def test_step_labels_export_in_the_documented_layout(batch, tmp_path):
    path = batch.export(tmp_path / "labels.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == sum(v.trace.num_turns for v in batch.values)
    first = records[0]
    assert set(first) == {"trace_id", "example_id", "turn", "messages", "value", "low", "high", "n", "successes", "delta"}
    values = batch.values[0]
    assert first["turn"] == 1 and first["value"] == values.rows[1]["rate"]
    assert first["delta"] == pytest.approx(values.rows[1]["rate"] - values.rows[0]["rate"])
    assert first["messages"][-1]["role"] == "assistant" and first["messages"][-1]["tool_calls"]
    import pyarrow.parquet as pq

    table = pq.read_table(batch.export(tmp_path / "labels.parquet"))
    assert table.num_rows == len(records) and json.loads(table.column("messages")[0].as_py()) == first["messages"]


def test_turn_values_reproduce_exactly(sources):
    again = [rk.turn_values(sources[0], chain_agent(slip=SLIP), n=8, progress=False).frame() for _ in range(2)]
    assert again[0].equals(again[1])


def test_turn_values_write_a_run_folder_and_resume_without_rerunning(sources, tmp_path):
    first = rk.turn_values(sources[1], chain_agent(slip=SLIP), n=4, turns=[0, 2], out=tmp_path / "tv", progress=False)
    lines = (tmp_path / "tv" / "traces.jsonl").read_text().splitlines()
    assert len(lines) == 8
    again = rk.turn_values(sources[1], chain_agent(slip=SLIP), n=4, turns=[0, 2], out=tmp_path / "tv", resume=True,
                           progress=False)
    assert (tmp_path / "tv" / "traces.jsonl").read_text().splitlines() == lines
    assert again.frame().equals(first.frame())


def test_turn_values_refuse_bad_input_naming_it(sources):
    agent = chain_agent(slip=SLIP)
    with pytest.raises(TurnValueError, match=r"n must be a whole number >= 1 \(continuations per turn\), got 0"):
        rk.turn_values(sources[0], agent, n=0)
    with pytest.raises(TurnValueError, match=r"turns must be whole numbers from 0 to 7 .* got 9"):
        rk.turn_values(sources[0], agent, turns=[1, 9])
    with pytest.raises(TypeError, match="turn values are of a rk.Trace, got str"):
        rk.turn_values("trace.jsonl", agent)


def test_the_view_escapes_what_the_model_wrote(batch):
    from rollkit.notebook import TurnValueView
    from rollkit.runs.turnvalues import TurnValues

    original = batch.values[0]
    trace = original.trace.model_copy(deep=True)
    trace.messages[trace.sampled[0]].content = "<script>alert(1)</script>"
    view = TurnValueView(TurnValues(trace, original.rows), turn=1)
    assert "<script>alert(1)" not in view.transcript.value
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in view.transcript.value


# ---- the live A/B test ------------------------------------------------------

def _agent(model):
    return rk.Agent(model=model, limits=rk.RolloutLimits(max_turns=6))


def test_ab_test_stops_on_the_right_side_and_early():
    tasks = arithmetic_tasks(90)
    seen = []
    result = rk.ab_test(_agent(toy_calculator_model()), _agent(careful_calculator_model()), tasks,
                        on_pair=seen.append)
    assert (result.decision, result.reason) == ("B better", "decided")
    assert result.low > 0 and result.pairs < 90
    assert [s.pairs for s in seen] == list(range(1, result.pairs + 1))  # counted in planned order, one by one
    swapped = rk.ab_test(_agent(careful_calculator_model()), _agent(toy_calculator_model()), tasks)
    assert (swapped.decision, swapped.reason) == ("A better", "decided") and swapped.high < 0


def test_ab_test_stops_for_futility_when_the_difference_cannot_matter():
    # Two stochastic agents with the same success rate (the slippery toy
    # under two seeds): their pairs differ, their mean difference is 0.
    same = rk.ab_test(chain_agent(slip=SLIP, seed=1), chain_agent(slip=SLIP, seed=2), chain_tasks(400),
                      margin=0.3)
    assert (same.decision, same.reason) == ("no difference that matters", "futility")
    assert -0.3 <= same.low and same.high <= 0.3
    assert any(a.reward != b.reward for a, b in same.pairs_counted)
    assert len(same.pairs_counted) == same.pairs


def test_ab_test_stops_at_the_budget_undecided_and_writes_both_sides(tmp_path):
    result = rk.ab_test(_agent(toy_calculator_model()), _agent(careful_calculator_model()), arithmetic_tasks(30),
                        max_pairs=5, out=tmp_path / "ab")
    assert (result.decision, result.reason, result.pairs) == (None, "budget", 5)
    assert len(rk.load(tmp_path / "ab" / "a.jsonl")) == len(result.a) == 5
    assert {t.info["arm"] for t in rk.load(tmp_path / "ab" / "b.jsonl")} == {"b"}


def test_ab_test_and_plan_refuse_bad_input_naming_it():
    a = _agent(toy_calculator_model())
    with pytest.raises(ABTestError, match=r"alpha must be a float between 0 and 1 \(e.g. 0.05\), got 5"):
        rk.ab_test(a, a, arithmetic_tasks(3), alpha=5)
    with pytest.raises(ABTestError, match="b must be a rk.Agent, got str"):
        rk.ab_test(a, "toy-careful", arithmetic_tasks(3))
    with pytest.raises(ABTestError, match="p_a is a success rate from 0 to 1, got 2"):
        rk.plan_ab(2, 0.5)


def test_plan_ab_needs_more_pairs_for_a_smaller_difference():
    big, small = rk.plan_ab(0.5, 0.9, sims=200), rk.plan_ab(0.5, 0.7, sims=200)
    assert big.median_pairs < small.median_pairs
    assert big.wrong <= 0.05 and small.right >= 0.9


def test_a_sweep_leaves_the_source_trace_untouched_and_each_continuation_its_own_record(sources):
    before = sources[2].model_dump_json()
    values = rk.turn_values(sources[2], chain_agent(slip=SLIP), n=3, turns=[2], progress=False)
    assert sources[2].model_dump_json() == before
    first, second = values.continuations[2][:2]
    assert first.messages is not second.messages and first.model_calls is not second.model_calls
    assert [m.content for m in first.messages[:6]] == [m.content for m in sources[2].messages[:6]]
    assert first.num_turns == second.num_turns == sources[2].num_turns


def test_an_ab_folder_is_followed_live_pair_by_pair_and_rollkit_view_shows_it(tmp_path):
    from rollkit.notebook.decide import ABMonitor
    from rollkit.notebook.viewpage import view
    from rollkit.runs.ab import ABFollower

    result = rk.ab_test(_agent(toy_calculator_model()), _agent(careful_calculator_model()), arithmetic_tasks(90),
                        out=tmp_path / "ab")
    log = (tmp_path / "ab" / "ab.jsonl").read_bytes()
    lines = log.splitlines(keepends=True)
    assert len(lines) == result.pairs + 2  # start, one per pair, end
    # A writer caught mid-line: the half line waits for the next read.
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "ab.jsonl").write_bytes(b"".join(lines[:3]) + lines[3][:10])
    follower = ABFollower(partial)
    assert [s.pairs for s in follower.read()] == [1, 2] and follower.start["planned"] == 90
    with open(partial / "ab.jsonl", "ab") as file:
        file.write(lines[3][10:])
    assert [s.pairs for s in follower.read()] == [3]
    monitor = ABMonitor.follow(tmp_path / "ab")
    assert list(monitor.figure.data[1].y) == [s.low for s in result.history]
    assert f"{result.pairs} of 90 pairs" in monitor.status.value and "B better" in monitor.status.value
    page = view([tmp_path / "ab"])
    _, heading, part = page.children  # the page's style, the folder's heading, its monitor (no charts: no run)
    assert str(tmp_path / "ab") in heading.value and isinstance(part, ABMonitor)


def test_a_rollout_stopped_by_its_turn_limit_counts_as_failed_where_it_went_wrong():
    agent = chain_agent(slip=SLIP)
    short = rk.Agent(model=agent.model, limits=rk.RolloutLimits(max_turns=3))
    stopped = rk.evaluate(short, chain_tasks(2), progress=False).traces
    assert all(t.stop_condition and t.reward == 0 for t in stopped)
    batch = rk.turn_values_many(stopped, short, n=2, progress=False)
    assert list(batch.drops()["succeeded"]) == [False, False]


def test_resuming_with_another_source_of_the_same_name_never_takes_its_continuations(tmp_path):
    def run(seed: int) -> rk.Trace:
        return rk.evaluate(chain_agent(slip=0.5, seed=seed), chain_tasks(1), progress=False).traces[0]

    def told(trace: rk.Trace) -> list[str | None]:
        return [m.content for m in trace.messages]

    first = run(3)
    second = next(t for t in map(run, range(4, 40)) if told(t)[:6] != told(first)[:6])
    assert first.info["rollout_id"] == second.info["rollout_id"]
    rk.turn_values(first, chain_agent(slip=SLIP), n=2, turns=[2], out=tmp_path / "tv", progress=False)
    try:
        values = rk.turn_values(second, chain_agent(slip=SLIP), n=2, turns=[2], out=tmp_path / "tv",
                                resume=True, progress=False)
    except ValueError as exc:  # the run folder refuses another task set: also never mixed
        assert "tv" in str(exc)
        return
    for continuation in values.continuations[2]:
        assert [m.content for m in continuation.messages[:6]] == [m.content for m in second.messages[:6]]


def test_ab_test_refuses_a_value_outside_its_bounds_and_an_out_that_is_a_file(tmp_path):
    a = _agent(toy_calculator_model())
    with pytest.raises(ABTestError, match=r"reward = 1.0 in rollout .* is outside bounds=\(0.0, 0.5\)"):
        rk.ab_test(a, _agent(careful_calculator_model()), arithmetic_tasks(6), bounds=(0.0, 0.5))
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ABTestError, match="is a file; pass a folder"):
        rk.ab_test(a, a, arithmetic_tasks(3), out=tmp_path / "taken")


# ---- one spelling per idea: `name` runs, `name_async` is awaited -----------------------


async def test_the_async_spellings_are_awaited_without_a_warning_and_the_sync_ones_are_refused(sources):
    """`await rk.turn_values_async(...)` (and _many, ab_test) is the spelling
    in async code; the sync name there is refused, naming it."""
    import re
    import warnings

    agent = chain_agent(slip=SLIP)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = await rk.turn_values_async(sources[2], agent, n=2, turns=[2], progress=False)
        many = await rk.turn_values_many_async(sources[:1], agent, n=1, progress=False)
        ab = await rk.ab_test_async(_agent(toy_calculator_model()), _agent(careful_calculator_model()),
                                    arithmetic_tasks(4), max_pairs=2)
    assert ([r["turn"] for r in new.rows], len(many.values), ab.pairs) == ([2], 1, 2)
    for call, old, spelled in [
        (lambda: rk.turn_values(sources[2], agent, n=2, turns=[2], progress=False), "turn_values", "turn_values_async"),
        (lambda: rk.turn_values_many(sources[:1], agent, n=1, progress=False), "turn_values_many",
         "turn_values_many_async"),
        (lambda: rk.ab_test(_agent(toy_calculator_model()), _agent(careful_calculator_model()), arithmetic_tasks(4),
                            max_pairs=2), "ab_test", "ab_test_async"),
    ]:
        message = (f"rk.{old}(...) runs to the end, and an event loop already runs here (a notebook cell, async "
                   f"code) that it would block: write `await rk.{spelled}(...)`")
        with pytest.raises(rk.UsageError, match=re.escape(message)):
            call()
