"""rk.tasks_from on verifiers v1 tasksets, proven against verifiers itself.

verifiers 0.4 pins mcp==2.0.0 and openai<3, so it does not live in the test
interpreter: the proofs run it in the venvs scripts/test.sh builds under
~/.cache/rollkit-oracles (verifiers alone, for its own evaluation; verifiers
with rollkit on PYTHONPATH, for rollkit's), each as a subprocess, both
answered by one scripted, keyless OpenAI-compatible server on 127.0.0.1
(tests/helpers/scripted_provider.py, tests/helpers/byo_verifiers_replies.py). The
capitals taskset (tests/helpers/byo_verifiers_taskset.py: five tasks) has three
weighted rewards (one builds its own judge from the judge config in the
task's config), three metrics (one reads the trace's tool calls, tools, token
counts, calls, agent config and timing), a trace, a response and two request
stops (one at verifiers' tool gate), a system prompt and a toolset whose
state the second reward reads: `vf-eval` with verifiers' own `null` chat
harness (its MCP tool servers, its state channel, its scoring) and
`rk.evaluate` must give the same per-task rewards, weights and metrics,
exactly; both with verifiers' reference judge plugged into the tasks' config
and the task's own judge config, aimed at the same scripted server (model
"judge"), which grades France's answer right and Japan's wrong. Then bad
input (tests/helpers/byo_verifiers_broken.py and verifiers' own `vf-init` template,
unmodified), each failure on its own task or trace while the rest of the run
goes on. The forks of the saved
run and the tasks stepped by hand in the notebook facade give the same.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections.abc import Iterator
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


@pytest.fixture(autouse=True)
def _no_port_files_left() -> Iterator[None]:
    """verifiers' tool server launcher (verifiers.v1.mcp.launch) has each
    server report its port through a file it names /tmp/vf-port-<id>,
    whatever TMPDIR says, and never removes it: the files a test's
    verifiers runs made are removed when it ends."""
    before = set(glob.glob("/tmp/vf-port-*"))
    yield
    for path in set(glob.glob("/tmp/vf-port-*")) - before:
        Path(path).unlink(missing_ok=True)


def _env(secret: str) -> dict[str, str]:
    root = str(HERE.parent)
    return {**os.environ, "SCRIPTED_KEY": secret, "PYTHONPATH": os.pathsep.join([root, str(HERE), str(HELPERS)])}


def _per_task(stdout: str) -> dict[int, dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"idx"')]
    return {row["idx"]: row for row in rows}


# The capitals taskset's trace_facts metric on Italy's trace: one call, which called a tool.
FACTS = {"tool_calls": 1.0, "tools_crc": 2231086697.0, "root_tools": 2.0, "input_tokens": 17.0,
         "output_tokens": 3.0, "total_tokens": 20.0, "prompt_tokens": 17.0, "calls": 1.0, "turns": 1.0,
         "nodes": 3.0, "calls_named": 1.0, "agent_named": 1.0, "max_turns": 9.0, "calls_finished": 1.0,
         "calls_timed": 1.0, "nodes_stamped": 1.0, "agent_timed": 1.0, "setup_before_agent": 1.0, "start_first": 1.0, "scoring_started": 1.0,
         "scoring_ended": 0.0, "model_split": 0.0, "completed": 1.0, "ok": 0.0, "truncated": 0.0}


UNNAMED = ("verifiers reward 'self_judged' of task CapitalTask calls the judge in its config's 'judge' (judge "
           "model 'openai/gpt-6-luna' at https://api.pinference.ai/api/v1); rollkit calls a judge only at an "
           "endpoint you name, so this reward is missing: pass rk.tasks_from(..., judge={'base_url': URL, "
           "'model': NAME, 'api_key_var': ENV_VAR})")


def _judge_options(url: str) -> list[str]:
    """vf-eval's options aiming the judge config in the capitals task's config (which
    its self_judged reward builds its judge from) at the scripted server."""
    return ["--env.taskset.task.judge.base-url", url, "--env.taskset.task.judge.model", "judge",
            "--env.taskset.task.judge.api-key-var", "SCRIPTED_KEY"]


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
                                   provider.url, str(tmp_path / "native"), "--env.taskset.task.judges", judges,
                                   *_judge_options(provider.url), "--env.agent.max-turns", "9"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
    assert sorted(theirs) == sorted(mine) == [0, 1, 2, 3, 4]
    for idx, row in theirs.items():
        assert row["errors"] == [] and mine[idx]["errors"] == [] and mine[idx]["signal_errors"] == {}
        assert mine[idx]["rewards"] == row["rewards"], idx
        # rollkit adds its harness's own metric (tool_call_success_rate) beside the task's.
        assert {k: v for k, v in mine[idx]["metrics"].items() if k in row["metrics"]} == row["metrics"], idx
        assert set(row["metrics"]) == {"reply_words", "tool_replies", *FACTS}
        assert mine[idx]["stop"] == row["stop"] or (mine[idx]["stop"], row["stop"]) == (None, "agent_completed")
    # The values themselves: the notes reward reads the toolset's state, kept across the rollout's
    # calls; Italy's trace stop ends it before its second call (its tool call has run).
    # The judge graded France's reply right and Japan's wrong; Italy's last reply is its tool
    # call, an empty response the reference judge scores 0 without asking.
    # The self_judged reward builds its own judge from the task's config, aimed at the same server.
    assert theirs[0]["rewards"] == {"correct": [1.0, 0.75], "noted": [1.0, 0.25], "reference": [1.0, 0.5],
                                    "self_judged": [1.0, 0.1]}
    assert theirs[1]["rewards"] == {"correct": [0.0, 0.75], "noted": [1.0, 0.25], "reference": [0.0, 0.5],
                                    "self_judged": [0.0, 0.1]}
    assert theirs[2]["rewards"] == {"correct": [0.0, 0.75], "noted": [0.0, 0.25], "reference": [0.0, 0.5],
                                    "self_judged": [0.0, 0.1]}
    # Spain's request stop fires before its second call, on the tool's result (the tool has run).
    assert theirs[3]["rewards"] == {"correct": [0.0, 0.75], "noted": [1.0, 0.25], "reference": [0.0, 0.5],
                                    "self_judged": [0.0, 0.1]}
    # What the facts metric read of verifiers' own trace, which rollkit's matched above: the
    # tool call and the two tools offered (their schemas as verifiers' MCP server advertises
    # them), the scripted server's token counts, the calls and their times, the phases'
    # times, and the trace as it stands while scored (completed, not yet ok; the agent's
    # model/harness split and the scoring's end are not set until after scoring).
    assert theirs[0]["metrics"] == {"reply_words": 7.0, "tool_replies": 1.0, **FACTS, "prompt_tokens": 37.0,
                                    "output_tokens": 6.0, "total_tokens": 23.0, "calls": 2.0, "turns": 2.0,
                                    "nodes": 5.0}
    assert theirs[1]["metrics"] == {"reply_words": 0.0, "tool_replies": 0.0, **FACTS}
    # Spain's tool result, which its stopped request carried, is on the trace (a node not sampled).
    assert {k: theirs[3]["metrics"][k] for k in ("calls", "turns", "nodes", "tool_replies")} == \
        {"calls": 1.0, "turns": 1.0, "nodes": 4.0, "tool_replies": 1.0}
    # Germany's request stop fires at the tool gate, on its tool call with an empty result:
    # the tool never runs (nothing noted) and no result is on the trace.
    assert theirs[4]["rewards"] == {**theirs[3]["rewards"], "noted": [0.0, 0.25]}
    assert theirs[4]["metrics"] == {"reply_words": 0.0, "tool_replies": 0.0, **FACTS}
    assert theirs[1]["stop"] == mine[1]["stop"] == "italy_after_one_reply" and mine[1]["turns"] == 1
    # Japan's reply names Kyoto: the response @vf.stop ends it there, in both.
    assert theirs[2]["stop"] == mine[2]["stop"] == "no_kyoto" and mine[2]["turns"] == 1
    assert mine[1]["state"]["notes"] == ["capital of Italy: Rome"] and mine[2]["state"] is None
    assert theirs[3]["stop"] == mine[3]["stop"] == "spain_noted" and mine[3]["turns"] == 1
    assert mine[3]["state"]["notes"] == ["capital of Spain: Madrid"]
    assert theirs[4]["stop"] == mine[4]["stop"] == "germany_no_tools" and mine[4]["turns"] == 1
    assert mine[4]["state"] is None
    # Each fork rebuilt its task from the saved trace and was scored by it, its toolsets'
    # state as it stood after the fork's turn (recorded per turn): the notes France and
    # Italy wrote on turn 1 are there, so the notes reward reads them.
    forked = _per_task(forks_out)
    assert {idx: row["rewards"] for idx, row in forked.items()} == {idx: row["rewards"] for idx, row in theirs.items()}
    assert [forked[idx]["turns"] for idx in (0, 1, 2, 3, 4)] == [2, 1, 1, 1, 1]
    assert forked[0]["state"] == mine[0]["state"] and forked[0]["state"]["notes"] == ["capital of France: Paris"]
    # Italy's fork stands where the stop ended it, and says which @vf.stop fired.
    assert [forked[idx]["stop"] for idx in (1, 3, 4)] == ["italy_after_one_reply", "spain_noted", "germany_no_tools"]
    # Stepped by hand, each task gets what rk.evaluate gave it; France's notes were
    # there when its second turn was asked for (no judge is plugged there).
    stepped = _per_task(hand_out)
    for idx, row in stepped.items():
        assert mine[idx]["rewards"].pop("reference") == theirs[idx]["rewards"]["reference"]
        # No judge= named there: the judge the task's reward builds from its config is not called
        # where it would be (France's and Japan's replies; Italy's and Spain's are empty: no judge).
        assert mine[idx]["rewards"].pop("self_judged") == theirs[idx]["rewards"]["self_judged"]
        judged_here = row["rewards"].pop("self_judged")
        assert (judged_here, row["signal_errors"]) == ((None, {"self_judged": UNNAMED}) if idx in (0, 2) else
                                                       ([0.0, 0.1], {})), idx
        # A person's seat is not the model "scripted", counts its tokens its own way and is
        # given no turn limit.
        for metrics in (row["metrics"], mine[idx]["metrics"]):
            for fact in ("calls_named", "agent_named", "max_turns", "input_tokens", "output_tokens", "total_tokens", "prompt_tokens"):
                metrics.pop(fact)
        assert {k: row[k] for k in ("rewards", "metrics", "state", "stop", "turns")} == \
            {k: mine[idx][k] for k in ("rewards", "metrics", "state", "stop", "turns")}, idx
    assert [row["asked"] for row in stepped.values()] == [[[0, None], [1, mine[0]["state"]]], *4 * [[[0, None]]]]
    # The judges (verifiers' reference judge, plugged, and the task's own) were asked by verifiers,
    # by rollkit and by the forks (which rebuilt the judge endpoint from the saved task) on
    # France's and Japan's replies.
    judged = [body for body in requests if body["model"] == "judge"]
    requests = [body for body in requests if body["model"] != "judge"]
    graded = sorted((_fenced(body, "Reference answer:"), _fenced(body, "Response:"), len(body["messages"]))
                    for body in judged)
    assert graded == 2 * 3 * [("Paris", 'The capital is Paris. ("noted (1 lines)")', 1)] + \
        2 * 3 * [("Tokyo", "I think it is Kyoto.", 1)]
    assert sum("Is the response right?" in body["messages"][0]["content"] for body in judged) == 6
    # Both sent the task's system prompt and the toolset's tools under verifiers' prefixed names.
    for body in requests:
        assert body["messages"][0] == {"role": "system", "content": "You answer geography questions. "
                                                                    "Write your answer in the notes first."}
        assert sorted(t["function"]["name"] for t in body["tools"]) == ["notes_count", "notes_write"]
    assert len({json.dumps(body["tools"], sort_keys=True) for body in requests}) == 1
    # France: a tool call, then the answer; Italy, Spain and Germany: the tool call (then their
    # stops); Japan: the answer; twice. Then France's fork asks for its answer again (the
    # others' forks stop again or have no turn left).
    assert len(requests) == 2 * (2 + 1 + 1 + 1 + 1) + 1


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
    own_judge_refusal = (
        "verifiers reward 'own_judge' of task ShakyTask builds its judge's client in the reward itself "
        "(vf.JudgeConfig(...)), which judge= cannot aim; rollkit calls a judge only at an endpoint you name, so "
        "this reward is missing: read the judge's config from the task's config (a JudgeConfig field, e.g. "
        "Judge(self.config.judge)), which rk.tasks_from(..., judge={...}) aims")
    refused = {"tests_pass": runtime_refusal, "own_judge": own_judge_refusal}
    # The fine task's trace @vf.stop ends it after its tool call, before the answer "done".
    assert fine["rewards"] == {"judged": 0.0, "tests_pass": None, "own_judge": None}
    assert fine["weights"]["judged"] == 2.0
    assert (fine["stop"], fine["verifiers_stop"], fine["turns"]) == ("verifiers_stop", "pinged", 1)
    assert fine["signal_errors"] == refused and fine["ok"] is True
    assert fine["warnings"] == []  # its request @vf.stop ('never') is checked, and never fires
    assert (raises["stop"], raises["turns"]) == (None, 2)
    assert raises["rewards"] == {"judged": None, "tests_pass": None, "own_judge": None}
    assert raises["signal_errors"] == {"judged": "verifiers reward 'judged' raised ValueError: the judge could not "
                                                 "parse the reply", **refused}
    # A config-plugged judge would call a hosted model: its reward is missing, saying which.
    assert found["judge"]["rewards"] == {"reference": None, "judged": 0.0, "tests_pass": None, "own_judge": None}
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
    assert rewards == {0: {"correct": [1.0, 0.75], "noted": [1.0, 0.25], "self_judged": None},
                       1: {"correct": [0.0, 0.75], "noted": [1.0, 0.25], "self_judged": [0.0, 0.1]},
                       2: {"correct": [0.0, 0.75], "noted": [0.0, 0.25], "self_judged": None},
                       3: {"correct": [0.0, 0.75], "noted": [1.0, 0.25], "self_judged": [0.0, 0.1]},
                       4: {"correct": [0.0, 0.75], "noted": [0.0, 0.25], "self_judged": [0.0, 0.1]}}
