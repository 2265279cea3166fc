"""What rollouts cost: prices (rollkit.core.prices) checked against
genai-prices' own calculation over every model it lists, a call's dollars on
the trace and in the frames (both builds of the columnar store), the dollar
limit (its L11-L13 tests are test_lifecycle_step's, over every limit kind;
its bad values test_errors'), unknown and user prices, a run's cost and
reward per dollar in summary, compare, the A/B and the monitor, and the
costs other tools wrote, read into the same fields.

Hand-computed figures use genai-prices' rates of today (gpt-4o: $2.5 input,
$1.25 cached input, $10 output per million; gemini-2.5-pro: $1.25 / $10 up
to 200k prompt tokens, $2.5 / $15 above): a new table with other rates
fails them, on purpose (the oracle tests follow the table by themselves)."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from helpers.fake_provider import FakeProvider

import rollkit as rk
from rollkit import frames
from rollkit.core import prices
from rollkit.core.messages import Usage
from rollkit.examples import arithmetic_tasks, careful_calculator_model, demo_agent
from rollkit.tables.lazyrun import open_run

FIXTURES = Path(__file__).parent / "fixtures"
TOY_PRICES = {"input": 1000.0, "output": 2000.0}  # dollars per million tokens: a toy call costs cents


@pytest.fixture(autouse=True)
def _fresh_prices():
    """Each test starts with no user prices and no model warned about."""
    saved_user, saved_warned, saved_unpriced = dict(prices._user), set(prices._warned), set(prices._unpriced)
    prices._user.clear()
    prices._warned.clear()
    prices._unpriced.clear()
    yield
    prices._unpriced.clear()
    prices._unpriced.update(saved_unpriced)
    prices._user.clear()
    prices._user.update(saved_user)
    prices._warned.clear()
    prices._warned.update(saved_warned)


class TableModel(rk.ScriptedModel):
    """A scripted model the public table prices as `ref` (a real model name)."""

    def __init__(self, replies, ref: str, usage: Usage | None = None, **options) -> None:
        super().__init__(replies, **options)
        self.ref, self.usage = ref, usage

    def price_ref(self):
        return (self.ref, None)

    def _response(self, reply, request):
        response = super()._response(reply, request)
        if self.usage is not None:
            response = response.model_copy(update={"usage": self.usage})
        return response


def _oracle(model: str, usage: Usage) -> float:
    from genai_prices import Usage as TableUsage, calc_price

    return float(calc_price(TableUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                                       cache_read_tokens=usage.cache_read_tokens,
                                       cache_write_tokens=usage.cache_write_tokens,
                                       output_reasoning_tokens=usage.reasoning_tokens), model).total_price)


# ---- prices --------------------------------------------------------------------------------

def test_every_model_of_the_table_is_priced_as_genai_prices_prices_it():
    """The rate card (floats, read once per model) against genai-prices'
    own Decimal calculation, for every model of every provider it lists:
    a small call, one past the 200k/272k tiers with cache reads, writes and
    reasoning, and one almost all cached."""
    from genai_prices import Usage as TableUsage, data_snapshot

    usages = [Usage(input_tokens=1000, output_tokens=200),
              Usage(input_tokens=300_000, output_tokens=3000, cache_read_tokens=100_000, cache_write_tokens=20_000,
                    reasoning_tokens=1000),
              Usage(input_tokens=250_000, output_tokens=10, cache_read_tokens=249_000)]
    checked, wrong = 0, []
    for provider in data_snapshot.get_snapshot().providers:
        for info in provider.models:
            card = prices.card_of(provider, info)
            for u in usages:
                want = float(info.calc_price(TableUsage(
                    input_tokens=u.input_tokens, output_tokens=u.output_tokens, cache_read_tokens=u.cache_read_tokens,
                    cache_write_tokens=u.cache_write_tokens, output_reasoning_tokens=u.reasoning_tokens),
                    provider).total_price)
                if not math.isclose(card.cost(u), want, rel_tol=1e-9, abs_tol=1e-12):
                    wrong.append((provider.id, info.id, u, card.cost(u), want))
                checked += 1
    assert wrong == []
    assert checked > 3000  # the table lists thousands of models


@pytest.mark.parametrize(("model", "usage"), [
    ("gpt-4o", Usage(input_tokens=10_000, output_tokens=500, cache_read_tokens=4000)),
    ("claude-sonnet-4", Usage(input_tokens=50_000, output_tokens=800, cache_read_tokens=30_000, cache_write_tokens=5000)),
    ("gemini-2.5-pro", Usage(input_tokens=250_000, output_tokens=1000, cache_read_tokens=100_000)),
    ("gpt-5.4", Usage(input_tokens=280_000, output_tokens=2000, cache_read_tokens=200_000)),
])
async def test_a_call_of_a_real_model_costs_what_genai_prices_says(model, usage):
    agent = rk.Agent(model=TableModel(["done"], model, usage))
    trace = await agent.run(rk.Task(prompt="hi"))
    [call] = trace.model_calls
    assert call.cost_usd == pytest.approx(_oracle(model, usage), rel=1e-12)
    assert trace.cost_usd == call.cost_usd == call.cum_cost_usd
    assert trace.info["cost_from"].startswith("computed from the usage: genai-prices ")


def test_cache_reads_and_the_long_context_tier_by_hand():
    gpt4o = prices.rate_card("gpt-4o", ("gpt-4o", None))
    # 6,000 fresh input at $2.5, 4,000 cached at $1.25, 500 output at $10 (per million).
    assert gpt4o.cost(Usage(input_tokens=10_000, output_tokens=500, cache_read_tokens=4000)) == pytest.approx(
        (6000 * 2.5 + 4000 * 1.25 + 500 * 10) / 1e6)
    gemini = prices.rate_card("gemini-2.5-pro", ("gemini-2.5-pro", None))
    # A prompt past 200k pays the higher rate on all its tokens; at 200k exactly, the base rate.
    assert gemini.cost(Usage(input_tokens=250_000, output_tokens=1000)) == pytest.approx(
        (250_000 * 2.5 + 1000 * 15) / 1e6)
    assert gemini.cost(Usage(input_tokens=200_000, output_tokens=1000)) == pytest.approx(
        (200_000 * 1.25 + 1000 * 10) / 1e6)


def test_the_endpoint_names_the_provider_and_an_unknown_endpoint_falls_back_to_the_name():
    at_openai = prices.rate_card("gpt-4o", ("gpt-4o", "https://api.openai.com/v1"))
    elsewhere = prices.rate_card("gpt-4o", ("gpt-4o", "http://127.0.0.1:9/v1"))
    from genai_prices import __version__

    assert at_openai.source == f"genai-prices {__version__} openai/gpt-4o"
    assert elsewhere.source == (f"genai-prices {__version__} openai/gpt-4o, an estimate: found by the model's name "
                                "alone, for http://127.0.0.1:9/v1, which is not openai's endpoint")
    assert (at_openai.estimate, elsewhere.estimate) == (False, True)


async def test_an_unknown_model_costs_na_never_0_with_one_warning_naming_it():
    agent = rk.Agent(model=TableModel(lambda r: "ok", "no-such-model-q7"))
    with pytest.warns(UserWarning) as caught:
        traces = [await agent.run(rk.Task(prompt="hi")) for _ in range(3)]
    texts = [str(w.message) for w in caught if "no price" in str(w.message)]
    assert texts == [
        "no price for model 'scripted' (public table genai-prices does not list 'no-such-model-q7'): its calls' "
        "cost_usd is NA, never 0; give one with rk.prices({'scripted': {'input': ..., 'output': ..., "
        "'cache_read': ...}}) (dollars per million tokens)"]
    assert [t.cost_usd for t in traces] == [None, None, None]
    assert [c.cost_usd for c in traces[0].model_calls] == [None]
    assert "cost_from" not in traces[0].info
    assert "cost=- " in traces[0].summary()
    row = frames.rollouts(traces).iloc[0]
    assert math.isnan(row["cost_usd"])


async def test_user_prices_win_over_the_table_and_price_an_unknown_model():
    usage = Usage(input_tokens=10_000, output_tokens=500, cache_read_tokens=4000)
    rk.prices({"scripted": {"input": 1.0, "output": 2.0, "cache_read": 0.1}})
    trace = await rk.Agent(model=TableModel(["ok"], "gpt-4o", usage)).run(rk.Task(prompt="hi"))
    assert trace.model_calls[0].cost_usd == pytest.approx((6000 * 1.0 + 4000 * 0.1 + 500 * 2.0) / 1e6)
    assert trace.info["cost_from"] == "computed from the usage: rk.prices"
    # Without a cache rate, cached tokens pay the input rate; None forgets a price.
    rk.prices({"scripted": {"input": 1.0, "output": 2.0}})
    trace = await rk.Agent(model=TableModel(["ok"], "gpt-4o", usage)).run(rk.Task(prompt="hi"))
    assert trace.model_calls[0].cost_usd == pytest.approx((10_000 * 1.0 + 500 * 2.0) / 1e6)
    rk.prices({"scripted": None})
    assert "scripted" not in rk.prices()
    trace = await rk.Agent(model=TableModel(["ok"], "gpt-4o", usage)).run(rk.Task(prompt="hi"))
    assert trace.model_calls[0].cost_usd == pytest.approx(_oracle("gpt-4o", usage))


@pytest.mark.parametrize(("table", "message"), [
    ({"m": {"input": -1, "output": 1}}, "rk.prices: 'm' input must be a number of dollars >= 0, got -1"),
    ({"m": {"input": 1, "output": 1, "cached": 1}},
     "rk.prices: 'm' has unknown keys ['cached']; the keys are input, output, cache_read, cache_write, requests"),
    ({"m": {"input": 1}}, "rk.prices: 'm' needs output (dollars per million tokens)"),
    ({"m": 3.0}, "rk.prices: the price of 'm' is a dict such as {'input': 1.0, 'output': 2.0} (dollars per "
                 "million tokens), got 3.0"),
    ([("m", 1)], "rk.prices takes a dict of model name -> rates, got list"),
])
def test_bad_prices_are_refused_naming_what_is_wrong(table, message):
    with pytest.raises(rk.UsageError) as caught:
        rk.prices(table)
    assert str(caught.value) == message
    assert rk.prices() == {}


async def test_a_call_through_openai_model_is_priced_by_its_usage_cache_and_reasoning_included():
    from rollkit.programs.openai_model import OpenAIModel

    fake = await FakeProvider().start()
    try:
        model = OpenAIModel("gpt-4o", base_url=fake.url, api_key="k")
        trace = await rk.Agent(model=model).run(rk.Task(prompt="think about it please"))
        await model.aclose()
    finally:
        await fake.stop()
    [call] = trace.model_calls
    assert call.usage.cache_read_tokens == call.usage.input_tokens - 1 > 0  # the provider reported a cached part
    assert call.cost_usd == pytest.approx(_oracle("gpt-4o", call.usage), rel=1e-12)


async def test_the_toy_model_costs_na_without_a_warning_and_loads_no_price_table():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = await demo_agent().run(arithmetic_tasks(1)[0])
    assert trace.cost_usd is None and trace.model_calls[0].cost_usd is None
    assert "cost_usd" not in trace.model_dump_json()  # an unpriced trace is written as before
    out = subprocess.run(
        [sys.executable, "-c", "import asyncio, sys, rollkit as rk\n"
                               "from rollkit.examples import arithmetic_tasks, demo_agent\n"
                               "asyncio.run(demo_agent().run(arithmetic_tasks(1)[0]))\n"
                               "print('genai_prices' in sys.modules)"],
        capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_costs_survive_saving_and_loading(tmp_path):
    rk.prices({"toy-calculator": TOY_PRICES})
    trace = await demo_agent().run(arithmetic_tasks(1)[0])
    [back] = rk.load(rk.save([trace], tmp_path / "t.jsonl"))
    assert back == trace
    assert [c.cost_usd for c in back.model_calls] == [c.cost_usd for c in trace.model_calls]
    assert back.cost_usd == trace.cost_usd > 0


async def test_each_turn_costs_its_tokens_at_the_given_prices_and_the_trace_their_sum():
    rk.prices({"scripted": TOY_PRICES})
    agent = rk.Agent(model=rk.ScriptedModel(lambda r: "one two three four five"), limits={"max_turns": 4})
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    while await rollout.step("a b c"):
        pass
    trace = await rollout.close()
    costs = [(c.usage.input_tokens * 1000 + c.usage.output_tokens * 2000) / 1e6 for c in trace.turns]
    assert len(costs) == 4 and costs[0] < costs[-1]  # each prompt holds the turns before it
    assert [c.cost_usd for c in trace.turns] == pytest.approx(costs)
    assert [c.cum_cost_usd for c in trace.turns] == pytest.approx([sum(costs[:i + 1]) for i in range(4)])
    assert trace.cost_usd == pytest.approx(sum(costs))


# ---- the dollar limit -------------------------------------------------------------------

async def test_a_dollar_limit_over_a_model_without_a_price_is_refused_at_open():
    agent = rk.Agent(model=rk.ScriptedModel(["ok"]), limits={"max_cost_usd": 1})
    with pytest.raises(rk.UsageError) as caught:
        await agent.run(rk.Task(prompt="hi"))
    assert str(caught.value) == (
        "RolloutLimits(max_cost_usd=...) needs a price for model 'scripted', and it has none (it runs no paid "
        "model); give one with rk.prices({'scripted': {'input': ..., 'output': ...}}) (dollars per million "
        "tokens), or drop max_cost_usd")


async def test_a_turn_without_reported_usage_says_the_dollar_limit_is_no_longer_checked():
    from rollkit.programs.openai_model import OpenAIModel

    fake = await FakeProvider().start()
    try:
        model = OpenAIModel("gpt-4o", base_url=fake.url, api_key="k")
        agent = rk.Agent(model=model, limits=rk.RolloutLimits(max_cost_usd=5.0))
        rollout = agent.rollout(rk.Task(), user=True)
        await rollout.open()
        assert await rollout.step("quiet please") is True  # no usage in the answer: no price
        assert await rollout.step("hello") is True
        trace = await rollout.close()
        await model.aclose()
    finally:
        await fake.stop()
    assert trace.model_calls[0].cost_usd is None and trace.cost_usd is None
    assert trace.warnings[1:] == ["max_cost_usd is no longer checked: a turn's cost is unknown (its usage was not "
                                  "reported)"]
    assert trace.warnings[0].startswith("cost_usd is an estimate")  # gpt-4o's price, for a server on 127.0.0.1


# ---- frames, the columnar store ------------------------------------------------------------

async def _priced_traces() -> list[rk.Trace]:
    """Priced demo runs (one stopped by the dollar limit), an unpriced one
    and imported traces with the source's per-call and total costs."""
    rk.prices({"toy-calculator": TOY_PRICES})
    tasks = arithmetic_tasks(3)
    priced = [await demo_agent().run(t) for t in tasks]
    capped = await demo_agent(limits={"max_turns": 6, "max_cost_usd": 0.0}).run(tasks[0])
    unpriced = await rk.Agent(model=careful_calculator_model()).run(tasks[1])
    imported = [*rk.load(FIXTURES / "tau2" / "airline_results.json")[:2],
                *rk.load(FIXTURES / "swe-agent" / "swe-agent__test-repo-i1.traj")]
    return [*priced, capped, unpriced, *imported]


