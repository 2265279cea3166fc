"""verifiers' own lists of what a task can carry, and rollkit's refusals, for tests/test_verifiers_coverage.py.

Run with an interpreter that has rollkit and verifiers 0.4; prints one JSON
document: `parts`, every part verifiers 0.4 defines (each decorator kind its
decorators module marks, the public attributes of Task, Taskset and Toolset (with its ServerBase), the
fields of TaskData, TaskConfig, TasksetConfig, the toolset configs and
AgentConfig); `coverage`, rollkit's COVERAGE kinds; `cases`, which task of
tests/helpers/byo_verifiers_unmapped.py carries each refused part; and
`traces`, each task's rollout under rk.evaluate (its errors, rewards, ok).
"""

from __future__ import annotations

import ast
import inspect
import json

import rollkit as rk


def _decorator_kinds() -> list[str]:
    """Each `mark("kind")` in verifiers' decorators module: the kinds a decorator tags a method with."""
    from verifiers.v1.utils import decorators

    tree = ast.parse(inspect.getsource(decorators))
    return [f"@{node.args[0].value}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "mark"
            and node.args and isinstance(node.args[0], ast.Constant)]


def parts() -> list[str]:
    import verifiers.v1 as vf
    from verifiers.v1.mcp.server import ServerBase
    from verifiers.v1.mcp.toolset import SharedToolsetConfig, ToolsetConfig

    found = set(_decorator_kinds())
    for cls, label in ((vf.Task, "Task"), (vf.Taskset, "Taskset"), (ServerBase, "Toolset"), (vf.Toolset, "Toolset")):
        found |= {f"{label}.{name}" for name in vars(cls) if not name.startswith("_")}
    for cls, label in ((vf.TaskData, "TaskData"), (vf.TaskConfig, "TaskConfig"), (vf.TasksetConfig, "TasksetConfig"),
                       (ToolsetConfig, "ToolsetConfig"), (SharedToolsetConfig, "ToolsetConfig"),
                       (vf.AgentConfig, "AgentConfig")):
        found |= {f"{label}.{name}" for name in cls.model_fields}
    return sorted(found)


def main() -> None:
    from helpers.byo_verifiers_unmapped import CASES, ORDER, UnmappedTaskset

    from rollkit.interop.tasks.verifiers_coverage import COVERAGE

    agent = rk.Agent(rk.ScriptedModel(lambda request: "done"))
    result = rk.evaluate(agent, rk.tasks_from(UnmappedTaskset), progress=False)
    traces = {ORDER[t.info["source"]["idx"]]: {"ok": t.ok, "errors": [e.message for e in t.errors],
                                              "rewards": t.rewards, "turns": t.num_turns} for t in result.traces}
    print(json.dumps({"parts": parts(), "coverage": {k: kind for k, (kind, _why) in COVERAGE.items()},
                      "cases": CASES, "traces": traces}))


if __name__ == "__main__":
    main()
