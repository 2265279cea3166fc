"""rollkit's prices given to an Arize Phoenix, so its cost totals are rollkit's.

Phoenix does not read a cost from a span: when it stores an LLM span it
prices the span's token counts (`llm.token_count.*`) by a model it finds by
the span's `llm.model_name` among its own (phoenix.server.cost_tracking:
SpanCostCalculator -> GenerativeModelStore.find_model ->
SpanCostDetailsCalculator), preferring a model a user defined over its
built-in ones; rollkit's `llm.cost.total` attribute is kept but summed by
nothing. A model its table does not list (a self-hosted one, a new one)
shows $0. `phoenix_prices` defines, through Phoenix's GraphQL API
(`createModel`, or `updateModel` for one defined before), a model whose
pattern is the exact name, with rollkit's rates (rk.prices, else the public
table): spans Phoenix stores once it has read the model (its store is
refreshed every few seconds) cost there what they cost in rollkit, tiers
by context length aside (Phoenix gets the base rate).

This module sends the prices and nothing else: no span, no trace.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from ...core.errors import Unavailable, UsageError
from ...core.prices import RateCard, rate_card

__all__ = ["phoenix_prices"]

# rollkit's rates and the token types Phoenix prices (the OpenInference
# prompt and completion details rollkit's spans carry), with their kind.
_TOKEN_TYPES = (("input", "PROMPT"), ("output", "COMPLETION"), ("cache_read", "PROMPT"),
                ("cache_write", "PROMPT"), ("reasoning", "COMPLETION"))
_PREFIX = "rollkit "  # the name of a model rollkit defined: found again by it, updated in place


def phoenix_prices(url: str, models: Iterable[str], *, headers: Mapping[str, str] | None = None,
                   timeout: float = 10.0) -> dict[str, str]:
    """Give the Phoenix at `url` (e.g. "http://127.0.0.1:6006") rollkit's
    price of each model named in `models`, as a model of its own matching
    that exact name; returns each name's Phoenix model id. `headers`: sent
    with each request (an API key). A model rollkit has no price for is
    refused before anything is sent."""
    cards = {}
    for name in dict.fromkeys(models):
        card = rate_card(name, (name, None))
        if card is None or card.input is None or card.output is None:
            raise UsageError(f"no price for model {name!r} to give Phoenix: give one with "
                             f"rk.prices({{{name!r}: {{'input': ..., 'output': ...}}}}) (dollars per million tokens)")
        cards[name] = card
    ids = {}
    defined = None
    for name, card in cards.items():
        fields = (f'name: {json.dumps(_PREFIX + name)}, namePattern: {json.dumps("^" + re.escape(name) + "$")}, '
                  f"costs: [{_costs(card)}]")
        if defined is None:
            defined = _defined(url, headers, timeout)
        if _PREFIX + name in defined:
            done = _graphql(url, f'mutation {{ updateModel(input: {{id: "{defined[_PREFIX + name]}", provider: null, '
                                 f"{fields}}}) {{ model {{ id }} }} }}", headers, timeout)
            ids[name] = done["updateModel"]["model"]["id"]
        else:
            done = _graphql(url, f"mutation {{ createModel(input: {{{fields}}}) {{ model {{ id }} }} }}", headers, timeout)
            ids[name] = done["createModel"]["model"]["id"]
    return ids


def _costs(card: RateCard) -> str:
    """A rate card as Phoenix's TokenPriceInput list (each rate's base: per million tokens)."""
    rates = []
    for key, kind in _TOKEN_TYPES:
        rate = getattr(card, key)
        if rate is not None:
            rates.append(f'{{tokenType: "{key}", costPerMillionTokens: {float(rate[0])!r}, kind: {kind}}}')
    return ", ".join(rates)


def _defined(url: str, headers: Mapping[str, str] | None, timeout: float) -> dict[str, str]:
    """The models defined in Phoenix by name, with their ids."""
    found = _graphql(url, "{ generativeModels(first: 1000) { edges { node { id name } } } }", headers, timeout)
    return {edge["node"]["name"]: edge["node"]["id"] for edge in found["generativeModels"]["edges"]}


def _graphql(url: str, query: str, headers: Mapping[str, str] | None, timeout: float) -> Any:
    request = urllib.request.Request(url.rstrip("/") + "/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except (OSError, ValueError) as error:
        raise Unavailable(f"Phoenix at {_where(url)} did not take the prices: {type(error).__name__}") from None
    if answer.get("errors"):
        raise Unavailable(f"Phoenix at {_where(url)} refused the prices: {answer['errors'][0].get('message')}")
    return answer["data"]


def _where(url: str) -> str:
    """The server's scheme, host and port: never a credential in its user part, path or query."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