async def test_frames_carry_cost_per_rollout_turn_call_and_phase():
    traces = await _priced_traces()
    rollouts = frames.rollouts(traces)
    assert list(rollouts["cost_usd"].fillna(-1)) == [-1 if t.cost_usd is None else t.cost_usd for t in traces]
    assert traces[3].stop_condition == "max_cost_usd" and traces[3].num_turns == 0
    assert rollouts["cost_usd"].iloc[3] == 0.0  # refused before any call: nothing spent
    turns = frames.turns(traces[:1])
    assert list(turns["cost_usd"]) == [c.cost_usd for c in traces[0].turns]
    assert list(turns["cum_cost_usd"]) == pytest.approx(pd.Series(turns["cost_usd"]).cumsum().tolist())
    assert turns["max_cost_usd"].isna().all()
    assert frames.turns(traces[3:4]).empty
    calls = frames.calls(traces[5:6])  # tau2: the source's cost of each call
    assert list(calls["cost_usd"]) == [c.cost_usd for c in traces[5].model_calls]
    phases = frames.phases(traces[:1])
    assert dict(zip(phases["phase"], phases["cost_usd"])) == {
        "boot": 0.0, "setup": 0.0, "agent": traces[0].cost_usd, "finalize": 0.0, "scoring": 0.0}


