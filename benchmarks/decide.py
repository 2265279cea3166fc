"""Turn values and the live A/B test: what they cost.

Prints:
- the turn-value sweep of one 20-turn rollout with n=16 (320 continuations)
  against a plain rk.evaluate of 320 fresh rollouts of the same task, in the
  same process: rollouts/s and model calls (turns)/s of each, and the ratio
  (continuations are shorter than fresh rollouts, so turns/s is the fair
  rate);
- the live interval's update per pair (ConfidenceSequence.add plus the
  decision), and the A/B test's whole bookkeeping per pair (pairing in
  planned order, the sequence, the state handed to a live view), both in
  microseconds;
- plan_ab's time for 400 simulated tests of up to 2,000 pairs.

Run: python benchmarks/decide.py [--json PATH]
"""

from __future__ import annotations

import statistics
import sys
import time

import rollkit as rk
from rollkit.examples import chain_agent, chain_tasks
from rollkit.runs.ab import _Test
from rollkit.runs.sequential import ConfidenceSequence, decision
from _common import Results, json_path

STEPS = 19  # 19 calculator calls and the answer: a 20-turn rollout


def sweep_vs_evaluate(results: Results) -> None:
    task = chain_tasks(1, steps=STEPS)[0]
    agent = chain_agent(slip=0.02, steps=STEPS)
    source = rk.evaluate(agent, [task], progress=False).traces[0]
    assert source.num_turns == STEPS + 1, source.num_turns
    rows = []
    for _ in range(3):
        t0 = time.perf_counter()
        values = rk.turn_values(source, agent, n=16, progress=False)
        sweep = time.perf_counter() - t0
        continuations = [t for traces in values.continuations.values() for t in traces]
        sweep_turns = sum(t.num_turns - (t.info.get("forked_from") or [None, 0])[1] for t in continuations)
        t0 = time.perf_counter()
        plain = rk.evaluate(agent, [task], repeats=len(continuations), progress=False)
        fresh = time.perf_counter() - t0
        plain_turns = sum(t.num_turns for t in plain.traces)
        rows.append((len(continuations) / sweep, sweep_turns / sweep, len(plain.traces) / fresh, plain_turns / fresh))
    sweep_rps, sweep_tps, plain_rps, plain_tps = (statistics.median(c) for c in zip(*rows))
    print(f"turn-value sweep, 20-turn rollout, n=16 ({len(continuations)} continuations): "
          f"{sweep_rps:,.0f} rollouts/s, {sweep_tps:,.0f} turns/s (median of 3)")
    print(f"plain rk.evaluate of {len(continuations)} fresh rollouts: {plain_rps:,.0f} rollouts/s, {plain_tps:,.0f} turns/s")
    print(f"ratio sweep / plain: {sweep_rps / plain_rps:.2f}x rollouts/s, {sweep_tps / plain_tps:.2f}x turns/s")
    results.add("turn-value sweep, 20-turn rollout, n=16 (median of 3)", sweep_tps, "turns/s", plain_tps,
                "rk.evaluate of as many fresh rollouts")
    results.add("turn-value sweep, 20-turn rollout, n=16 (median of 3)", sweep_rps, "rollouts/s", plain_rps,
                "rk.evaluate of as many fresh rollouts")


def interval_update(results: Results, pairs: int = 200_000) -> None:
    import random

    rng = random.Random(0)
    diffs = [float(rng.random() < 0.6) - float(rng.random() < 0.5) for _ in range(pairs)]
    sequence = ConfidenceSequence()
    t0 = time.perf_counter()
    for d in diffs:
        decision(*sequence.add(d), 0.05)
    per = (time.perf_counter() - t0) / pairs
    print(f"live interval update (add + decision): {per * 1e6:.2f} us per pair ({pairs:,} pairs)")
    results.add("live interval update (add + decision), per pair", per * 1e6, "µs")

    task = rk.Task(prompt="x")
    traces = {}
    for arm, reward in (("a", 0.0), ("b", 1.0)):
        trace = rk.Trace(task=rk.core.trace.TaskRef.of(task))
        trace.rewards = {"reward": reward}
        trace.ok = True
        traces[arm] = trace
    n = 20_000
    states = []
    test = _Test(rk.Agent(model="echo"), rk.Agent(model="echo"), [rk.Task(prompt=f"q{i}") for i in range(n)],
                 repeats=1, signal="reward", alpha=0.05, margin=None, max_pairs=None, stop=False, bounds=(0.0, 1.0),
                 concurrency=1, seed=0, out=None, on_pair=states.append)
    t0 = time.perf_counter()
    for i in range(n):
        test.landed(i, "a", traces["a"])
        test.landed(i, "b", traces["b"])
    per = (time.perf_counter() - t0) / n
    assert len(states) == n
    print(f"A/B bookkeeping per pair (pairing, signals, interval, state for the live view): {per * 1e6:.1f} us")
    results.add("A/B bookkeeping per pair (pairing, signals, interval, live view's state)", per * 1e6, "µs")


def planner(results: Results) -> None:
    t0 = time.perf_counter()
    plan = rk.plan_ab(0.5, 0.6, max_pairs=2000, sims=400)
    results.add("plan_ab(0.5, 0.6), 400 simulated tests of up to 2,000 pairs", time.perf_counter() - t0, "s")
    print(f"plan_ab(0.5, 0.6), 400 tests of up to 2,000 pairs: {time.perf_counter() - t0:.2f} s -> {plan}")


if __name__ == "__main__":
    measured = Results("decide.py", "turn values against plain rk.evaluate; the live A/B test's bookkeeping; plan_ab")
    sweep_vs_evaluate(measured)
    interval_update(measured)
    planner(measured)
    measured.save(json_path(sys.argv))
