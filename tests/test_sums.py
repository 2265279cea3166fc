"""A trace's sums of floats are the same float on every Python: the reward,
agent and model time add left to right (core.sums.sum_in_order), as the
tables DuckDB builds do, whatever the builtin sum() does (Python 3.12's
compensates each float's rounding, so 3.11 and 3.13 gave different
rewards, and the tables agreed with one of them)."""

from __future__ import annotations

import builtins
import functools
import json
import math
import operator

import pyarrow.parquet as pq

import rollkit as rk
from rollkit.core.sums import sum_in_order
from rollkit.examples.bigrun import big_run
from rollkit.tables import columns
from rollkit.tables.columns import TableSet


def _in_order(values):
    return functools.reduce(operator.add, values, 0)


def test_sum_in_order_adds_left_to_right():
    assert sum_in_order([0.1, 0.2, 0.3]) == 0.6000000000000001 != math.fsum([0.1, 0.2, 0.3])
    assert sum_in_order([1e16, 1.0, -1e16]) == 0.0
    assert sum_in_order([]) == 0 and sum_in_order(x for x in (2.5, -0.0)) == 2.5


def _compensating_sum(values, start=0):
    """A sum() that rounds once at the end, as Python 3.12's nearly does (ints as they are)."""
    values = list(values)
    if all(isinstance(v, int) for v in values) and isinstance(start, int):
        return _builtin_sum(values, start)
    return math.fsum([start, *values])


_builtin_sum = builtins.sum


def test_the_tables_and_the_trace_agree_whatever_pythons_sum_does(tmp_path, monkeypatch):
    # Three rewards, and three calls, whose left-to-right sum is not the one
    # a compensating sum gives: with the builtin sum() swapped for one, the
    # Python build, the native build and the Trace's properties all still
    # give the left-to-right float.
    folder = big_run(6, tmp_path / "run", turns=3, tasks=2)
    source = folder / "traces.jsonl"
    traces = [json.loads(line) for line in source.read_text().splitlines()]
    for t in traces:
        t["rewards"] = {"a": 1e16, "b": 1.0, "c": -1e16}
        t["reward_weights"] = {}
        for call, latency in zip(t["model_calls"], (0.1, 0.2, 0.3)):
            call["start"], call["end"] = 0.0, latency  # latencies 0.1, 0.2 and 0.3 exactly
    source.write_text("".join(json.dumps(t) + "\n" for t in traces))
    reward = _in_order([1e16, 1.0, -1e16])
    model_time = _in_order([c["end"] - c["start"] for c in traces[0]["model_calls"]])
    assert reward != math.fsum([1e16, 1.0, -1e16])
    assert model_time != math.fsum(c["end"] - c["start"] for c in traces[0]["model_calls"])
    monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", 0)
    built = {}
    for native in (False, True):
        monkeypatch.setattr(columns, "_NATIVE", native)
        with monkeypatch.context() as patched:
            patched.setattr(builtins, "sum", _compensating_sum)
            tables = TableSet(source, cache=tmp_path / f"native-{native}", progress=False)
            loaded = rk.load(source)
            properties = [(t.reward, t.model_time) for t in loaded]
        rollouts = pq.read_table(tables.files["rollouts"][0])
        built[native] = list(zip(rollouts.column("reward").to_pylist(), rollouts.column("model_time").to_pylist()))
        assert properties == [(reward, model_time)] * 6
    assert built[False] == built[True] == [(reward, model_time)] * 6
