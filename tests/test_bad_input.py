"""Bad numbers in options and a run folder that cannot be written: each is
one clear error naming the class and option (or the folder), raised before
anything runs. Before, `SubprocessRuntime(kill_grace="2s")` said only
"could not convert string to float" and an unwritable `--out` was a
traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.evaluate_helpers import HERE, said_agent, said_tasks

import rollkit as rk
from rollkit.programs.guard import ServerLimits
from rollkit.programs.interception import InterceptionServer
from rollkit.runs.evaluation import RunFolderError

pytestmark = pytest.mark.faults  # part of the fault suite (tests/test_faults.py)


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: rk.SubprocessRuntime(kill_grace="2s"), TypeError,
     "SubprocessRuntime(kill_grace=...) must be a number of seconds >= 0, got '2s' (str)"),
    (lambda: rk.SubprocessRuntime(drain_grace=-1), ValueError,
     "SubprocessRuntime(drain_grace=...) must be a number of seconds >= 0, got -1"),
    (lambda: rk.ProgramHarness(["agent"], stop_grace=float("nan")), ValueError,
     "ProgramHarness(stop_grace=...) must be a number of seconds >= 0, got nan"),
    (lambda: rk.ProgramHarness(["agent"], stderr_tail=1.5), TypeError,
     "ProgramHarness(stderr_tail=...) must be a whole number >= 0, got 1.5 (float)"),
    (lambda: rk.OpenAIModel("m", api_key="k", timeout=0), ValueError,
     "OpenAIModel(timeout=...) must be a number of seconds > 0, got 0"),
    (lambda: rk.OpenAIModel("m", api_key="k", max_retries="3"), TypeError,
     "OpenAIModel(max_retries=...) must be a whole number >= 0, got '3' (str)"),
    (lambda: rk.ScriptedModel(["x"], delay=-0.5), ValueError,
     "ScriptedModel(delay=...) must be a number of seconds >= 0, got -0.5"),
    (lambda: ServerLimits(per_rollout=0), ValueError,
     "ServerLimits(per_rollout=...) must be a whole number >= 1, got 0"),
    (lambda: ServerLimits(idle_timeout=True), TypeError,
     "ServerLimits(idle_timeout=...) must be a number of seconds > 0, got True (bool)"),
    (lambda: InterceptionServer(max_body=True), TypeError,
     "InterceptionServer(max_body=...) must be a whole number >= 1, got True (bool)"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_bad_number_in_an_option_names_the_class_and_the_option(make, error, message):
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value) == message


UNWRITABLE = "/sys/rollkit-test-run"  # refused even to root, unlike a chmod-ed folder


def test_an_unwritable_out_folder_is_refused_naming_it_before_anything_runs():
    started = []
    agent = said_agent()
    agent.subscribe(lambda event: started.append(event.kind))
    with pytest.raises(RunFolderError) as caught:
        rk.evaluate(agent, said_tasks(2), out=UNWRITABLE, progress=False)
    assert str(caught.value) == (
        f"cannot write the run folder {UNWRITABLE}: Operation not permitted; "
        "choose a folder you can write (out=..., rollkit eval --out DIR)")
    assert started == []


def test_an_out_folder_under_a_file_is_refused_naming_the_file(tmp_path):
    (tmp_path / "results.txt").write_text("kept\n")
    out = tmp_path / "results.txt" / "run"
    with pytest.raises(RunFolderError) as caught:
        rk.evaluate(said_agent(), said_tasks(1), out=out, progress=False)
    assert str(caught.value).startswith(f"cannot write the run folder {out}: Not a directory")
    assert (tmp_path / "results.txt").read_text() == "kept\n"


def test_rollkit_eval_with_an_unwritable_out_prints_one_error_line():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "rollkit", "eval", "helpers.evaluate_helpers:TASKS", "-m", "echo",
                           "--out", UNWRITABLE, "--no-progress"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Error: cannot write the run folder {UNWRITABLE}: Operation not permitted; "
        "choose a folder you can write (out=..., rollkit eval --out DIR)")
    assert "Traceback" not in done.stderr
