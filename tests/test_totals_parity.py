"""One reward rule, one token-total rule and one cost rule (rollkit.core.totals),
held over every fixture: per rollout, the Trace (`scored_reward`,
`num_*_tokens`, `cost_usd`), the Python row engine's rollouts table, the
native SQL build's, and every export that carries a reward, token totals or
cost (sft; rl, tokens, preference carry the reward) give what the rule
gives on the saved record.

The native build cannot call Python, so this is where its SQL is checked
against the rule; the others call the rule, and this test is where a format
that stopped calling it would show."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import rollkit as rk
from rollkit.core.totals import cost_total, record_cost, record_reward, record_token_totals, scored_reward, token_totals
from rollkit.core.messages import Request, Response, TokenLogprobs
from rollkit.examples import chain_tasks
from rollkit.examples.chain import slippery_calculator_model
from rollkit.interop.exports import rl
from rollkit.tables import columns
from rollkit.tables.columns import TableSet

FIXTURES = Path(__file__).parent / "fixtures"
_TOKENS = ("input_tokens", "output_tokens", "total_tokens")


def _fixture_runs(tmp_path: Path) -> list[list[rk.Trace]]:
    """Every fixture file rollkit reads, as its traces (a log its own tool
    refuses is left out: tests/test_fidelity.py checks rollkit refuses it too)."""
    runs = []
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        if path.suffix == ".md" or path.name == "metadata.json":
            continue
        try:
            traces = rk.load(path)
        except rk.TraceFileError:
            continue
        if traces:
            runs.append(traces)
    return runs


def _same(a: Any, b: Any) -> bool:
    """Equal, a missing value (None, NaN, NA) only equal to a missing one."""
    missing = [x is None or (isinstance(x, float) and math.isnan(x)) for x in (a, b)]
    return missing[0] and missing[1] if any(missing) else a == b


def _rollouts(source: Path, cache: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], list]:
    """The rollouts table's rows, and for each the build of its part ("native" or "python")."""
    monkeypatch.setattr(columns, "_NATIVE", native)
    cache.mkdir(parents=True)
    tables = TableSet(source, cache=cache, progress=False)
    rows, builds = [], []
    for part, f in zip(tables.parts, tables.files["rollouts"]):
        build = json.loads((cache / f"{part['name']}.json").read_text())["build"]
        for row in pq.read_table(f).to_pylist():
            rows.append(row)
            builds.append(build)
    return rows, builds


def _check(name: str, rule: dict[str, tuple], got: dict[str, dict[str, Any]], with_tokens: bool = True) -> int:
    """Each rollout `got` names has the rule's reward (and token totals and cost)."""
    assert set(got) <= set(rule), (name, set(got) - set(rule))
    for trace_id, row in got.items():
        reward, tokens, cost = rule[trace_id]
        assert _same(row["reward"], reward), (name, trace_id, row["reward"], reward)
        if with_tokens:
            assert all(_same(row[k], v) for k, v in zip(_TOKENS, tokens)), (name, trace_id, row, tokens)
            assert _same(row["cost_usd"], cost), (name, trace_id, row["cost_usd"], cost)
    return len(got)


def test_the_rules_themselves() -> None:
    # L23: not scored, or scored with every reward missing: None, never 0; weights default to 1.0
    assert scored_reward(False, {"a": 1.0}, {}) is None
    assert scored_reward(True, {"a": None}, {}) is None and scored_reward(True, {}, {}) is None
    assert scored_reward(True, {"a": 1.0, "b": None, "c": 0.5}, {"c": 2.0}) == 2.0
    assert scored_reward(True, {"a": 0.1, "b": 0.2, "c": 0.3}, {}) == (0.1 + 0.2) + 0.3  # left to right
    assert token_totals(None, True, True) == (0, 0, 0)
    assert token_totals((10, 4, 12), False, False) == (10, 4, 12)
    assert token_totals((10, 4, 12), True, False) == (None, 4, None)
    calls = [{"committed": True, "usage": {"input_tokens": 5, "output_tokens": None}, "cum_input_tokens": 5,
              "cum_output_tokens": 0, "cum_total_tokens": 5},
             {"committed": False, "usage": {}, "cum_input_tokens": 99},
             {"committed": True, "usage": {"input_tokens": 1, "output_tokens": 2}, "cum_input_tokens": 6,
              "cum_output_tokens": 2, "cum_total_tokens": 8}]
    assert record_token_totals(calls) == (6, None, None)
    assert record_reward({"phases": {"scoring": {}}, "rewards": {"x": 1}, "reward_weights": {"x": 0.5}}) == 0.5
    # the source's total first; else the last call's running total (None: unknown, never 0); 0.0 before any call
    assert cost_total(2, None, True) == 2.0 and cost_total(None, None, True) is None and cost_total(None, None, False) == 0.0
    assert record_cost({"model_calls": [{"cum_cost_usd": 0.5}, {"cum_cost_usd": 0.75}]}) == 0.75


