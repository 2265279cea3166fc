"""rollkit's evaluation of a verifiers taskset, for tests/test_verifiers_tasks.py.

Run with an interpreter that has rollkit and verifiers 0.4: `python
verifiers_rollkit_eval.py SOURCE BASE_URL` (the model's key in SCRIPTED_KEY)
runs `rk.evaluate` on `rk.tasks_from(SOURCE)` with `rk.OpenAIModel` and prints
one JSON line per trace, as tests/verifiers_native_eval.py does: the task's
idx, rewards {name: [score, weight]}, metrics, signal errors and errors.
"""

from __future__ import annotations

import json
import os
import sys

import rollkit as rk


def main() -> None:
    source, base_url = sys.argv[1:3]
    agent = rk.Agent(rk.OpenAIModel("scripted", base_url=base_url, api_key=os.environ["SCRIPTED_KEY"]))
    result = rk.evaluate(agent, rk.tasks_from(source), progress=False)
    for trace in result.traces:
        rewards = {name: None if value is None else [value, trace.reward_weights.get(name, 1.0)]
                   for name, value in trace.rewards.items()}
        print(json.dumps({"idx": trace.info["source"]["idx"], "rewards": rewards, "metrics": trace.metrics,
                          "signal_errors": trace.signal_errors, "errors": [e.message for e in trace.errors],
                          "state": trace.info.get("verifiers_state")}))


if __name__ == "__main__":
    main()
