"""Every part of a verifiers v1 task is mapped by rollkit or refused by name: none is dropped without a word.

verifiers' own lists (each decorator kind its decorators module marks, the
public attributes of Task, Taskset and Toolset, the fields of TaskData, TaskConfig,
TasksetConfig, the toolset configs and AgentConfig) are read in the venv with
verifiers and rollkit (tests/helpers/verifiers_coverage_check.py, one
subprocess): each must have an entry in rollkit's COVERAGE, so a part
verifiers adds later fails here until someone decides. Each refused entry has
a task carrying it (tests/helpers/byo_verifiers_unmapped.py); rk.evaluate
over them fails each at open with an error naming the task, the part and
what to do, while the clean task of the same run scores.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from test_verifiers_tasks import HELPERS, WITH_ROLLKIT, _env, needs_oracles

SANDBOX = "needs a verifiers runtime (a sandbox), which rollkit does not provide"
UNMAPPED = "carries what rollkit does not map, so it cannot run here: "
LOAD_WITHOUT = "; load the task without it to run it here)"
TOOLSET_REMEDY = "; give it a default vf.ToolsetConfig() to run it here)"
# The refusal each case's task gets, after "verifiers task CLASS 'UnmappedTaskset:CASE' (idx N) " + UNMAPPED.
REFUSALS = {
    "@intercept": "@vf.intercept 'shout' (it rewrites requests or responses, which rollkit does not map; override "
                  "shout without the decorator in a subclass to run the task without it)",
    "Task.setup": f"setup(trace, runtime) overridden ({SANDBOX})",
    "Task.finalize": f"finalize(trace, runtime) overridden ({SANDBOX})",
    "Task.NEEDS_CONTAINER": f"NEEDS_CONTAINER = True ({SANDBOX})",
    "Task.runtime_env": "runtime_env() ['GRADER_MODE'] (an environment for a verifiers runtime's processes, which "
                        "rollkit does not provide)",
    "Task.score": "score() overridden (rollkit calls the task's metrics, rewards and judges one by one, as "
                  "vf.Task.score does: move what the override adds into @vf.reward or @vf.metric methods)",
    "Task.scoring_deferred": "scoring deferred (defer_scoring(): verifiers would not score it here)",
    "TaskData.image": f"data.image = 'python:3.11-slim' (a container image; {SANDBOX}{LOAD_WITHOUT}",
    "TaskData.workdir": f"data.workdir = '/app' (a working directory in the task's container; {SANDBOX}{LOAD_WITHOUT}",
    "TaskData.agent_user": f"data.agent_user = 'agent' (the user the harness runs as in the task's box; "
                           f"{SANDBOX}{LOAD_WITHOUT}",
    "TaskData.skills": f"data.skills = ['skills/grading'] (skills installed for the harness in the task's box; "
                       f"{SANDBOX}{LOAD_WITHOUT}",
    "TaskData.network_allow": f"data.network_allow = ['pypi.org'] (a runtime network allowlist; {SANDBOX}{LOAD_WITHOUT}",
    "TaskData.network_block": f"data.network_block = ['example.com'] (a runtime network blocklist; "
                              f"{SANDBOX}{LOAD_WITHOUT}",
    "TaskData.artifacts": "data.artifacts = [{'source': '/app/out.txt', 'exclude': [], 'required': True}] (paths "
                          f"collected from the task's runtime; {SANDBOX}{LOAD_WITHOUT}",
    "TaskData.timeout": "data.timeout = {'setup': None, 'agent': 30.0, 'finalize': None, 'scoring': None} "
                        "(per-stage timeouts rollkit does not take from the task (rollkit's are the agent's: "
                        f"rk.RolloutTimeouts){LOAD_WITHOUT}",
    "TaskData.resources": "data.resources = {'cpu': None, 'memory': 2.0, 'gpu': None, 'disk': None} (cpu/memory/"
                          f"gpu/disk of the task's box; {SANDBOX}{LOAD_WITHOUT}",
    "ToolsetConfig.url": "toolset 'notes' at url 'http://127.0.0.1:9/mcp' (a tool server already running "
                         "elsewhere; rollkit runs a toolset's object in the rollout's process and does not call "
                         f"remote MCP servers{TOOLSET_REMEDY}",
    "ToolsetConfig.colocated": f"toolset 'notes' colocated (runs the tool server in the agent's box; "
                               f"{SANDBOX}{TOOLSET_REMEDY}",
    "ToolsetConfig.runtime": "toolset 'notes' on runtime 'docker' (a runtime other than a local subprocess; "
                             f"{SANDBOX}{TOOLSET_REMEDY}",
    "Toolset.register": "toolset 'notes' overrides register() (an override registers MCP handlers rollkit does "
                        "not read (it takes the @vf.tool methods); declare its tools as @vf.tool methods of a "
                        "vf.Toolset to run it here)",
}
CLASSES = {"@intercept": "InterceptTask", "Task.setup": "SetupTask", "Task.finalize": "FinalizeTask",
           "Task.NEEDS_CONTAINER": "ContainerTask", "Task.runtime_env": "EnvTask", "Task.score": "ScoreTask",
           "Toolset.register": "RawToolsTask"}


@pytest.fixture(scope="module")
def found() -> dict:
    done = subprocess.run([str(WITH_ROLLKIT), str(HELPERS / "verifiers_coverage_check.py")], env=_env(""),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@needs_oracles
def test_every_part_verifiers_defines_is_mapped_refused_or_named_inert(found):
    parts, coverage = set(found["parts"]), found["coverage"]
    assert sorted(parts - set(coverage)) == [], "verifiers parts rollkit has not decided about (add to COVERAGE)"
    assert sorted(set(coverage) - parts) == [], "COVERAGE entries verifiers 0.4 does not define"
    assert set(coverage.values()) == {"mapped", "refused", "run", "inert"}
    # The decorator kinds are read from verifiers' own source, not listed here.
    assert {p for p in parts if p.startswith("@")} == {"@reward", "@metric", "@stop", "@tool", "@intercept"}
    assert coverage["@intercept"] == "refused" and coverage["@reward"] == "mapped"


@needs_oracles
def test_every_refused_part_has_a_task_carrying_it(found):
    refused = {name for name, kind in found["coverage"].items() if kind == "refused"}
    assert set(found["cases"]) == refused
    assert set(found["cases"].values()) == set(REFUSALS)


@needs_oracles
def test_each_refused_task_fails_at_open_naming_the_task_the_part_and_what_to_do(found):
    traces = found["traces"]
    for idx, case in enumerate(["clean", *REFUSALS]):
        trace = traces[case]
        if case == "clean":
            assert (trace["ok"], trace["errors"], trace["rewards"], trace["turns"]) == (True, [], {"said_done": 1.0}, 1)
            continue
        task = CLASSES.get(case, "PlainTask")
        assert trace["errors"] == [f"verifiers task {task} 'UnmappedTaskset:{case}' (idx {idx}) {UNMAPPED}"
                                   f"{REFUSALS[case]}"], case
        # Refused at open: no model call, no reward recorded.
        assert (trace["ok"], trace["turns"], trace["rewards"]) == (False, 0, {}), case