async def test_the_columnar_store_builds_the_cost_columns_as_the_frames_do(tmp_path, monkeypatch):
    from test_columns import _same_frames
    from test_nativebuild import _same_tables

    from rollkit.tables import columns

    traces = await _priced_traces()
    path = rk.save(traces, tmp_path / "priced.jsonl")
    _same_frames(path, rk.load(path))
    monkeypatch.setattr(columns, "_NATIVE_MIN_BYTES", 0)
    _same_tables(path, tmp_path / "both", monkeypatch)
    table = open_run(path).rollouts()
    assert list(table["cost_usd"].fillna(-1)) == [-1 if t.cost_usd is None else t.cost_usd for t in traces]


# ---- a run's cost: summary, compare, A/B, monitor --------------------------------------------

async def test_summary_gives_the_runs_cost_and_reward_per_dollar():
    rk.prices({"toy-calculator": TOY_PRICES})
    result = await rk.evaluate_async(demo_agent(), arithmetic_tasks(4), progress=False)
    costs = [t.cost_usd for t in result.traces]
    rewards = [t.scored_reward for t in result.traces]
    total = sum(costs)
    per = (sum(rewards) / len(rewards)) / (total / len(costs))
    assert f"cost: ${total:.4f} (${total / 4:.4f} per rollout over 4); reward per dollar: {per:.4g}" in result.summary()
    unpriced = await rk.evaluate_async(rk.Agent(model=careful_calculator_model()), arithmetic_tasks(2), progress=False)
    assert ("cost: - (2 of 2 rollouts have no price: give one with rk.prices); reward per dollar: -"
            in unpriced.summary())


