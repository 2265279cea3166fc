"""rollkit's evaluation of a verifiers taskset, for tests/test_verifiers_tasks.py.

Run with an interpreter that has rollkit and verifiers 0.4: `python
tests/helpers/verifiers_rollkit_eval.py SOURCE BASE_URL [OUT]` (the model's key in
SCRIPTED_KEY) runs `rk.evaluate` on `rk.tasks_from(SOURCE)` with
`rk.OpenAIModel` (saving the run in OUT when given) and prints one JSON line
per trace, as tests/helpers/verifiers_native_eval.py does: the task's idx, rewards
{name: [score, weight]}, metrics, signal errors, errors and the toolsets'
state. `python tests/helpers/verifiers_rollkit_eval.py --fork RUN BASE_URL` instead forks
each trace of a saved run after its first turn, in this new process (the
task rebuilt from the trace), and prints the same line for each fork.
`python tests/helpers/verifiers_rollkit_eval.py --by-hand SOURCE` opens each task in the
notebook facade with a person's seat (`rk.HumanModel`), answers each turn
as the scripted server would (tests/helpers/byo_verifiers_replies.py), noting the
toolsets' state when each turn is asked for, closes, and prints the same
line with those states (`asked`). `--judge SOURCE BASE_URL` plugs
verifiers' reference judge into each task's config and names BASE_URL (model
"judge", its key in SCRIPTED_KEY) as the judge's endpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import rollkit as rk


def _line(trace: rk.Trace) -> str:
    rewards = {name: None if value is None else [value, trace.reward_weights.get(name, 1.0)]
               for name, value in trace.rewards.items()}
    return json.dumps({"idx": trace.info["source"]["idx"], "rewards": rewards, "metrics": trace.metrics,
                       "signal_errors": trace.signal_errors, "errors": [e.message for e in trace.errors],
                       "state": trace.info.get("verifiers_state"), "turns": trace.num_turns,
                       "stop": trace.info.get("verifiers_stop", trace.stop_condition)})


async def _forks(run: str, agent: rk.Agent) -> None:
    for trace in rk.load(run):
        rollout = await rk.fork(trace, 1, agent=agent)
        if not rollout.waiting_for_user:
            await rollout.step()
        print(_line(await rollout.close()))


async def _by_hand(source: str) -> None:
    from helpers.byo_verifiers_replies import reply

    for task in rk.tasks_from(source):
        ro = rk.notebook.NotebookRollout(rk.Agent(model=rk.HumanModel()), task)
        await ro.open_async()
        asked: list = []

        def play() -> None:
            if ro.asked is None:
                return
            asked.append([ro.trace.num_turns, ro.trace.info.get("verifiers_state")])
            answer = reply([m.model_dump() for m in ro.asked.messages])
            ro.call(answer["tool"], **answer["arguments"]) if isinstance(answer, dict) else ro.answer(answer)

        ro.watch(play)
        await ro.step_async()
        line = json.loads(_line(await ro.close_async()))
        print(json.dumps({**line, "asked": asked}))


def main() -> None:
    if sys.argv[1] == "--by-hand":
        asyncio.run(_by_hand(sys.argv[2]))
        return
    fork, judged = sys.argv[1] == "--fork", sys.argv[1] == "--judge"
    source, base_url, *out = sys.argv[2:] if fork or judged else sys.argv[1:]
    # The turn limit vf-eval is given too (--env.agent.max-turns 9), which its trace records.
    agent = rk.Agent(rk.OpenAIModel("scripted", base_url=base_url, api_key=os.environ["SCRIPTED_KEY"]),
                     limits={"max_turns": 9})
    if fork:
        asyncio.run(_forks(source, agent))
        return
    options = {"task": {"judges": [{"id": "reference", "weight": 0.5}]},
               "judge": {"base_url": base_url, "model": "judge", "api_key_var": "SCRIPTED_KEY"}} if judged else {}
    result = rk.evaluate(agent, rk.tasks_from(source, **options), progress=False, out=out[0] if out else None)
    for trace in result.traces:
        print(_line(trace))


if __name__ == "__main__":
    main()
