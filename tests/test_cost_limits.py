"""Money limits that refuse before they are crossed (rollkit.core.prices,
budgets, session): an unpriced model with a dollar limit refused once before
any rollout, the hard cap that refuses a call whose worst case could cross
the limit (and a model whose output limit is unknown at open), and a price
found by the model's name alone for another endpoint marked as an estimate
on the trace and in the frames, which the user can set or clear."""

from __future__ import annotations

import warnings

import pytest
from helpers.fake_provider import FakeProvider

import rollkit as rk
from rollkit import frames
from rollkit.core import prices

TOY_PRICES = {"input": 1000.0, "output": 2000.0}  # dollars per million tokens: a toy call costs cents


@pytest.fixture(autouse=True)
def _fresh_prices():
    saved = dict(prices._user), set(prices._warned), set(prices._unpriced)
    prices._user.clear()
    prices._warned.clear()
    prices._unpriced.clear()
    yield
    for kept, now in zip(saved, (prices._user, prices._warned, prices._unpriced)):
        now.clear()
        now.update(kept)


class Bounded(rk.ScriptedModel):
    """The scripted model with an output limit (or None: unknown)."""

    def __init__(self, replies, limit: int | None) -> None:
        super().__init__(replies)
        self.limit = limit

    def output_limit(self):
        return self.limit


def test_an_unpriced_model_with_a_dollar_limit_is_refused_once_before_any_rollout(tmp_path):
    agent = rk.Agent(model=rk.ScriptedModel(["ok"]), limits={"max_cost_usd": 1.0})
    with pytest.raises(rk.UsageError) as caught:
        rk.evaluate(agent, [rk.Task(prompt=f"q{i}") for i in range(5)], out=tmp_path / "run", progress=False)
    assert str(caught.value) == (
        "rk.evaluate: RolloutLimits(max_cost_usd=...) needs a price for model 'scripted', and it has none (it runs "
        "no paid model); give one with rk.prices({'scripted': {'input': ..., 'output': ...}}) (dollars per million "
        "tokens), or drop max_cost_usd")
    assert not (tmp_path / "run").exists()  # nothing ran, nothing written


async def test_a_single_rollout_with_a_dollar_limit_over_an_unpriced_model_is_refused_at_open():
    rk.prices({"scripted": False})  # the user said: no price
    rollout = rk.Agent(model=rk.ScriptedModel(["ok"]), limits={"max_cost_usd": 1.0}).rollout(rk.Task(prompt="hi"))
    with pytest.raises(rk.UsageError, match=r"has none \(you said it has none \(rk.prices False\)\); give one with "
                                            r"rk.prices\(\{'scripted'"):
        await rollout.open()


async def _capped(cap: str, limit: float = 0.05) -> rk.Trace:
    rk.prices({"scripted": TOY_PRICES})
    words = " ".join(["word"] * 8)  # 9 output tokens a turn: $0.018 at $2000 per million
    model = Bounded(lambda r: words, limit=10)
    agent = rk.Agent(model=model, limits=rk.RolloutLimits(max_turns=20, max_cost_usd=limit, cost_cap=cap))
    rollout = agent.rollout(rk.Task(), user=True)
    await rollout.open()
    while await rollout.step("go on"):
        pass
    return await rollout.close()


async def test_L12_L13_the_soft_cap_lets_the_crossing_call_run_and_the_hard_cap_refuses_it():
    soft, hard = await _capped("soft"), await _capped("hard")
    assert soft.stop_condition == hard.stop_condition == "max_cost_usd"
    assert soft.cost_usd > 0.05  # soft by one turn: the default
    assert hard.cost_usd <= 0.05
    assert hard.num_turns < soft.num_turns
    [note] = [w for w in hard.warnings if w.startswith("max_cost_usd (hard cap)")]
    assert "10 output tokens" in note and "of $0.0500 is spent" in note
    assert rk.RolloutLimits(max_cost_usd=1).cost_cap == "soft"
    assert "cost_cap" not in rk.RolloutLimits(max_cost_usd=1).model_dump()