async def test_compare_shows_reward_per_dollar_beside_reward(tmp_path):
    rk.prices({"toy-calculator": TOY_PRICES, "toy-careful": {"input": 3000.0, "output": 6000.0}})
    tasks = arithmetic_tasks(6)
    a = await rk.evaluate_async(demo_agent(), tasks, progress=False, out=tmp_path / "a")
    b = await rk.evaluate_async(rk.Agent(model=careful_calculator_model()), tasks, progress=False, out=tmp_path / "b")
    comparison = rk.compare(a, b)
    for side, result in ((comparison.cost_a, a), (comparison.cost_b, b)):
        rewards = [t.scored_reward for t in result.traces]
        costs = [t.cost_usd for t in result.traces]
        assert side.total == pytest.approx(sum(costs))
        assert side.reward_per_dollar == pytest.approx((sum(rewards) / 6) / (sum(costs) / 6))
    text = comparison.table()
    assert f"A: {comparison.cost_a.text()}" in text and f"B: {comparison.cost_b.text()}" in text
    assert comparison.cost_b.reward_per_dollar < comparison.cost_a.reward_per_dollar  # 3x the price
    # Read back lazily from the run folders (the rollouts table): the same figures.
    lazy = rk.compare(tmp_path / "a", tmp_path / "b")
    assert lazy.cost_a.total == pytest.approx(comparison.cost_a.total)
    assert lazy.cost_b.reward_per_dollar == pytest.approx(comparison.cost_b.reward_per_dollar)
    # One side without a price: its reward per dollar is NA, never computed from a partial sum.
    rk.prices({"toy-careful": None})
    c = await rk.evaluate_async(rk.Agent(model=careful_calculator_model()), tasks, progress=False)
    unpriced = rk.compare(a, c)
    assert unpriced.cost_b.total is None and unpriced.cost_b.reward_per_dollar is None
    assert "B: cost: - (6 of 6 rollouts have no price" in unpriced.table()


