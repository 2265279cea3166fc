"""rk.tasks_from on verifiers v1 tasksets, proven against verifiers itself.

verifiers 0.4 pins mcp==2.0.0 and openai<3, so it does not live in the test
interpreter: the proofs run it in the venvs scripts/test.sh builds under
~/.cache/rollkit-oracles (verifiers alone, for its own evaluation; verifiers
with rollkit on PYTHONPATH, for rollkit's), each as a subprocess, both
answered by one scripted, keyless OpenAI-compatible server on 127.0.0.1
(tests/helpers/scripted_provider.py, tests/helpers/byo_verifiers_replies.py). The capitals
taskset (tests/helpers/byo_verifiers_taskset.py) has two weighted rewards, two
metrics, a system prompt and a toolset whose state the second reward reads:
`vf-eval` with verifiers' own `null` chat harness (its MCP tool servers, its
state channel, its scoring) and `rk.evaluate` must give the same per-task
rewards, weights and metrics, exactly; both with verifiers' reference judge
plugged into the tasks' config and aimed at the same scripted server (model
"judge"), which grades France's answer right and Japan's wrong. Then bad input (tests/helpers/byo_verifiers_broken.py
and verifiers' own `vf-init` template, unmodified), each failure on its
own task or trace while the rest of the run goes on. The forks of the saved
run and the tasks stepped by hand in the notebook facade give the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rollkit as rk

HERE = Path(__file__).parent
# The helpers the proofs run as scripts, and the taskset packages they load. A
# verifiers taskset id is a top-level module name (its loader looks the id up
# under verifiers.v1.tasksets first, which fails on a dotted name), so the
# subprocesses get this folder on PYTHONPATH, as an installed taskset's
# package would be on sys.path.
HELPERS = HERE / "helpers"
ORACLES = Path.home() / ".cache" / "rollkit-oracles"
VERIFIERS = ORACLES / "verifiers" / "bin" / "python"  # verifiers 0.4.0 alone
WITH_ROLLKIT = ORACLES / "rollkit-verifiers" / "bin" / "python"  # verifiers 0.4.0, rollkit from PYTHONPATH

sys.path.insert(0, str(HERE))
from helpers.byo_verifiers_replies import reply  # noqa: E402
from helpers.scripted_provider import ScriptedProvider  # noqa: E402

needs_oracles = pytest.mark.skipif(
    not (VERIFIERS.exists() and WITH_ROLLKIT.exists()),
    reason="the verifiers venvs are built by scripts/test.sh (~/.cache/rollkit-oracles/verifiers, rollkit-verifiers)")


def _env(secret: str) -> dict[str, str]:
    root = str(HERE.parent)
    return {**os.environ, "SCRIPTED_KEY": secret, "PYTHONPATH": os.pathsep.join([root, str(HERE), str(HELPERS)])}


def _per_task(stdout: str) -> dict[int, dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"idx"')]
    return {row["idx"]: row for row in rows}


def _fenced(body: dict, heading: str) -> str:
    """The fenced block under `heading` in a judge request's prompt."""
    return body["messages"][0]["content"].split(f"{heading}\n```\n", 1)[1].split("\n```", 1)[0]