class _WithTokenIds(rk.Model):
    """`inner`'s replies with token ids and logprobs, as a vLLM server
    returns them (the ids are made up: only that they are there counts)."""

    def __init__(self, inner: rk.Model) -> None:
        self.inner, self.name = inner, inner.name  # priced as the toy is

    async def complete(self, request: Request) -> Response:
        response = await self.inner.complete(request)
        prompt = list(range(1, 3 * len(request.messages) + 1))
        return response.model_copy(update={"tokens": TokenLogprobs(prompt_ids=prompt, ids=[7, 8], logprobs=[-0.5, -0.25])})


async def _all_runs(tmp_path: Path) -> Path:
    """Every fixture's traces and a run with repeats whose rewards differ
    (groups the preference export pairs) and token ids (rl, tokens), in one
    file; a rollout id seen twice (two versions of one log) kept once."""
    agent = rk.Agent(model=_WithTokenIds(slippery_calculator_model(0.5, 0.0, 0)), limits=rk.RolloutLimits(max_turns=5))
    with pytest.warns(UserWarning, match="no price for model 'toy-slippery'"):  # cost is not what is held here
        made = await rk.evaluate_async(agent, chain_tasks(3, steps=3), repeats=4, progress=False)
    traces = [t for run in _fixture_runs(tmp_path) for t in run] + made.traces
    unique = list({t.id: t for t in reversed(traces)}.values())[::-1]
    return rk.save(unique, tmp_path / "all" / "traces.jsonl")


async def test_trace_rows_native_sql_and_every_export_share_the_reward_and_token_rules(tmp_path, monkeypatch):
    monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", 0)  # small files: built natively all the same
    monkeypatch.setattr(columns, "_BATCH", 64)  # a part DuckDB must not build (mixed types) stays small
    path = await _all_runs(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    rule = {t["id"]: (record_reward(t), record_token_totals(t.get("model_calls") or ()), record_cost(t)) for t in records}
    assert len(rule) == len(records) >= 500, len(records)  # the corpus grows; it does not shrink unnoticed
    assert len({r for r, _, _ in rule.values()}) > 5 and any(None in tokens for _, tokens, _ in rule.values())
    assert {c is None for _, _, c in rule.values()} == {True, False}
    counts = {"trace": _check("trace", rule, {t.id: {"reward": t.scored_reward, "cost_usd": t.cost_usd, **dict(zip(
        _TOKENS, (t.num_input_tokens, t.num_output_tokens, t.num_total_tokens)))} for t in rk.load(path)})}
    for native in (False, True):
        rows, builds = _rollouts(path, tmp_path / f"native-{native}", native, monkeypatch)
        built = [r for r, b in zip(rows, builds) if b == ("native" if native else "python")]
        which = "native" if native else "python"
        counts[which] = _check(which, rule, {r["id"]: r for r in built})
    sft = rk.export(path, tmp_path / "sft.jsonl", format="sft")
    counts["sft"] = _check("sft", rule, {r["id"]: r for r in map(json.loads, sft.read_text().splitlines())})
    rl_rows = [row for t in rk.load(path) for row in rl.rows_of(t)]
    counts["rl"] = _check("rl", rule, {r["id"]: r for r in rl_rows}, with_tokens=False)
    with pytest.warns(UserWarning, match="kept no token ids"):  # the fixtures' turns
        written = rk.export(path, tmp_path / "tokens.jsonl", format="tokens")
    counts["tokens"] = _check("tokens", rule, {r["branch_id"]: r for r in map(json.loads, written.read_text().splitlines())},
                              with_tokens=False)
    pairs = rk.export(path, tmp_path / "pairs.jsonl", format="preference")
    chosen = {}
    for pair in map(json.loads, pairs.read_text().splitlines()):
        chosen[pair["branch_id"]] = {"reward": pair["score_chosen"]}
        chosen[pair["rejected_branch_id"]] = {"reward": pair["score_rejected"]}
    counts["preference"] = _check("preference", rule, chosen, with_tokens=False)
    # every path was held on many rollouts (a vacuous pass fails here)
    assert counts["trace"] == counts["python"] == counts["sft"] == len(rule), counts
    assert counts["native"] >= len(rule) // 2, counts
    assert min(counts["rl"], counts["tokens"], counts["preference"]) >= 4, counts