async def test_the_ab_summary_gives_each_arms_cost():
    rk.prices({"toy-calculator": TOY_PRICES, "toy-careful": TOY_PRICES})
    result = await rk.ab_test_async(demo_agent(), rk.Agent(model=careful_calculator_model()), arithmetic_tasks(4),
                                    stop=False)
    cost_a = sum(t.cost_usd for t in result.a)
    assert result.cost_a.total == pytest.approx(cost_a)
    assert f"A {result.cost_a.text()}. B {result.cost_b.text()}" in result.summary()


async def test_the_monitor_reads_each_rollouts_cost_from_its_trace_line_as_the_trace_has_it():
    from rollkit.runs.live import RunState, finished_from_line

    traces = await _priced_traces()
    for trace in traces:
        line = trace.model_dump_json()
        assert finished_from_line(line, None).cost == trace.cost_usd, trace.id
        assert finished_from_line(json.dumps(json.loads(line), indent=None, sort_keys=True), None).cost == trace.cost_usd
    state = RunState()
    for trace in traces[:3]:
        state.finished(trace)
    assert state.run_cost().total == pytest.approx(sum(t.cost_usd for t in traces[:3]))
    state.finished(traces[4])  # no price
    assert state.run_cost().total is None and state.run_cost().unpriced == 1


