"""The `rollkit` command line, run as a real subprocess (`python -m rollkit`):
demo, eval (with resume), show, --help, and each mistake's message."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.evaluate_helpers import HERE, BrokenSetup, said_agent, said_tasks

import rollkit as rk
from rollkit.runs.evaluation import best_of_n


def rollkit_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "rollkit", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def test_demo_runs_the_example_set_with_progress_and_summary(tmp_path):
    done = rollkit_cli("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rollouts: 24 over 12 tasks" in done.stdout
    assert "ok           24" in done.stdout
    # The toy is wrong on subtraction: a third of the problems.
    assert re.search(r"^reward +0\.667 +\[0\.463, 0\.870\] +24 / 24$", done.stdout, re.M), done.stdout
    assert "24/24" in done.stderr and "reward=0.667" in done.stderr  # the tqdm bar
    assert list(tmp_path.iterdir()) == []  # no run folder unless asked


def test_eval_writes_a_run_folder_and_show_summarizes_it(tmp_path):
    out = tmp_path / "run"
    done = rollkit_cli("eval", "helpers.evaluate_helpers:TASKS", "-m", "echo", "-n", "2", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "rollouts: 8 over 4 tasks" in done.stdout
    traces = rk.load(out)
    assert sorted(t.info["rollout_id"] for t in traces) == sorted(f"cli-{i}#{r}" for i in range(4) for r in range(2))
    # echo says back "say N", so every task is right.
    assert all(t.reward == 1.0 for t in traces)
    assert json.loads((out / "manifest.json").read_text())["agent"]["model"] == "echo"

    shown = rollkit_cli("show", str(out))
    assert shown.returncode == 0, shown.stderr
    assert "model echo, harness chat, 4 tasks x 2 repeats" in shown.stdout
    assert re.search(r"^reward +1\.000 +\[1\.000, 1\.000\] +8 / 8$", shown.stdout, re.M), shown.stdout
    assert "phase" in shown.stdout and "scoring" in shown.stdout


def test_eval_resume_runs_only_what_is_missing(tmp_path):
    out = tmp_path / "run"
    first = rollkit_cli("eval", "helpers.evaluate_helpers:make_tasks", "-m", "echo", "--out", str(out), "--no-progress")
    assert first.returncode == 0, first.stderr
    again = rollkit_cli("eval", "helpers.evaluate_helpers:make_tasks", "-m", "echo", "--out", str(out), "--no-progress")
    assert again.returncode == 1
    assert "already holds a run" in again.stderr and "--resume" in again.stderr
    more = rollkit_cli("eval", "helpers.evaluate_helpers:make_tasks", "-m", "echo", "-n", "2", "--out", str(out), "--resume", "--no-progress")
    assert more.returncode == 0, more.stderr
    ids = [t.info["rollout_id"] for t in rk.load(out)]
    assert ids[:3] == ["made-0#0", "made-1#0", "made-2#0"]
    assert sorted(ids[3:]) == ["made-0#1", "made-1#1", "made-2#1"]


def test_show_reports_failures_by_error_type_and_missing_rewards(tmp_path):
    rk.evaluate(said_agent(), [*said_tasks(3), BrokenSetup(id="broken", prompt="say 4")], out=tmp_path, progress=False)
    shown = rollkit_cli("show", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "failed: TaskError       1" in shown.stdout
    assert "ok                      3" in shown.stdout
    # the mean of 1, 1, 0 with its 95% t interval; the failed one counted as missing
    assert re.search(r"^reward +0\.667 +\[-0\.768, 2\.101\] +3 / 4$", shown.stdout, re.M), shown.stdout


def test_help_explains_every_command():
    done = rollkit_cli("--help")
    assert done.returncode == 0
    for command in ("demo", "eval", "show"):
        assert command in done.stdout
    helped = rollkit_cli("eval", "--help")
    assert "MODULE:TASKS" in helped.stdout and "--resume" in helped.stdout and "openai/NAME" in helped.stdout


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:TASKS", "cannot import module 'no_such_module_xyz' (for task set 'no_such_module_xyz:TASKS'): ModuleNotFoundError"),
        ("helpers.evaluate_helpers:MISSING", "module 'helpers.evaluate_helpers' has no attribute 'MISSING' (for task set 'helpers.evaluate_helpers:MISSING')"),
        ("helpers.evaluate_helpers:EMPTY", "task set helpers.evaluate_helpers:EMPTY (module 'helpers.evaluate_helpers', attribute 'EMPTY') is empty"),
        ("helpers.evaluate_helpers:NOT_TASKS", "helpers.evaluate_helpers:NOT_TASKS[0] is an int, not an rk.Task"),
        ("helpers.evaluate_helpers", "'helpers.evaluate_helpers' is not MODULE:ATTRIBUTE"),
    ],
)
def test_eval_names_the_module_and_attribute_of_a_bad_task_set(spec, message):
    done = rollkit_cli("eval", spec, "-m", "echo", "--no-progress")
    assert done.returncode in (1, 2)
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_eval_unknown_model_and_bad_numbers_are_clear_errors(tmp_path):
    done = rollkit_cli("eval", "helpers.evaluate_helpers:TASKS", "-m", "gpt-nonsense", "--no-progress")
    assert done.returncode == 2
    assert "Error: Invalid value for --model: unknown model 'gpt-nonsense'; use one of: echo, " in done.stderr
    zero = rollkit_cli("eval", "helpers.evaluate_helpers:TASKS", "-m", "echo", "-c", "0", "--no-progress")
    assert zero.returncode == 1 and "concurrency must be a whole number >= 1" in zero.stderr
    none = rollkit_cli("eval", "helpers.evaluate_helpers:TASKS", "-m", "echo", "-n", "0", "--no-progress")
    assert none.returncode == 1 and "repeats must be a whole number >= 1" in none.stderr
    resume = rollkit_cli("eval", "helpers.evaluate_helpers:TASKS", "-m", "echo", "--resume")
    assert resume.returncode == 2 and "--resume needs --out DIR" in resume.stderr


def test_show_of_a_missing_or_corrupt_folder_is_a_clear_error(tmp_path):
    missing = rollkit_cli("show", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and f"Error: DIR {tmp_path / 'nothing'} does not exist; pass the --out" in missing.stderr
    rk.evaluate(said_agent(), said_tasks(3), out=tmp_path, progress=False)
    path = tmp_path / "traces.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "garbage\n" + lines[2])
    corrupt = rollkit_cli("show", str(tmp_path))
    assert corrupt.returncode == 1 and "line 2 is not a rollkit trace" in corrupt.stderr
    assert "Traceback" not in corrupt.stderr


def test_import_rollkit_loads_no_cli_progress_table_or_ray_library():
    code = (
        "import sys, rollkit as rk; rk.evaluate; import rollkit.runs.evaluation; "
        "print(sorted(m for m in ('pandas', 'tqdm', 'ray', 'click', 'typer') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_show_says_when_a_run_is_incomplete(tmp_path):
    rk.evaluate(said_agent(), said_tasks(3), repeats=2, out=tmp_path, progress=False)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:4]))
    shown = rollkit_cli("show", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "incomplete: 4 of 6 rollouts finished (continue with --resume)" in shown.stdout
    assert "rollouts: 4 over" in shown.stdout


def test_ctrl_c_keeps_finished_traces_and_resume_finishes_the_run(tmp_path):
    out = tmp_path / "run"
    env = {
        **os.environ,
        "ROLLKIT_TEST_GATE": "block",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "rollkit", "eval", "helpers.evaluate_helpers:GATED", "-m", "echo", "-c", "2",
               "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        blocked = 0
        while blocked < 2:  # both workers hold a task whose setup never ends
            line = proc.stdout.readline()
            assert line, f"rollkit eval ended early: {proc.stderr.read()}"
            blocked += line.startswith("blocked ")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert f"interrupted; the finished traces are in {out}, continue with --resume" in stderr
    assert sorted(t.info["rollout_id"] for t in rk.load(out)) == ["gated-0#0", "gated-1#0", "gated-3#0", "gated-4#0"]

    resumed = rollkit_cli("eval", "helpers.evaluate_helpers:GATED", "-m", "echo", "-c", "2", "--out", str(out), "--resume", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(t.info["rollout_id"] for t in rk.load(out)) == [f"gated-{i}#0" for i in range(6)]


def test_show_of_a_damaged_manifest_or_groups_file_names_the_file(tmp_path):
    rk.evaluate(said_agent(), said_tasks(2), out=tmp_path, progress=False, group_scorers=[best_of_n()])
    groups = tmp_path / "groups.jsonl"
    lines = groups.read_text().splitlines(keepends=True)
    groups.write_text("garbage\n" + "".join(lines))  # a bad line in the middle
    bad_groups = rollkit_cli("show", str(tmp_path))
    assert bad_groups.returncode == 1
    assert bad_groups.stderr.startswith(f"Error: {groups}: line 1 is not a group signal")
    assert "Traceback" not in bad_groups.stderr
    groups.write_text("".join(lines))
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"run_id": "cut short')
    bad_manifest = rollkit_cli("show", str(tmp_path))
    assert bad_manifest.returncode == 1
    assert bad_manifest.stderr.startswith(f"Error: {manifest} is not valid JSON")
    assert "Traceback" not in bad_manifest.stderr
    manifest.write_text("[1, 2]")
    not_a_manifest = rollkit_cli("show", str(tmp_path))
    assert not_a_manifest.returncode == 1
    assert f"Error: {manifest} holds a JSON list, not a rollkit manifest" in not_a_manifest.stderr


def test_eval_resume_of_a_new_folder_says_it_starts_a_new_run(tmp_path):
    out = tmp_path / "fresh"
    done = rollkit_cli("eval", "helpers.evaluate_helpers:make_tasks", "-m", "echo", "--out", str(out), "--resume", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert f"nothing to resume in {out}: starting a new run" in done.stderr
    assert sorted(t.info["rollout_id"] for t in rk.load(out)) == ["made-0#0", "made-1#0", "made-2#0"]


def test_eval_keeps_the_traceback_of_a_bug_rather_than_calling_it_bad_input(monkeypatch):
    # A TypeError from inside rollkit is a bug, not the user's mistake: it must
    # not shrink to a one-line "Error:" that hides where it came from.
    from click.testing import CliRunner

    import rollkit.runs.evaluation
    from rollkit.cli import cli

    def buggy(*args, **kwargs):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(rollkit.runs.evaluation, "evaluate", buggy)
    done = CliRunner().invoke(cli, ["eval", "helpers.evaluate_helpers:TASKS", "-m", "echo", "--no-progress"])
    assert isinstance(done.exception, TypeError)
    assert "Error:" not in done.output


# --- issue 54: what rk.evaluate takes that a shell user needs ---------------

def test_eval_takes_a_price_a_dollar_limit_and_a_token_limit(tmp_path):
    """--price gives the model a price (dollars per million tokens),
    --max-cost-usd stops each rollout cleanly past it, and both land where
    rk.evaluate's would: the traces' cost and stop, the manifest's limits."""
    out = tmp_path / "priced"
    done = rollkit_cli("eval", "rollkit.examples:arithmetic_tasks", "-m", "toy-calculator", "--price", "2.5,10,1.25",
                       "--max-cost-usd", "0.00005", "--agent-timeout", "30", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    traces = rk.load(out / "traces.jsonl")
    assert {t.stop_condition for t in traces} == {"max_cost_usd"}
    call = traces[0].model_calls[0]
    assert call.cost_usd == pytest.approx((call.usage.input_tokens * 2.5 + call.usage.output_tokens * 10) / 1e6)
    agent = json.loads((out / "manifest.json").read_text())["agent"]
    assert agent["limits"]["max_cost_usd"] == 0.00005 and agent["timeouts"]["agent"] == 30
    tokens = rollkit_cli("eval", "rollkit.examples:arithmetic_tasks", "-m", "toy-calculator", "--max-total-tokens", "3",
                         "--out", str(tmp_path / "tokens"), "--no-progress")
    assert tokens.returncode == 0, tokens.stderr
    assert {t.stop_condition for t in rk.load(tmp_path / "tokens" / "traces.jsonl")} == {"max_total_tokens"}


def test_eval_refuses_a_dollar_limit_over_a_model_without_a_price_before_running(tmp_path):
    done = rollkit_cli("eval", "rollkit.examples:arithmetic_tasks", "-m", "toy-calculator", "--max-cost-usd", "0.5",
                       "--out", str(tmp_path / "run"), "--no-progress")
    assert done.returncode == 2
    assert ("Error: Invalid value for --max-cost-usd: a dollar limit needs a price for model 'toy-calculator', "
            "and it has none; give one with --price INPUT,OUTPUT") in done.stderr
    assert not (tmp_path / "run").exists()  # nothing ran
    bad = rollkit_cli("eval", "rollkit.examples:arithmetic_tasks", "-m", "toy-calculator", "--price", "2.5")
    assert bad.returncode == 2 and "Invalid value for --price: '2.5' is not a price" in bad.stderr


def _capped_run(tmp_path: Path, cap: str) -> list[rk.Trace]:
    # The toy's first reply is 7 output tokens ($0.014 at $2000 per million),
    # so a second call's worst case (10 output tokens, $0.02) could cross $0.02.
    out = tmp_path / cap
    done = rollkit_cli("eval", "rollkit.examples:arithmetic_tasks", "-m", "toy-calculator", "--price", "1,2000",
                       "--max-tokens", "10", "--max-cost-usd", "0.02", "--cost-cap", cap, "--out", str(out),
                       "--no-progress")
    assert done.returncode == 0, done.stderr
    return rk.load(out / "traces.jsonl")


def test_L12_eval_takes_the_hard_cost_cap_and_an_output_limit_as_rk_evaluate_does(tmp_path):
    """--cost-cap hard with --max-tokens refuses the call whose worst case
    could cross --max-cost-usd; soft (the default) lets it run and cross."""
    soft, hard = _capped_run(tmp_path, "soft"), _capped_run(tmp_path, "hard")
    assert {t.stop_condition for t in soft} == {None} and max(t.cost_usd for t in soft) > 0.02
    assert {t.stop_condition for t in hard} == {"max_cost_usd"} and max(t.cost_usd for t in hard) <= 0.02
    assert [len(t.model_calls) for t in hard] == [1] * len(hard)
    assert hard[0].warnings[0].startswith("max_cost_usd (hard cap): a call was refused: it could cost up to $0.0200 "
                                          "(10 output tokens after a prompt of about ")
    agent = json.loads((tmp_path / "hard" / "manifest.json").read_text())["agent"]
    assert agent["limits"]["cost_cap"] == "hard" and agent["limits"]["max_cost_usd"] == 0.02
    assert "cost_cap" not in json.loads((tmp_path / "soft" / "manifest.json").read_text())["agent"]["limits"]


@pytest.mark.parametrize(("args", "says"), [
    (["--cost-cap", "hard"], "Invalid value for --cost-cap: --cost-cap hard needs --max-cost-usd DOLLARS, the limit "
                             "it holds"),
    (["--cost-cap", "soft"], "Invalid value for --cost-cap: --cost-cap soft needs --max-cost-usd DOLLARS"),
    (["--price", "1,2", "--max-cost-usd", "1", "--cost-cap", "hard"],
     "Invalid value for --cost-cap: a hard cap needs the most output tokens a call of model 'toy-calculator' may "
     "produce, and it is unknown; give it with --max-tokens N"),
    (["--cost-cap", "firm"], "Invalid value for '--cost-cap': 'firm' is not one of 'soft', 'hard'."),
    (["--max-tokens", "0"], "Invalid value for '--max-tokens': 0 is not in the range x>=1."),
])
def test_eval_refuses_a_bad_cost_cap_or_output_limit_naming_the_flag(tmp_path, args, says):
    done = rollkit_cli("eval", "rollkit.examples:arithmetic_tasks", "-m", "toy-calculator", *args,
                       "--out", str(tmp_path / "run"), "--no-progress")
    assert done.returncode == 2
    assert says in done.stderr.replace("\n", " ")
    assert not (tmp_path / "run").exists()  # refused before any rollout


async def test_eval_sends_max_tokens_to_an_openai_compatible_model(monkeypatch):
    from helpers.fake_provider import FakeProvider

    fake = await FakeProvider().start()
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_API_KEY", "none")
        done = await asyncio.to_thread(
            rollkit_cli, "eval", "helpers.evaluate_helpers:TASKS", "-m", "openai/gpt-4o-mini", "--price", "1,2",
            "--max-cost-usd", "1", "--cost-cap", "hard", "--max-tokens", "64", "--max-turns", "1", "--no-progress")
    finally:
        await fake.stop()
    assert done.returncode == 0, done.stderr
    assert fake.requests and {body["max_tokens"] for body in fake.requests} == {64}


class _Collector:
    """An OTLP/HTTP trace collector on 127.0.0.1 that keeps each body it is sent."""

    def __init__(self) -> None:
        import http.server
        import threading

        bodies = self.bodies = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                bodies.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def test_eval_sends_spans_out_with_otel(tmp_path):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    collector = _Collector()
    try:
        done = rollkit_cli("eval", "rollkit.examples:arithmetic_tasks", "-m", "toy-calculator", "-c", "1",
                           "--otel", collector.url, "--no-progress")
    finally:
        collector.close()
    assert done.returncode == 0, done.stderr
    names = []
    for path, body in collector.bodies:
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest.FromString(body)
        names += [span.name for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
    from rollkit.examples import arithmetic_tasks

    assert sum(name.startswith("invoke_agent ") for name in names) == len(arithmetic_tasks())
    assert any(name.startswith("chat ") for name in names)
