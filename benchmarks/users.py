"""Users benchmark: conversations with a ScriptedUser on the instant model.

Prints:
- rollouts per second for 1,000 five-turn conversations (the prompt and 4
  user turns, so 5 agent turns each) run at once with `agent.run(task,
  user=ScriptedUser([...]))`,
- the overhead per user turn: the same conversations driven by hand
  (`rollout.step(message)` in a loop, the baseline, no User involved) against
  `converse` with a ScriptedUser, run one after the other in this process;
  the difference per user turn, and the ratio of the two runs.

Run: python benchmarks/users.py [--json PATH]
(--json PATH also writes the numbers with the machine, load and date:
benchmarks/results/users.json is the one the docs' benchmarks page tables.)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import rollkit as rk
from _common import Results, json_path

N = 1000
TURNS = ["one", "two", "three", "four"]


def _agent() -> rk.Agent:
    return rk.Agent(model=rk.ScriptedModel(lambda request: "ok"))


async def by_hand(agent: rk.Agent, task: rk.Task) -> rk.Trace:
    rollout = agent.rollout(task, user=True)
    await rollout.open()
    more = await rollout.step()
    for message in TURNS:
        if not more:
            break
        more = await rollout.step(message)
    return await rollout.close()


async def with_user(agent: rk.Agent, task: rk.Task, user: rk.User) -> rk.Trace:
    return await agent.run(task, user=user)


async def batch(kind: str) -> float:
    agent, user = _agent(), rk.ScriptedUser(TURNS)
    tasks = [rk.Task(prompt=f"conversation {i}") for i in range(N)]
    t0 = time.perf_counter()
    if kind == "user":
        traces = await asyncio.gather(*(with_user(agent, t, user) for t in tasks))
    else:
        traces = await asyncio.gather(*(by_hand(agent, t) for t in tasks))
    elapsed = time.perf_counter() - t0
    assert all(t.num_turns == 5 and len(t.user_turns) == 4 for t in traces), "every conversation has 5 turns"
    return elapsed


async def main() -> None:
    await batch("user")  # warm up (imports, caches)
    users, hands = [], []
    for _ in range(5):
        hands.append(await batch("hand"))
        users.append(await batch("user"))
    user_s, hand_s = statistics.median(users), statistics.median(hands)
    print(f"{N:,} five-turn conversations with a ScriptedUser: {N / user_s:,.0f} rollouts/s (median of 5)")
    print(f"the same stepped by hand (baseline):           {N / hand_s:,.0f} rollouts/s")
    per_turn = (user_s - hand_s) / (N * len(TURNS))
    print(f"overhead per user turn: {per_turn * 1e3:.4f} ms ({user_s / hand_s:.2f}x the baseline's time)")
    results = Results("users.py", "conversations with a ScriptedUser against the same stepped by hand, same run")
    results.add(f"{N:,} five-turn conversations with a ScriptedUser (median of 5)", N / user_s, "rollouts/s",
                baseline=N / hand_s, baseline_name="stepped by hand")
    results.add("overhead per user turn over stepping by hand", per_turn * 1e6, "µs")
    results.save(json_path(sys.argv))


if __name__ == "__main__":
    asyncio.run(main())