async def test_the_monitor_shows_the_dollars_spent():
    pytest.importorskip("ipywidgets")
    from rollkit.notebook.monitor import RunMonitor

    rk.prices({"toy-calculator": TOY_PRICES})
    result = await rk.evaluate_async(demo_agent(), arithmetic_tasks(3), progress=False)
    monitor = RunMonitor(result)
    total = sum(t.cost_usd for t in result.traces)
    assert f'data-cost="{total!r}"' in monitor.counts.value
    assert f"cost: ${total:.4f}" in monitor.counts.value
    monitor.close()


# ---- other tools' costs ---------------------------------------------------------------------

def test_imported_costs_map_into_the_cost_fields_with_where_they_came_from():
    tau2 = rk.load(FIXTURES / "tau2" / "airline_results.json")[0]
    document = json.loads((FIXTURES / "tau2" / "airline_results.json").read_text())
    simulation = document["simulations"][0]
    # (the fixed greeting tau2 sends for the agent, cost 0.0, is no model call)
    source = [m.get("cost") for m in simulation["messages"][1:] if m["role"] == "assistant"]
    assert [c.cost_usd for c in tau2.model_calls] == source
    assert tau2.cost_usd == pytest.approx(simulation["agent_cost"])
    assert tau2.info["cost_from"] == "the source's cost of each model call"
    assert tau2.metrics["user_cost"] == simulation["user_cost"]  # the user simulator's: not the agent's calls

    unpriced = rk.load(FIXTURES / "tau2" / "whissle_airline_run1.json")[0]
    # No call priced (only the greeting said 0.0, and it is no call), no total: unknown, never 0.
    assert unpriced.cost_usd is None and "cost_from" not in unpriced.info

    swe = rk.load(FIXTURES / "swe-agent" / "swe-agent__test-repo-i1.traj")[0]
    stats = json.loads((FIXTURES / "swe-agent" / "swe-agent__test-repo-i1.traj").read_text())["info"]["model_stats"]
    assert swe.cost_usd == stats["instance_cost"] and swe.info["cost_usd"] == stats["instance_cost"]
    assert swe.info["cost_from"] == "the source's total (model_stats.instance_cost)"
    assert all(c.cost_usd is None for c in swe.model_calls)

    mini_path = FIXTURES / "mini-swe-agent" / "pvlib__pvlib-python-1606.traj.json"
    mini = rk.load(mini_path)[0]
    raw = json.loads(mini_path.read_text())
    assert [c.cost_usd for c in mini.model_calls] == [m["extra"]["cost"] for m in raw["messages"]
                                                      if m["role"] == "assistant"]
    assert mini.cost_usd == pytest.approx(raw["info"]["model_stats"]["instance_cost"])

    atif_path = FIXTURES / "harbor" / "atif_rfc_example.json"
    atif = rk.load(atif_path)[0]
    steps = json.loads(atif_path.read_text())["steps"]
    assert [c.cost_usd for c in atif.model_calls] == [s["metrics"]["cost_usd"] for s in steps if s.get("metrics")]
    assert atif.cost_usd == pytest.approx(json.loads(atif_path.read_text())["final_metrics"]["total_cost_usd"])


