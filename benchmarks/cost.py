"""Benchmark: what pricing costs (issue 35, item 4).

- the first priced call in a fresh process: genai-prices imported and the
  model's rates read (once per process and model);
- one call priced from its rate card (floats), against genai-prices' own
  `calc_price` (Decimal) for the same usage: why rollkit reads the rates once;
- a rollout's time with and without a price (the toy model, 20 turns, a
  user price vs none): the recording's share of a turn.

Run: PYTHONPATH=. python benchmarks/cost.py [--json PATH]
Prints one line per number.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from _common import Results, json_path

FIRST = """
import time
t = time.perf_counter()
from rollkit.core.prices import rate_card
from rollkit.core.messages import Usage
card = rate_card("gpt-4o", ("gpt-4o", None))
card.cost(Usage(input_tokens=1000, output_tokens=100))
print(time.perf_counter() - t)
"""


def _first_call() -> float:
    out = subprocess.run([sys.executable, "-c", FIRST], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def _per_call(n: int = 20_000) -> tuple[float, float]:
    from genai_prices import Usage as TableUsage, calc_price

    from rollkit.core.messages import Usage
    from rollkit.core.prices import rate_card

    card = rate_card("gemini-2.5-pro", ("gemini-2.5-pro", None))
    usages = [Usage(input_tokens=150_000 + 100 * i, output_tokens=500, cache_read_tokens=50_000) for i in range(n)]
    t = time.perf_counter()
    for u in usages:
        card.cost(u)
    ours = (time.perf_counter() - t) / n
    m = n // 20
    t = time.perf_counter()
    for u in usages[:m]:
        calc_price(TableUsage(input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                              cache_read_tokens=u.cache_read_tokens), "gemini-2.5-pro")
    return ours, (time.perf_counter() - t) / m


async def _rollouts(priced: bool, n: int = 200) -> float:
    import rollkit as rk

    rk.prices({"scripted": {"input": 1.0, "output": 2.0}} if priced else {"scripted": None})
    agent = rk.Agent(model=rk.ScriptedModel(lambda r: "one two three"), limits={"max_turns": 20})
    t = time.perf_counter()
    for _ in range(n):
        rollout = agent.rollout(rk.Task(), user=True)
        await rollout.open()
        while await rollout.step("go on"):
            pass
        await rollout.close()
    return (time.perf_counter() - t) / (n * 20)


def main() -> None:
    results = Results("cost.py", "what pricing costs: the first priced call, one call priced, a priced turn")
    first = _first_call()
    print(f"first priced call in a fresh process (import genai-prices, read the rates): {first:.3f} s")
    results.add("first priced call in a fresh process", first, "s")
    ours, table = _per_call()
    print(f"one call priced: rate card {ours * 1e6:.2f} us, genai-prices calc_price {table * 1e6:.0f} us "
          f"({table / ours:.0f}x)")
    results.add("one call priced from the rate card", ours * 1e6, "µs", table * 1e6, "genai-prices calc_price")
    # Alternated, best of three each: the machine is shared.
    runs = [(asyncio.run(_rollouts(False)), asyncio.run(_rollouts(True))) for _ in range(3)]
    unpriced, priced = min(r[0] for r in runs), min(r[1] for r in runs)
    print(f"a turn of the toy model: {unpriced * 1e6:.0f} us unpriced, {priced * 1e6:.0f} us priced "
          f"(+{(priced - unpriced) * 1e6:.1f} us)")
    results.add("a turn of the toy model, priced (best of 3)", priced * 1e6, "µs", unpriced * 1e6, "unpriced")
    results.save(json_path(sys.argv))


if __name__ == "__main__":
    main()