async def test_a_hard_cap_over_a_model_whose_output_limit_is_unknown_refuses_to_start(tmp_path):
    rk.prices({"scripted": TOY_PRICES})
    agent = rk.Agent(model=Bounded(["ok"], limit=None), limits={"max_cost_usd": 1.0, "cost_cap": "hard"})
    says = ("RolloutLimits(max_cost_usd=..., cost_cap='hard') needs the most a call of model 'scripted' can cost, "
            "and its output limit is unknown: give the model one (OpenAIModel(..., output_limit=N), or "
            "params={'max_tokens': N}), or use the default soft cap (cost_cap='soft')")
    with pytest.raises(rk.UsageError) as caught:
        await agent.rollout(rk.Task(prompt="hi")).open()
    assert str(caught.value) == says
    with pytest.raises(rk.UsageError) as caught:
        rk.evaluate(agent, [rk.Task(prompt="hi")], out=tmp_path / "run", progress=False)
    assert str(caught.value) == f"rk.evaluate: {says}"
    with pytest.raises(ValueError, match="cost_cap"):
        rk.RolloutLimits(max_cost_usd=1, cost_cap="firm")


async def test_the_hard_cap_reads_a_calls_max_tokens_and_the_openai_models_output_limit():
    from rollkit.programs.openai_model import OpenAIModel

    assert OpenAIModel("m", api_key="k", output_limit=300).output_limit() == 300
    assert OpenAIModel("m", api_key="k", params={"max_tokens": 50}).output_limit() == 50
    assert OpenAIModel("m", api_key="k").output_limit() is None
    request = rk.Request(messages=[], params={"max_tokens": 7})
    assert prices.output_bound(Bounded([], 100), request) == 7
    assert prices.output_bound(Bounded([], 100), rk.Request(messages=[])) == 100


async def _local_oss(fake: FakeProvider) -> rk.Trace:
    from rollkit.programs.openai_model import OpenAIModel

    model = OpenAIModel("gpt-oss-20b", base_url=fake.url, api_key="none")
    try:
        return await rk.Agent(model=model).run(rk.Task(prompt="hello there"))
    finally:
        await model.aclose()


async def test_a_price_found_by_name_for_a_local_endpoint_is_an_estimate_the_user_can_set_or_clear():
    fake = await FakeProvider().start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an estimate is said on the trace, not as a Python warning
            estimated = await _local_oss(fake)
        rk.prices({"gpt-oss-20b": {"input": 0.0, "output": 0.0}})
        given = await _local_oss(fake)
        rk.prices({"gpt-oss-20b": False})
        cleared = await _local_oss(fake)
    finally:
        await fake.stop()
    assert estimated.info["cost_estimated"] is True and estimated.cost_usd > 0
    assert "an estimate: found by the model's name alone, for http://127.0.0.1:" in estimated.info["cost_from"]
    assert [w for w in estimated.warnings if w.startswith("cost_usd is an estimate")] == [
        f"cost_usd is an estimate ({estimated.info['cost_from'].split(': ', 1)[1]}): give the real price with "
        "rk.prices({'gpt-oss-20b': {'input': ..., 'output': ...}}), or none with rk.prices({'gpt-oss-20b': False})"]
    assert "cost_estimated" not in given.info and given.cost_usd == 0.0
    assert "cost_estimated" not in cleared.info and cleared.cost_usd is None
    table = frames.rollouts([estimated, given, cleared])
    assert table["cost_estimated"].tolist() == [True, False, False]


def test_the_providers_own_endpoint_is_no_estimate():
    card = prices.rate_card("gpt-4o", ("gpt-4o", "https://api.openai.com/v1"))
    assert card is not None and card.estimate is False
    assert prices.rate_card("gpt-4o", ("gpt-4o", None)).estimate is False
    assert prices.rate_card("gpt-4o", ("gpt-4o", "http://127.0.0.1:9/v1")).estimate is True


async def test_a_scripted_models_max_tokens_cuts_a_text_reply_and_refuses_a_tool_call_that_does_not_fit():
    model = rk.ScriptedModel(["one two three four five", rk.ScriptedModel.call("add", a=1, b=2)], max_tokens=3)
    assert model.output_limit() == 3 and rk.ScriptedModel([]).output_limit() is None
    cut = await model.complete(rk.Request(messages=[]))
    assert (cut.message.content, cut.usage.output_tokens, cut.finish_reason) == ("one two", 3, "length")
    roomy = await model.complete(rk.Request(messages=[], params={"max_tokens": 9}))  # the call's own wins
    assert (roomy.message.content, roomy.finish_reason) == ("one two three four five", "stop")
    asked = rk.Request(messages=[rk.AssistantMessage(content="x")])
    with pytest.raises(rk.ProviderError, match=r"a tool call of \d+ tokens does not fit max_tokens=3; raise max_tokens"):
        await model.complete(asked)
    with pytest.raises(ValueError, match="ScriptedModel max_tokens must be a whole number >= 1, or None; got 0"):
        rk.ScriptedModel([], max_tokens=0)
