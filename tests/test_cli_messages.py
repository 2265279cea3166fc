"""What the `rollkit` command says when it is given something wrong.

Each message names one option (or argument), fits on one `Error:` line,
offers the likely meant name when there is one (difflib over the known
names), lists only public names, and gives advice in command-line terms
(not `rk.load(errors='skip')`, which only a Python caller can use). Run in
process with click's runner (the subprocess path is tests/test_cli.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import rollkit as rk
from rollkit.cli import cli

_FORMATS = "rollkit, inspect, atif, trajectory, tau2, verifiers, verifiers-v1, messages"


def _error(*args: str) -> tuple[int, str]:
    """The exit status and the one `Error:` line the command printed."""
    done = CliRunner().invoke(cli, list(args))
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.exit_code, lines[0]


def test_a_typod_model_names_only_model_and_offers_the_close_name() -> None:
    code, line = _error("eval", "rollkit.examples:arithmetic_tasks", "-m", "toy-carefull", "--no-progress")
    assert code == 2
    assert line == "Error: Invalid value for --model: unknown model 'toy-carefull'; did you mean 'toy-careful'?"


def test_a_typod_provider_prefix_keeps_the_model_after_it() -> None:
    _, line = _error("eval", "rollkit.examples:arithmetic_tasks", "-m", "opneai/gpt-4o")
    assert line == "Error: Invalid value for --model: unknown model 'opneai/gpt-4o'; did you mean 'openai/gpt-4o'?"


def test_a_model_like_no_other_lists_the_known_names_on_one_line() -> None:
    _, line = _error("eval", "rollkit.examples:arithmetic_tasks", "-m", "qqqq")
    assert line == ("Error: Invalid value for --model: unknown model 'qqqq'; use one of: echo, openai/NAME, "
                    "toy-calculator, toy-careful, toy-slippery, toy-shell, toy-support")


def test_the_python_error_for_a_typod_model_also_offers_the_close_name() -> None:
    with pytest.raises(ValueError, match=r"^unknown model name 'toy-carefull' \(did you mean 'toy-careful'\?\): use "):
        rk.Agent(model="toy-carefull")


def test_a_bad_turn_limit_names_that_option_only() -> None:
    code, line = _error("eval", "rollkit.examples:arithmetic_tasks", "-m", "echo", "--max-turns", "-3")
    assert code == 2
    assert line == "Error: Invalid value for --max-turns: -3 is not a turn limit: give a whole number >= 0"


def test_eval_help_lists_every_known_model_including_toy_careful() -> None:
    done = CliRunner().invoke(cli, ["eval", "--help"], terminal_width=200)
    assert done.exit_code == 0
    assert ("Model name: echo, openai/NAME, toy-calculator, toy-careful, toy-slippery, toy-shell, toy-support. "
            "openai/NAME reads OPENAI_BASE_URL and OPENAI_API_KEY.") in done.stdout
    assert "rollkit eval rollkit.examples:arithmetic_tasks -m toy-careful" in done.stdout


def test_a_missing_attribute_lists_the_modules_exports_and_the_close_one() -> None:
    _, line = _error("eval", "rollkit.examples:arith_tasks", "-m", "echo")
    assert line.startswith(
        "Error: module 'rollkit.examples' has no attribute 'arith_tasks' (for task set 'rollkit.examples:arith_tasks'); "
        "did you mean rollkit.examples:arithmetic_tasks? It has: AnswerFile, AnswerFileData, Arithmetic, ")
    names = line.split("It has: ")[1].split(", ")
    for internal in ("Any", "annotations", "plug", "register_model", "arithmetic", "support"):
        assert internal not in names


def test_a_module_without_all_offers_what_it_defined_not_what_it_imported() -> None:
    _, line = _error("eval", "helpers.evaluate_helpers:TASK", "-m", "echo")  # tests/ is on sys.path
    assert "did you mean helpers.evaluate_helpers:TASKS? It has: " in line
    shown, more = line.split("It has: ")[1].rsplit(" and ", 1)
    names = shown.split(", ")
    assert len(names) == 20 and more.endswith(" more")  # the first 20, alphabetically
    assert "GATED" in names and "NOT_TASKS" in names and "BadHook" in names
    from helpers import evaluate_helpers
    from rollkit.cli import _public_names

    every = _public_names(evaluate_helpers)
    assert names == every[:20] and "said_tasks" in every and "make_tasks" in every
    for imported in ("annotations", "asyncio", "Path", "rk", "subprocess"):
        assert imported not in every


def test_no_close_attribute_means_no_guess() -> None:
    _, line = _error("eval", "rollkit.examples:zzzz", "-m", "echo")
    assert "did you mean" not in line and "; it has: AnswerFile, " in line


@pytest.mark.parametrize(("spec", "said"), [
    ("rollkit.examples:demo_agent", "rollkit.examples:demo_agent is an Agent, not a list of rk.Task"),
    ("helpers.evaluate_helpers:NOT_TASKS", "helpers.evaluate_helpers:NOT_TASKS[0] is an int, not an rk.Task"),
])
def test_what_a_task_set_is_instead_reads_right(spec: str, said: str) -> None:
    _, line = _error("eval", spec, "-m", "echo")
    assert line == f"Error: {said}" or line.startswith(f"Error: {said} ")


def test_a_user_that_is_not_one_reads_right() -> None:
    _, line = _error("eval", "rollkit.examples:arithmetic_tasks", "-m", "echo", "--user", "helpers.evaluate_helpers:HERE")
    assert line == ("Error: helpers.evaluate_helpers:HERE is a PosixPath, not an rk.User or a function of the task "
                    "that makes one")


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    from helpers.evaluate_helpers import said_agent, said_tasks

    out = tmp_path / "run"
    rk.evaluate(said_agent(), said_tasks(2), out=out, progress=False)
    assert (out / "live.jsonl").exists()
    return out


@pytest.mark.parametrize("command", ["show", "view"])
def test_a_run_folders_live_file_says_pass_the_folder(run_folder: Path, command: str) -> None:
    code, line = _error(command, str(run_folder / "live.jsonl"))
    assert code == 1
    assert line == (f"Error: {run_folder / 'live.jsonl'} is the live file (rollouts in flight) of the run folder "
                    f"{run_folder}, not a trace file; pass the folder instead: rollkit {command} {run_folder}")


def test_compare_given_a_manifest_says_pass_the_folder(run_folder: Path) -> None:
    _, line = _error("compare", str(run_folder / "manifest.json"), str(run_folder))
    assert line == (f"Error: {run_folder / 'manifest.json'} is the manifest of the run folder {run_folder}, not a "
                    f"trace file; pass the folder instead: {run_folder} (rollkit compare takes two run folders)")


def test_a_file_that_is_no_trace_file_gets_command_line_advice(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    _, line = _error("show", str(notes))
    assert line == (f"Error: {notes}: line 1 is not a rollkit trace (Invalid JSON: expected value at line 1 column 1); "
                    f"pass a run folder (the --out of rollkit eval) or a trace file in one of the formats rk.load "
                    f"reads ({_FORMATS})")
    assert "errors=" not in line


def test_a_damaged_line_later_in_a_trace_file_says_fix_or_delete_it(run_folder: Path) -> None:
    traces = run_folder / "traces.jsonl"
    with traces.open("a") as f:
        f.write("garbage\n")
    for given in (run_folder, traces):
        _, line = _error("show", str(given))
        assert line == (f"Error: {traces}: line 3 is not a rollkit trace (Invalid JSON: expected value at line 1 "
                        f"column 1); the file is damaged there: fix or delete line 3 of {traces} and run the command again")


def test_python_callers_still_get_the_python_advice(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"not": "a trace"}) + "\n")
    with pytest.raises(rk.TraceFileError) as caught:
        rk.load(path)
    assert str(caught.value).endswith("; load with errors='skip' to read the good lines")
    assert caught.value.reason == str(caught.value).removesuffix("; load with errors='skip' to read the good lines")


def test_rollkit_deprecations_lists_each_old_spelling_with_the_version_that_removes_it(monkeypatch):
    """The deprecation policy: none in 0.1.0 (never-released spellings are
    changed, not deprecated); one registered shows with its replacement and
    removal version; one without a version is refused."""
    from click.testing import CliRunner

    from rollkit.core import deprecation
    from rollkit.cli import cli

    none = CliRunner().invoke(cli, ["deprecations"])
    assert none.exit_code == 0 and none.output == f"rollkit {rk.__version__} deprecates nothing.\n"
    monkeypatch.setattr(deprecation, "_REGISTERED", {})
    old = deprecation.deprecate("ro.astep()", "ro.step_async()", removed_in="0.3.0")
    listed = CliRunner().invoke(cli, ["deprecations"])
    assert listed.output == "ro.astep()  ->  ro.step_async()  (removed in 0.3.0)\n"
    with pytest.warns(DeprecationWarning, match=r"^ro\.astep\(\) is deprecated and goes in rollkit 0\.3\.0: write ro\.step_async\(\)$"):
        old.warn()
    with pytest.raises(ValueError, match="names the version that removes it"):
        deprecation.deprecate("x", "y", removed_in="next release")


# --- issue 54: the command line is complete --------------------------------

def _commands() -> list[str]:
    return sorted(cli.commands)


def test_the_summary_of_rollkit_help_names_every_command() -> None:
    done = CliRunner().invoke(cli, ["--help"])
    assert done.exit_code == 0
    summary = done.output.split("Options:", 1)[0]
    assert set(_commands()) >= {"compare", "demo", "deprecations", "eval", "show", "sql", "view"}
    assert [name for name in _commands() if f"rollkit {name}" not in summary] == []


@pytest.mark.parametrize("command", _commands())  # a command added later is checked too
def test_the_help_of_each_command_has_an_example(command: str) -> None:
    done = CliRunner().invoke(cli, [command, "--help"])
    assert done.exit_code == 0
    example = done.output.split("Example:", 1)
    assert len(example) == 2, f"rollkit {command} --help has no example"
    assert example[1].strip().splitlines()[0].strip().startswith(f"rollkit {command}")


@pytest.mark.parametrize("args, name", [
    (["show", "{missing}"], "DIR"),
    (["compare", "{missing}", "{here}"], "DIR_A"),
    (["compare", "{here}", "{missing}"], "DIR_B"),
    (["sql", "{missing}", "select 1"], "RUN"),
])
def test_a_path_that_does_not_exist_is_named_with_exit_status_2(tmp_path: Path, args: list[str], name: str) -> None:
    missing = tmp_path / "runs" / "typo"  # its parent does not exist either
    argv = [a.format(missing=missing, here=tmp_path) for a in args]
    code, line = _error(*argv)
    assert code == 2
    assert line.startswith(f"Error: {name} {missing} does not exist (nor does its folder {missing.parent}); ")
    (tmp_path / "runs").mkdir()  # the parent exists now: the message no longer mentions it
    code, line = _error(*argv)
    assert code == 2 and line.startswith(f"Error: {name} {missing} does not exist; ")


def test_view_export_into_a_folder_whose_parent_does_not_exist_is_an_error(tmp_path: Path, run_folder: Path) -> None:
    """An output path is made, but only its last folder: a mistyped parent is named, exit 2, nothing written."""
    pytest.importorskip("voila")
    run = run_folder
    out = tmp_path / "shar" / "a"
    code, line = _error("view", str(run), "--export", str(out))
    assert code == 2
    assert line == (f"Error: Invalid value for --export: the folder {out.parent} that would hold {out} does not exist; "
                    "make it first, or export into a folder that exists")
    assert not out.parent.exists()
    missing = tmp_path / "runs" / "typo"  # the runs to export must be there: waiting is only for the live page
    code, line = _error("view", str(missing), "--export", str(tmp_path / "out"))
    assert code == 2
    assert line == (f"Error: DIR {missing} does not exist (nor does its folder {missing.parent}); "
                    "--export writes runs that are there")


def test_view_of_a_folder_whose_parent_does_not_exist_is_an_error(tmp_path: Path) -> None:
    pytest.importorskip("voila")
    missing = tmp_path / "nowhere" / "run"
    code, line = _error("view", str(missing))
    assert code == 2
    assert line.startswith(f"Error: {missing} does not exist, and neither does its folder {missing.parent}; ")


def test_view_of_a_folder_about_to_be_made_says_it_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run may be about to start there: the command goes on to serve the
    page (stood in for here: no server) after saying plainly that it waits."""
    pytest.importorskip("voila")
    from rollkit import cli as cli_module

    served = []
    monkeypatch.setattr(cli_module, "_serve", lambda notebook, home, port: served.append(notebook.read_text()))
    soon = tmp_path / "soon"
    done = CliRunner().invoke(cli, ["view", str(soon)])
    assert done.exit_code == 0, done.output
    assert f"{soon} does not exist (yet): the page waits for a run to start there (rollkit eval ... --out {soon})" in done.stderr
    assert len(served) == 1 and str(soon) in served[0]


def test_the_page_of_a_missing_folder_says_it_waits(tmp_path: Path) -> None:
    """What the page's status line says of the same folder."""
    from rollkit.runs.live import FolderFollower

    soon = tmp_path / "soon"
    follower = FolderFollower(soon)
    follower.poll()
    assert follower.state.messages == [f"no run folder at {soon} (yet): waiting for it; start the run with --out {soon}"]