@needs_oracles
def test_rewards_weights_and_metrics_are_verifiers_own_with_a_stateful_toolset_and_a_system_prompt(tmp_path):
    with ScriptedProvider(reply) as provider:
        env = _env(provider.secret)
        judges = json.dumps([{"id": "reference", "weight": 0.5, "base_url": provider.url, "model": "judge",
                              "api_key_var": "SCRIPTED_KEY"}])
        native = subprocess.Popen([str(VERIFIERS), str(HELPERS / "verifiers_native_eval.py"), "byo_verifiers_taskset",
                                   provider.url, str(tmp_path / "native"), "--env.taskset.task.judges", judges],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # rollkit names the same judge endpoint with rk.tasks_from(..., judge=...).
        ours = subprocess.Popen([str(WITH_ROLLKIT), str(HELPERS / "verifiers_rollkit_eval.py"), "--judge",
                                 "verifiers:byo_verifiers_taskset", provider.url, str(tmp_path / "run")], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # By hand: each task opened in the notebook facade, a person's seat answering turn by turn.
        by_hand = subprocess.Popen([str(WITH_ROLLKIT), str(HELPERS / "verifiers_rollkit_eval.py"), "--by-hand",
                                    "verifiers:byo_verifiers_taskset"], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        ours_out, ours_err = ours.communicate(timeout=240)
        # While verifiers still runs: the saved traces forked after their first turn, in a new process.
        forks = subprocess.Popen([str(WITH_ROLLKIT), str(HELPERS / "verifiers_rollkit_eval.py"), "--fork",
                                  str(tmp_path / "run"), provider.url], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        native_out, native_err = native.communicate(timeout=240)
        forks_out, forks_err = forks.communicate(timeout=240)
        hand_out, hand_err = by_hand.communicate(timeout=240)
        requests = provider.requests
    assert native.returncode == 0, native_err[-3000:]
    assert ours.returncode == 0, ours_err[-3000:]
    assert forks.returncode == 0, forks_err[-3000:]
    assert by_hand.returncode == 0, hand_err[-3000:]
    theirs, mine = _per_task(native_out), _per_task(ours_out)
    assert sorted(theirs) == sorted(mine) == [0, 1, 2]
    for idx, row in theirs.items():
        assert row["errors"] == [] and mine[idx]["errors"] == [] and mine[idx]["signal_errors"] == {}
        assert mine[idx]["rewards"] == row["rewards"], idx
        # rollkit adds its harness's own metric (tool_call_success_rate) beside the task's.
        assert {k: v for k, v in mine[idx]["metrics"].items() if k in row["metrics"]} == row["metrics"], idx
        assert set(row["metrics"]) == {"reply_words", "tool_replies"}
        assert mine[idx]["stop"] == row["stop"] or (mine[idx]["stop"], row["stop"]) == (None, "agent_completed")
    # The values themselves: the notes reward reads the toolset's state, kept across the rollout's
    # calls; Italy's trace stop ends it before its second call (its tool call has run).
    # The judge graded France's reply right and Japan's wrong; Italy's last reply is its tool
    # call, an empty response the reference judge scores 0 without asking.
    assert theirs[0]["rewards"] == {"correct": [1.0, 0.75], "noted": [1.0, 0.25], "reference": [1.0, 0.5]}
    assert theirs[1]["rewards"] == {"correct": [0.0, 0.75], "noted": [1.0, 0.25], "reference": [0.0, 0.5]}
    assert theirs[2]["rewards"] == {"correct": [0.0, 0.75], "noted": [0.0, 0.25], "reference": [0.0, 0.5]}
    assert theirs[0]["metrics"] == {"reply_words": 7.0, "tool_replies": 1.0}
    assert theirs[1]["stop"] == mine[1]["stop"] == "italy_after_one_reply" and mine[1]["turns"] == 1
    # Japan's reply names Kyoto: the response @vf.stop ends it there, in both.
    assert theirs[2]["stop"] == mine[2]["stop"] == "no_kyoto" and mine[2]["turns"] == 1
    assert mine[1]["state"]["notes"] == ["capital of Italy: Rome"] and mine[2]["state"] is None
    # Each fork rebuilt its task from the saved trace and was scored by it, its toolsets'
    # state as it stood after the fork's turn (recorded per turn): the notes France and
    # Italy wrote on turn 1 are there, so the notes reward reads them.
    forked = _per_task(forks_out)
    assert {idx: row["rewards"] for idx, row in forked.items()} == {idx: row["rewards"] for idx, row in theirs.items()}
    assert [forked[idx]["turns"] for idx in (0, 1, 2)] == [2, 1, 1]
    assert forked[0]["state"] == mine[0]["state"] and forked[0]["state"]["notes"] == ["capital of France: Paris"]
    # Italy's fork stands where the stop ended it, and says which @vf.stop fired.
    assert forked[1]["stop"] == "italy_after_one_reply"
    # Stepped by hand, each task gets what rk.evaluate gave it; France's notes were
    # there when its second turn was asked for (no judge is plugged there).
    stepped = _per_task(hand_out)
    for idx, row in stepped.items():
        assert mine[idx]["rewards"].pop("reference") == theirs[idx]["rewards"]["reference"]
        assert {k: row[k] for k in ("rewards", "metrics", "state", "stop", "turns")} == \
            {k: mine[idx][k] for k in ("rewards", "metrics", "state", "stop", "turns")}, idx
    assert [row["asked"] for row in stepped.values()] == [[[0, None], [1, mine[0]["state"]]], [[0, None]], [[0, None]]]
    # The judge was asked by verifiers, by rollkit and by the forks (which rebuilt the judge
    # endpoint from the saved task) on France's and Japan's replies, in verifiers' own prompt.
    judged = [body for body in requests if body["model"] == "judge"]
    requests = [body for body in requests if body["model"] != "judge"]
    graded = sorted((_fenced(body, "Reference answer:"), _fenced(body, "Response:"), len(body["messages"]))
                    for body in judged)
    assert graded == 3 * [("Paris", 'The capital is Paris. ("noted (1 lines)")', 1)] + \
        3 * [("Tokyo", "I think it is Kyoto.", 1)]
    # Both sent the task's system prompt and the toolset's tools under verifiers' prefixed names.
    for body in requests:
        assert body["messages"][0] == {"role": "system", "content": "You answer geography questions. "
                                                                    "Write your answer in the notes first."}
        assert sorted(t["function"]["name"] for t in body["tools"]) == ["notes_count", "notes_write"]
    # France: a tool call, then the answer; Italy: the tool call (then its stop); Japan: the
    # answer; twice. Then France's fork asks for its answer again (Italy's stops again,
    # Japan's has no turn left).
    assert len(requests) == 2 * (2 + 1 + 1) + 1


@needs_oracles
def test_bad_input_a_failing_load_the_vf_init_template_a_raising_reward_a_runtime_reward_a_dead_toolset(tmp_path):
    done = subprocess.run([str(WITH_ROLLKIT), str(HELPERS / "verifiers_bad_input.py"), str(tmp_path)],
                          env=_env(""), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["load"] == ("verifiers taskset 'helpers.byo_verifiers_broken:BrokenLoadTaskset' failed to load its "
                             "tasks (after 0): FileNotFoundError: rows.jsonl is missing")
    assert found["template"].startswith("verifiers taskset 'capital_demo.taskset:CapitalDemoTaskset' failed to "
                                        "load its tasks (after 0): NotImplementedError: Return this taskset's tasks")
    fine, raises, no_tools = found["traces"]
    runtime_refusal = ("verifiers reward 'tests_pass' of task ShakyTask needs a verifiers runtime (a sandbox), "
                       "which rollkit does not provide")
    # The fine task's trace @vf.stop ends it after its tool call, before the answer "done".
    assert fine["rewards"] == {"judged": 0.0, "tests_pass": None} and fine["weights"]["judged"] == 2.0
    assert (fine["stop"], fine["verifiers_stop"], fine["turns"]) == ("verifiers_stop", "pinged", 1)
    assert fine["signal_errors"] == {"tests_pass": runtime_refusal} and fine["ok"] is True
    assert fine["warnings"] == ["verifiers task ShakyTask's request @vf.stop functions ['never'] are not checked in "
                                "rollkit (its trace and response stops are)"]
    assert (raises["stop"], raises["turns"]) == (None, 2)
    assert raises["rewards"] == {"judged": None, "tests_pass": None}
    assert raises["signal_errors"] == {"judged": "verifiers reward 'judged' raised ValueError: the judge could not "
                                                 "parse the reply", "tests_pass": runtime_refusal}
    # A config-plugged judge would call a hosted model: its reward is missing, saying which.
    assert found["judge"]["rewards"] == {"reference": None, "judged": 0.0, "tests_pass": None}
    assert found["judge"]["weights"]["reference"] == 0.5
    assert found["judge"]["signal_errors"]["reference"] == (
        "verifiers judge 'reference' of task ShakyTask would call judge model 'openai/gpt-6-luna' at "
        "https://api.pinference.ai/api/v1; rollkit calls a judge only at an endpoint you name, so this reward is "
        "missing: pass rk.tasks_from(..., judge={'base_url': URL, 'model': NAME, 'api_key_var': ENV_VAR})")
    assert no_tools["ok"] is False and no_tools["errors"] == [
        "verifiers toolset 'shaky' of task 'ShakyTaskset:2' did not start: ConnectionError: the tool backend "
        "refused the connection"]


def test_a_verifiers_source_is_recognised_without_importing_verifiers_and_its_absence_names_the_extra():
    from rollkit.interop.tasks import SOURCES

    claimed = [s.framework for s in SOURCES if s.claims("verifiers:byo_verifiers_taskset")]
    assert claimed == ["verifiers"]
    if "verifiers" in sys.modules or _installed("verifiers"):
        pytest.skip("verifiers is installed here: its absence cannot be shown")
    with pytest.raises(rk.Unavailable, match=r"pip install 'rollkit\[verifiers\]'"):
        rk.tasks_from("verifiers:byo_verifiers_taskset")
    assert "verifiers" not in sys.modules


def test_a_judge_endpoint_is_checked_before_the_taskset_loads_and_never_takes_a_key():
    with pytest.raises(rk.UsageError, match=r"judge= takes a mapping like .*, not a str"):
        rk.tasks_from("verifiers:byo_verifiers_taskset", judge="http://127.0.0.1:8000/v1")
    with pytest.raises(rk.UsageError) as refused:
        rk.tasks_from("verifiers:byo_verifiers_taskset", judge={"base_url": "http://127.0.0.1:8000/v1", "api_key": "k"})
    assert str(refused.value) == (
        "judge= takes ['base_url', 'model', 'api_key_var', 'headers_from_env', 'timeout'] (base_url and model "
        "required; a key only through api_key_var, the environment variable holding it): missing ['model'], "
        "unknown ['api_key']")


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_fresh_venv_with_the_verifiers_extra_gets_a_working_pair(tmp_path):
    """`pip install "rollkit[verifiers]"` resolves (rollkit's mcp>=2.0 admits
    verifiers' mcp==2.0.0) and the installed rollkit scores the capitals taskset."""
    venv = tmp_path / "venv"
    (tmp_path / "tmp").mkdir()
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "TMPDIR": str(tmp_path / "tmp"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "-q", f"{HERE.parent}[verifiers]"], env=env,
                             capture_output=True, text=True, timeout=1500)
    assert install.returncode == 0, install.stderr[-3000:]
    versions = subprocess.run([python, "-c", "import importlib.metadata as m, rollkit; print(m.version('mcp'), "
                               "m.version('verifiers'), rollkit.__file__)"], env=env, capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)
    mcp, verifiers, where = versions.stdout.split()
    assert (mcp, verifiers) == ("2.0.0", "0.4.0") and Path(where).is_relative_to(venv)
    path = os.pathsep.join([str(HERE), str(HELPERS)])  # the helpers, not this checkout's rollkit
    with ScriptedProvider(reply) as provider:
        done = subprocess.run([python, str(HELPERS / "verifiers_rollkit_eval.py"), "verifiers:byo_verifiers_taskset",
                               provider.url], env={**env, "SCRIPTED_KEY": provider.secret, "PYTHONPATH": path},
                              capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rewards = {idx: row["rewards"] for idx, row in _per_task(done.stdout).items()}
    assert rewards == {0: {"correct": [1.0, 0.75], "noted": [1.0, 0.25]},
                       1: {"correct": [0.0, 0.75], "noted": [1.0, 0.25]},
                       2: {"correct": [0.0, 0.75], "noted": [0.0, 0.25]}}