async def test_the_dollar_limit_is_forecast_and_replayed_like_a_token_limit():
    from rollkit.core.forecast import forecast
    from rollkit.core.replay import replay

    rk.prices({"scripted": TOY_PRICES})
    agent = rk.Agent(model=rk.ScriptedModel(lambda r: "one two three four five"),
                     limits=rk.RolloutLimits(max_cost_usd=0.1))
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    while await rollout.step("a b c"):
        pass
    trace = await rollout.close()
    [row] = [r for r in forecast(trace) if r.limit == "max_cost_usd"]
    assert (row.reached, row.ends_after, row.used) == (True, trace.num_turns, trace.cost_usd)
    # Replayed under a lower dollar limit: refused before the turn whose running cost first reached it.
    lower = trace.turns[1].cum_cost_usd
    cols = await replay([trace], limits={"max_cost_usd": lower})
    fired = [turn for turn, hook, fired in zip(cols["turn"], cols["hook"], cols["fired"])
             if hook == "max_cost_usd" and fired]
    assert fired[0] == 3
    # A trace whose cost is unknown has no dollar forecast, and replays no dollar stop.
    rk.prices({"scripted": None})
    unpriced = await rk.Agent(model=rk.ScriptedModel(["ok"]), limits={"max_turns": 3}).run(rk.Task(prompt="hi"))
    assert [r.limit for r in forecast(unpriced.model_copy(update={"limits": {"max_cost_usd": 1.0}}))] == []
    cols = await replay([unpriced], limits={"max_cost_usd": 0.5})
    assert not any(f for h, f in zip(cols["hook"], cols["fired"]) if h == "max_cost_usd")


async def test_the_price_is_read_when_the_rollout_opens_not_inside_agent_time():
    class Remote(rk.ScriptedModel):
        def price_ref(self):
            return ("gpt-4o-mini", "https://api.openai.com/v1#open-test")

    key = ("gpt-4o-mini", "https://api.openai.com/v1#open-test")
    prices._table.pop(key, None)
    rollout = rk.Agent(model=Remote(["ok"])).rollout(rk.Task(prompt="hi"))
    assert key not in prices._table
    await rollout.open()
    assert prices._table[key].source.endswith(" openai/gpt-4o-mini")
    await rollout.close()


async def test_atif_written_by_rollkit_carries_each_steps_dollars_and_the_total(tmp_path):
    rk.prices({"toy-calculator": TOY_PRICES})
    trace = await demo_agent().run(arithmetic_tasks(1)[0])
    path = rk.save([trace], tmp_path / "t.json", format="atif")
    document = json.loads(path.read_text())
    steps = [s["metrics"]["cost_usd"] for s in document["steps"] if s["source"] == "agent"]
    assert steps == [c.cost_usd for c in trace.turns]
    assert document["final_metrics"]["total_cost_usd"] == trace.cost_usd
    [back] = rk.load(path)
    assert back.cost_usd == trace.cost_usd


