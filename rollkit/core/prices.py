"""Prices: what one model call cost, in US dollars.

This module owns the price of a call from its usage and the model's name:
the user's own prices (`rk.prices`), else the public table, else none. It
decides nothing about budgets (the session checks `max_cost_usd`) and keeps
no totals (the trace does). It must not import the table at import time:
`import rollkit` stays fast, and the table (genai-prices, a large module
slow to import) is read on the first call priced by it.

Why Pydantic's `genai-prices` for the table: it is maintained (its data is
regenerated as providers change prices and released often), it knows which
provider a model name belongs to (and a provider by its API URL), and it
carries what flat per-token rates get wrong: tiers by context length (a
call whose prompt crosses 200k or 272k tokens pays the higher rate on all
its tokens) and the cache read and write rates. Its own `calc_price` is the
oracle tests/test_cost.py checks against. Its Decimal arithmetic is slow
to run on every call, so each model's rates are read once into a `RateCard`
of floats that prices a call cheaply, with the same rules: cached
tokens leave the plain input count only where a cache rate is listed, and
a tier applies when the whole prompt (cache included) exceeds its start.

A model missing from both is priced None (NA), never 0, with one warning
per model naming it and saying how to give a price. A price the table
finds by the model's name alone, for an endpoint that is not that
provider's (a proxy, a local server, a self-hosted open-weights model
named like a public one), is an estimate: its `RateCard.estimate` is true,
the trace says so (`info["cost_estimated"]`, a warning) and so do the
frames; `rk.prices({name: {...}})` sets the real price, `rk.prices({name:
False})` clears it (no price: NA, no warning). A model that runs no
paid model at all (the embedded `ScriptedModel`, a person) says so by
`Model.price_ref()` returning None: its calls are NA without a warning,
unless the user gave its name a price.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import UsageError

__all__ = ["RateCard", "prices", "rate_card", "call_cost", "require_price", "model_card", "run_rates", "dollars", "card_of",
           "PRICE_KEYS", "output_bound", "worst_case_cost"]

# The user's rates, per million tokens (requests: per call).
PRICE_KEYS = ("input", "output", "cache_read", "cache_write", "requests")

# A rate and its tiers: (base, ((start, rate), ...)) with tiers by start.
Rate = tuple[float, tuple[tuple[int, float], ...]]

_user: dict[str, RateCard] = {}
_unpriced: set[str] = set()  # names the user said have no price (rk.prices({name: False}))
_table: dict[tuple[str, str | None], RateCard | None] = {}
_warned: set[str] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class RateCard:
    """A model's rates in dollars per million tokens (`requests`: per
    call), each a `Rate` (a flat rate has no tiers); None: not listed.
    `source` says where they came from ("rk.prices", the user's, or "genai-prices
    <version> <provider>/<model>")."""

    input: Rate | None
    output: Rate | None
    cache_read: Rate | None = None
    cache_write: Rate | None = None
    reasoning: Rate | None = None
    requests: float = 0.0
    source: str = "rk.prices"
    estimate: bool = False  # found by the model's name alone, for another provider's endpoint

    def cost(self, usage: Any) -> float | None:
        """The dollars of one call with `usage` (a rollkit `Usage`); None
        when the provider reported neither the prompt's nor the reply's size."""
        prompt, reply = usage.input_tokens, usage.output_tokens
        if prompt is None and reply is None:
            return None
        prompt, reply = prompt or 0, reply or 0
        read = usage.cache_read_tokens or 0
        write = usage.cache_write_tokens or 0
        reasoning = usage.reasoning_tokens or 0
        # Cached tokens are a part of the prompt: priced at their own rate
        # where one is listed, at the input rate where none is.
        plain = prompt - (read if self.cache_read else 0) - (write if self.cache_write else 0)
        answer = reply - (reasoning if self.reasoning else 0)
        total = self.requests
        for rate, count in ((self.input, plain), (self.output, answer), (self.cache_read, read),
                            (self.cache_write, write), (self.reasoning, reasoning)):
            if rate is not None and count:
                total += _tiered(rate, prompt) * count / 1e6
        return total


def dollars(value: float | None) -> str:
    """Dollars as people read them: four decimals under a dollar, "-"
    when unknown (never "$0")."""
    if value is None:
        return "-"
    return f"${value:.4f}" if abs(value) < 1 else f"${value:,.2f}"


def _tiered(rate: Rate, prompt: int) -> float:
    """The rate for a call whose prompt is `prompt` tokens: the highest tier
    it exceeds applies to all its tokens (the providers' cliff)."""
    base, tiers = rate
    for start, value in reversed(tiers):
        if prompt > start:
            return value
    return base


def prices(table: dict[str, dict[str, float] | None] | None = None) -> dict[str, RateCard]:
    """Give models your own prices, in dollars per million tokens:
    `rk.prices({"my-model": {"input": 1.0, "output": 2.0, "cache_read": 0.1}})`.
    Keys: input and output (required), cache_read, cache_write (cached
    tokens without a rate of their own pay the input rate) and requests
    (dollars per call). A name maps to None to forget your price (the
    public table's applies again), or to False for no price at all (its
    calls cost NA, without a warning: e.g. a self-hosted model the table
    would price, as an estimate, by its public namesake). Yours win over the
    public table, for the whole process. Returns the prices given."""
    if table is not None:
        if not isinstance(table, dict):
            raise UsageError(f"rk.prices takes a dict of model name -> rates, got {type(table).__name__}")
        cards = {name: rates if rates is None or rates is False else _user_card(name, rates)
                 for name, rates in table.items()}
        global _generation
        with _lock:
            _generation += 1
            for name, card in cards.items():
                _user.pop(name, None)
                _unpriced.discard(name)
                if card is False:
                    _unpriced.add(name)
                elif card is not None:
                    _user[name] = card
                    _warned.discard(name)
    return dict(_user)


def _user_card(name: Any, rates: Any) -> RateCard:
    if not isinstance(name, str) or not name:
        raise UsageError(f"rk.prices: a model name is a non-empty string, got {name!r}")
    if not isinstance(rates, dict):
        raise UsageError(f"rk.prices: the price of {name!r} is a dict such as "
                         f"{{'input': 1.0, 'output': 2.0}} (dollars per million tokens), got {rates!r}")
    unknown = sorted(set(rates) - set(PRICE_KEYS))
    if unknown:
        raise UsageError(f"rk.prices: {name!r} has unknown keys {unknown}; the keys are {', '.join(PRICE_KEYS)}")
    missing = [key for key in ("input", "output") if key not in rates]
    if missing:
        raise UsageError(f"rk.prices: {name!r} needs {' and '.join(missing)} (dollars per million tokens)")
    for key, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UsageError(f"rk.prices: {name!r} {key} must be a number of dollars >= 0, got {value!r}")
    flat = {key: (float(value), ()) for key, value in rates.items() if key != "requests"}
    return RateCard(input=flat["input"], output=flat["output"], cache_read=flat.get("cache_read"),
                    cache_write=flat.get("cache_write"), requests=float(rates.get("requests", 0.0)), source="rk.prices")


def rate_card(name: str, ref: tuple[str, str | None] | None) -> RateCard | None:
    """The rates of a model called `name`: the user's for `name` (or for
    the table name `ref[0]`), else the table's for `ref` (model name,
    provider API URL or None), else None. A `ref` of None means the model
    runs no paid model: None without a warning. A model the table does
    not know is warned about once; one the user said has none (False in
    rk.prices) is None without a warning."""
    if name in _unpriced or (ref is not None and ref[0] in _unpriced):
        return None
    card = _user.get(name) or (_user.get(ref[0]) if ref is not None else None)
    if card is not None or ref is None:
        return card
    key = (ref[0], ref[1])
    if key not in _table:
        found = _from_table(*key)
        with _lock:
            _table[key] = found
    card = _table[key]
    if card is None and name not in _warned:
        with _lock:
            _warned.add(name)
        warnings.warn(
            f"no price for model {name!r} (public table genai-prices does not list {ref[0]!r}): its calls' "
            f"cost_usd is NA, never 0; give one with rk.prices({{{name!r}: {{'input': ..., 'output': ..., "
            "'cache_read': ...}}) (dollars per million tokens)",
            stacklevel=3,
        )
    return card


def model_card(model: Any) -> RateCard | None:
    """The rates of `model` (a rollkit Model), by its name and `price_ref()`.
    `Rollout.open` asks first, so the table loads (once per process, about
    a second) before any agent time runs, never inside a segment. Within a
    run (`run_rates`) a model is looked up once: its first rollout's answer,
    a price or none, is every later one's."""
    memo = _run_memo.get()
    if memo is not None:
        if memo.generation != _generation:  # rk.prices since: read them again
            memo.generation, memo.cards = _generation, {}
        known = memo.cards.get(id(model))
        if known is not None and known[0] is model:
            return known[1]
    ref = model.price_ref() if hasattr(model, "price_ref") else (model.name, None)
    card = rate_card(model.name, ref)
    if memo is not None:
        memo.cards[id(model)] = (model, card)  # the model kept: its id names no other while the run lasts
    return card


class _RunRates:
    """A run's rates, model by model (run_rates), and the generation of
    the prices they were read at."""

    def __init__(self) -> None:
        self.generation = _generation
        self.cards: dict[int, tuple[Any, RateCard | None]] = {}


_run_memo: contextvars.ContextVar[_RunRates | None] = contextvars.ContextVar("rollkit_run_rates", default=None)
_generation = 0  # rk.prices changes it: a run's rates read before are read again


@contextlib.contextmanager
def run_rates() -> Iterator[None]:
    """Within it (an evaluation: rollkit.runs), each model is looked up
    once (model_card), however many rollouts it runs; a change of prices
    (rk.prices) meanwhile is read at the next rollout's open."""
    token = _run_memo.set(_RunRates())
    try:
        yield
    finally:
        _run_memo.reset(token)


def call_cost(model: Any, usage: Any) -> float | None:
    """The dollars one call of `model` with `usage` cost; None when it has
    no price or the usage was not reported."""
    card = model_card(model)
    return None if card is None else card.cost(usage)


def output_bound(model: Any, request: Any = None) -> int | None:
    """The most output tokens a call of `model` may produce: the call's own
    `max_tokens` (or `max_completion_tokens`, `max_output_tokens`), else the
    model's `output_limit()`; None when neither is known."""
    params = getattr(request, "params", None) or {}
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    limit = getattr(model, "output_limit", None)
    return limit() if callable(limit) else None


def worst_case_cost(card: RateCard, output_tokens: int, prompt_tokens: int) -> float:
    """The most a call may cost: `output_tokens` of reply (all at the output
    rate, reasoning included) after a prompt of `prompt_tokens` (none of it cached)."""
    total = card.requests
    for rate, count in ((card.input, prompt_tokens), (card.output, output_tokens)):
        if rate is not None:
            total += _tiered(rate, prompt_tokens) * count / 1e6
    return total


def require_price(model: Any, *, hard: bool = False) -> None:
    """Refuse a dollar budget over a model without a price: the limit
    could never be checked, and a run believed capped would not be. A hard
    cap also needs the most a call can cost: the model's output limit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the error below says it all
        card = model_card(model)
    if card is None:
        ref = model.price_ref() if hasattr(model, "price_ref") else (model.name, None)
        why = ("you said it has none (rk.prices False)" if model.name in _unpriced else
               "it runs no paid model" if ref is None else "the public table genai-prices does not list it")
        raise UsageError(
            f"RolloutLimits(max_cost_usd=...) needs a price for model {model.name!r}, and it has none "
            f"({why}); give one with rk.prices({{{model.name!r}: {{'input': ..., 'output': ...}}}}) "
            "(dollars per million tokens), or drop max_cost_usd"
        )
    if hard and output_bound(model) is None:
        raise UsageError(
            f"RolloutLimits(max_cost_usd=..., cost_cap='hard') needs the most a call of model {model.name!r} can "
            "cost, and its output limit is unknown: give the model one (OpenAIModel(..., output_limit=N), or "
            "params={'max_tokens': N}), or use the default soft cap (cost_cap='soft')"
        )


def _from_table(model: str, api_url: str | None) -> RateCard | None:
    """The table's rates for `model`, at the provider of `api_url` when the
    table knows that URL, else at the provider the name itself points to
    (a proxy or a test server on another address); None when unknown."""
    import genai_prices.data_snapshot as snapshot

    table = snapshot.get_snapshot()
    if api_url:
        try:
            return card_of(*table.find_provider_model(model, None, None, api_url))
        except LookupError:
            pass
    try:
        found = table.find_provider_model(model, None, None, None)
    except LookupError:
        return None
    # By the name alone: exact where no endpoint was named, an estimate for
    # an endpoint that is not that provider's (a proxy, a local server).
    return card_of(*found, estimate_for=api_url)


def card_of(provider: Any, info: Any, estimate_for: str | None = None) -> RateCard:
    """The rates genai-prices lists today for model `info` at `provider`
    (its `Provider` and `ModelInfo`); `estimate_for`: the endpoint they are
    an estimate for (one that is not `provider`'s)."""
    import datetime

    listed = info.get_prices(datetime.datetime.now(tz=datetime.timezone.utc))
    rates = {key: _rate(getattr(listed, f"{key}_mtok", None))
             for key in ("input", "output", "cache_read", "cache_write", "output_reasoning")}
    requests = getattr(listed, "requests_kcount", None)
    return RateCard(input=rates["input"], output=rates["output"], cache_read=rates["cache_read"],
                    cache_write=rates["cache_write"], reasoning=rates["output_reasoning"],
                    requests=float(requests) / 1000 if requests is not None else 0.0,
                    source=f"genai-prices {_table_version()} {provider.id}/{info.id}" + (
                        f", an estimate: found by the model's name alone, for {estimate_for}, which is not "
                        f"{provider.id}'s endpoint" if estimate_for else ""),
                    estimate=bool(estimate_for))


@functools.cache
def _table_version() -> str:
    from importlib.metadata import version

    return version("genai-prices")


def _rate(price: Any) -> Rate | None:
    if price is None:
        return None
    tiers = getattr(price, "tiers", None)
    if tiers is None:
        return (float(price), ())
    return (float(price.base), tuple((tier.start, float(tier.price)) for tier in tiers))
