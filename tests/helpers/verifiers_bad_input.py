"""Bad verifiers input through rollkit, for tests/test_verifiers_tasks.py.

Run with an interpreter that has rollkit and verifiers 0.4, with a temporary
folder as its argument; prints one JSON document: the errors rk.tasks_from
gives for a taskset whose load fails and for verifiers' own `vf-init` template
(scaffolded into the folder, unmodified), and, for each trace of an
rk.evaluate over the shaky taskset, its rewards, signal errors, errors and
stop.
"""

from __future__ import annotations

import json
import sys

import rollkit as rk


def _refusal(source: object) -> str:
    try:
        rk.tasks_from(source)
    except rk.UsageError as exc:
        return str(exc)
    return "no error"


def main() -> None:
    from helpers.byo_verifiers_broken import BrokenLoadTaskset, ShakyTaskset
    from verifiers.v1.cli.init import scaffold
    from verifiers.v1.configs.cli.init import InitConfig

    folder = sys.argv[1]
    scaffold(InitConfig(name="capital-demo", path=folder, add_tool=True))
    sys.path.insert(0, f"{folder}/capital_demo")
    from capital_demo import CapitalDemoTaskset

    def ping_then_done(request: rk.Request) -> object:
        pinged = any(m.role == "tool" for m in request.messages)
        return "done" if pinged else rk.ScriptedModel.call("shaky_ping")

    agent = rk.Agent(rk.ScriptedModel(ping_then_done))
    result = rk.evaluate(agent, rk.tasks_from(ShakyTaskset), progress=False)
    traces = [{"idx": t.info["source"]["idx"], "rewards": t.rewards, "weights": t.reward_weights, "ok": t.ok,
               "signal_errors": t.signal_errors, "errors": [e.message for e in t.errors],
               "stop": t.stop_condition, "verifiers_stop": t.info.get("verifiers_stop"), "turns": t.num_turns,
               "warnings": t.warnings} for t in result.traces]
    # A config-plugged judge (verifiers' reference judge, which calls a hosted model).
    judged = rk.evaluate(agent, rk.tasks_from(ShakyTaskset, task={"judges": [{"id": "reference", "weight": 0.5}]},
                                              limit=1), progress=False).traces[0]
    print(json.dumps({"load": _refusal(BrokenLoadTaskset), "template": _refusal(CapitalDemoTaskset),
                      "traces": sorted(traces, key=lambda t: t["idx"]),
                      "judge": {"rewards": judged.rewards, "weights": judged.reward_weights,
                                "signal_errors": judged.signal_errors}}))


if __name__ == "__main__":
    main()