async def test_rollkit_views_page_of_a_trace_file_gives_its_cost():
    from rollkit.notebook.viewpage import summary_html

    rk.prices({"toy-calculator": TOY_PRICES})
    traces = [await demo_agent().run(t) for t in arithmetic_tasks(2)]
    total = sum(t.cost_usd for t in traces)
    assert f'<p class="rk-cost">cost: ${total:.4f} (${total / 2:.4f} per rollout over 2)' in summary_html(traces)


async def test_a_traces_html_gives_its_cost_against_its_limit_and_where_the_rates_came_from():
    from rollkit.notebook.display import trace_html

    rk.prices({"toy-calculator": TOY_PRICES})
    trace = await demo_agent(limits={"max_turns": 6, "max_cost_usd": 0.5}).run(arithmetic_tasks(1)[0])
    assert (f"<tr><th>cost</th><td>${trace.cost_usd:.4f} / 0.5</td><th>priced by</th>"
            "<td>computed from the usage: rk.prices</td></tr>") in trace_html(trace)
    unpriced = await rk.Agent(model=careful_calculator_model()).run(arithmetic_tasks(1)[0])
    assert "<tr><th>cost</th><td>- / no limit</td><th>priced by</th><td>-</td></tr>" in trace_html(unpriced)


@pytest.mark.parametrize("priced", [True, False])
def test_a_run_reads_each_models_rates_once_and_prices_each_call_without_a_lookup(priced, monkeypatch):
    # Issue 44: a model's rates are looked up once per run, when its first
    # rollout opens (which also loads the table before any agent time),
    # never per rollout or model call; a model without a price once too (to
    # find it has none: the toy model runs no paid model, so the table is
    # never read) and none a call; the next run looks up again.
    agent = demo_agent()
    if priced:
        rk.prices({agent.model.name: TOY_PRICES})
    looked_up: list[str] = []
    tables_read: list[tuple] = []
    rate_card, from_table = prices.rate_card, prices._from_table

    def counted(name, ref):  # type: ignore[no-untyped-def]
        looked_up.append(name)
        return rate_card(name, ref)

    def read(*key):  # type: ignore[no-untyped-def]
        tables_read.append(key)
        return from_table(*key)

    monkeypatch.setattr(prices, "rate_card", counted)
    monkeypatch.setattr(prices, "_from_table", read)
    traces = rk.evaluate(agent, arithmetic_tasks(3), repeats=2, progress=False, concurrency=2).traces
    calls = [c for t in traces for c in t.model_calls]
    assert len(calls) == 12 and looked_up == [agent.model.name]  # one a run: none a rollout, none a call
    assert tables_read == []
    expected = [(c.usage.input_tokens * 1000.0 + c.usage.output_tokens * 2000.0) / 1e6 if priced else None
                for c in calls]
    assert [c.cost_usd for c in calls] == pytest.approx(expected) if priced else [c.cost_usd for c in calls] == expected
    rk.evaluate(agent, arithmetic_tasks(2), progress=False)
    assert looked_up == [agent.model.name] * 2


async def test_prices_given_during_a_run_apply_from_the_next_rollouts_open():
    # The run's rates are read again after rk.prices: a price given once a
    # run is under way prices the rollouts that open after it.
    agent = demo_agent()
    seen = []

    async def watch():  # type: ignore[no-untyped-def]
        with prices.run_rates():
            seen.append(prices.model_card(agent.model))
            rk.prices({agent.model.name: TOY_PRICES})
            seen.append(prices.model_card(agent.model))
            seen.append(prices.model_card(agent.model))

    await watch()
    assert seen[0] is None and seen[1] is seen[2] and seen[1].input == (1000.0, ())
