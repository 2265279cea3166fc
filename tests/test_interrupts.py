"""Interrupting a real run from outside: Ctrl-C (once or twice), SIGTERM,
SIGINT sent to a run a script started in the background (which inherits
SIGINT as ignored), and SIGKILL. Each run is `python helpers/evaluate_helpers.py`
in its own process, its rollouts real programs (tests/programs/plain.py)
that each leave a grandchild behind; after each interruption no program, no
grandchild and no working folder may remain, every finished trace is kept,
and a resume completes the run with exactly one trace per (task, repeat)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.evaluate_helpers import ToolSaid, gated_program_agent, said_tasks, sigkill, start_gated, wait_blocked
from helpers.fault_report import report

import rollkit as rk

from helpers.processes import exited, processes_marked

pytestmark = pytest.mark.faults  # part of the fault suite (tests/test_faults.py)

ALL_12 = Counter(f"said-{i}#{r}" for i in range(6) for r in range(2))
FINISHED_BEFORE_BLOCK = sorted(f"said-{i}#{r}" for i in (0, 1, 3, 4) for r in range(2))


def _rollout_ids(folder: Path) -> list[str]:
    return [json.loads(line)["info"]["rollout_id"] for line in (folder / "traces.jsonl").read_text().splitlines()]


def _leftover_folders(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("rollkit-"))


@pytest.fixture
def marked(tmp_path):
    """A marker for this test's grandchildren, a TMPDIR for its runs'
    working folders, and whatever still carries the marker killed at the end
    (so a failing test leaves nothing behind either)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker = f"rollkit-interrupt-{os.getpid()}-{tmp_path.name}"
    yield marker, tmp
    for pid in processes_marked(marker):
        os.kill(pid, signal.SIGKILL)


def _programs(marker: str, run: subprocess.Popen[str]) -> list[int]:
    """The programs and grandchildren of `run` (its own argv carries the marker too)."""
    return [pid for pid in processes_marked(marker) if pid != run.pid]


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str, float]:
    """Wait for the run to exit by itself (bounded: a hang fails the test)."""
    start = time.monotonic()
    try:
        stdout, stderr = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"the run did not exit within 90 s of the interruption; stderr:\n{stderr[-3000:]}")
    return stdout, stderr, time.monotonic() - start


def _read_until(proc: subprocess.Popen[str], text: str) -> str:
    """Read the run's stderr up to `text`; what was read. Straight from the
    pipe, so nothing sits in a buffer that `communicate` would not see."""
    seen = b""
    while text.encode() not in seen:
        chunk = os.read(proc.stderr.fileno(), 65536)  # type: ignore[union-attr]
        if not chunk:
            pytest.fail(f"the run ended without printing {text!r}: {seen.decode()}")
        seen += chunk
    return seen.decode()


def _resume(out: Path, marker: str) -> rk.runs.EvalResult:
    return rk.evaluate(gated_program_agent(marker), said_tasks(6, kind=ToolSaid), repeats=2, concurrency=4, out=out,
                       resume=True, progress=False)


@pytest.mark.parametrize("presses", [1, 2], ids=["once", "twice"])
def test_ctrl_c_of_a_program_run_leaves_no_program_no_folder_and_resume_completes(tmp_path, marked, presses):
    """Before the fix Ctrl-C cancelled the workers twice, which cut their
    rollouts' aborts short: programs and folders outlived the run."""
    marker, tmp = marked
    out = tmp_path / "run"
    proc = start_gated("run-programs", out, marker, env={"TMPDIR": str(tmp), "ROLLKIT_TEST_HOLD_CLEANUP": str(int(presses == 2))})
    wait_blocked(proc)
    assert len(_programs(marker, proc)) == 8  # four programs in flight, each with its grandchild
    proc.send_signal(signal.SIGINT)
    if presses == 2:
        # The second press once the first is seen: two sent back to back
        # can reach the run as one. The cleanup waits for it (HeldRuntime).
        early = _read_until(proc, "SIGINT: stopping the evaluation")
        proc.send_signal(signal.SIGINT)
    stdout, stderr, took = _finish(proc)
    stderr = early + stderr if presses == 2 else stderr
    report(f"Ctrl-C x{presses} of a program run: exited {took:.2f} s after the interruption")
    assert proc.returncode == 3, stderr
    assert stdout.splitlines()[-1] == "interrupted"
    assert "SIGINT: stopping the evaluation" in stderr
    if presses == 2:
        assert "SIGINT again: killed" in stderr
    assert processes_marked(marker) == []
    assert _leftover_folders(tmp) == []
    assert sorted(_rollout_ids(out)) == FINISHED_BEFORE_BLOCK

    result = _resume(out, marker)
    assert Counter(_rollout_ids(out)) == ALL_12 and len(result) == 12
    assert processes_marked(marker) == []


def test_sigint_stops_a_run_that_a_script_started_in_the_background(tmp_path, marked):
    """A non-interactive shell starts `cmd &` with SIGINT ignored; asyncio
    then installs no handler and such a run ignored Ctrl-C forever."""
    marker, tmp = marked
    out = tmp_path / "run"
    proc = start_gated("run-programs", out, marker, env={"TMPDIR": str(tmp)}, shell_job=True)
    wait_blocked(proc)
    run_pid = int(Path(f"{out}.pid").read_text())
    # What the run inherited (it handles SIGINT itself by now): a sibling job
    # of the same shell form shows it.
    sibling = subprocess.run(["sh", "-c", "grep SigIgn /proc/self/status & wait"], capture_output=True, text=True)
    assert int(sibling.stdout.split()[1], 16) & (1 << (signal.SIGINT - 1))
    os.kill(run_pid, signal.SIGINT)
    stdout, stderr, took = _finish(proc)
    report(f"SIGINT to a background job (SIGINT inherited ignored): exited {took:.2f} s after it")
    assert proc.returncode == 3, stderr  # the shell passes the run's status on
    assert stdout.splitlines()[-1] == "interrupted"
    assert processes_marked(marker) == [] and _leftover_folders(tmp) == []
    Path(f"{out}.pid").unlink()


def test_sigterm_aborts_like_ctrl_c_and_exits_143(tmp_path, marked):
    marker, tmp = marked
    out = tmp_path / "run"
    proc = start_gated("run-programs", out, marker, env={"TMPDIR": str(tmp)})
    wait_blocked(proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr, _ = _finish(proc)
    assert proc.returncode == 143, stderr
    assert "SIGTERM: stopping the evaluation" in stderr
    assert len([line for line in stdout.splitlines() if line.startswith("aborted ")]) == 4
    assert processes_marked(marker) == [] and _leftover_folders(tmp) == []
    assert sorted(_rollout_ids(out)) == FINISHED_BEFORE_BLOCK


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    found = []
    for task in tasks.iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


async def test_sigkill_of_a_run_leaves_no_program_and_no_folder_and_resume_finds_no_strays(tmp_path, marked):
    """Before the watchdog, every program of a run killed with SIGKILL kept
    running (own process group, nothing tied to the parent)."""
    marker, tmp = marked
    out = tmp_path / "run"
    proc = start_gated("run-programs", out, marker, env={"TMPDIR": str(tmp)})
    try:
        wait_blocked(proc)
        alive = _programs(marker, proc)
        assert len(alive) == 8 and len(_leftover_folders(tmp)) == 4
        watchdogs = [c for c in _children(proc.pid) if b"_watchdog_main.py" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(watchdogs) == 1
    finally:
        assert sigkill(proc) == -signal.SIGKILL
    for pid in alive:
        assert await exited(pid), f"program {pid} outlived the run"
    assert await exited(watchdogs[0])  # it exits once it has cleaned up
    assert _leftover_folders(tmp) == []
    assert sorted(_rollout_ids(out)) == FINISHED_BEFORE_BLOCK

    result = await rk.evaluate_async(gated_program_agent(marker), said_tasks(6, kind=ToolSaid), repeats=2, concurrency=4, out=out,
                               resume=True, progress=False)
    assert Counter(_rollout_ids(out)) == ALL_12 and len(result) == 12
    assert processes_marked(marker) == []


_DISPOSITIONS_SCRIPT = """
import json, signal, sys

def dispositions():
    out = {}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        out[int(sig)] = repr(handler)
    return out

before = dispositions()
import rollkit as rk
import rollkit.runs.interrupts, rollkit.runs.evaluation, rollkit.cli  # what rk.evaluate and the CLI load
after = dispositions()
print(json.dumps({"changed": {str(s): [before[s], after[s]] for s in before if before[s] != after[s]},
                  "sigint": before[int(signal.SIGINT)]}))
"""


@pytest.mark.parametrize("sigint", ["inherited as ignored", "default"])
def test_import_rollkit_installs_no_signal_handler(sigint):
    """Issue 31, item 5. Before: `import rollkit` replaced an inherited-ignored
    SIGINT with a handler that noted it, so `rollkit view` (which checked for
    SIG_IGN after the import) could not be stopped with SIGINT as a `&` job."""
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint != "default" else None
    done = subprocess.run([sys.executable, "-c", _DISPOSITIONS_SCRIPT], capture_output=True, text=True, timeout=120,
                          preexec_fn=ignore)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["sigint"] == ("<Handlers.SIG_IGN: 1>" if ignore else "<built-in function default_int_handler>")
    assert result["changed"] == {}


_SCRIPT_IGNORING_SIGINT = """
import sys
import rollkit as rk
print("imported", flush=True)
sys.stdin.readline()  # the test sends SIGINT before this line comes: the script ignores it, as it inherited
result = rk.evaluate(rk.Agent(model=rk.ScriptedModel(["hi"])), [rk.Task(prompt="x")], progress=False)
print("finished", len(result), flush=True)
"""


def test_a_script_that_inherited_sigint_ignored_keeps_ignoring_it_outside_a_run():
    """Outside a run the process's dispositions are its own: a SIGINT that
    a script inherited as ignored is dropped before rk.evaluate, whose run
    then completes (during a run, SIGINT stops it whatever was inherited:
    test_sigint_stops_a_run_that_a_script_started_in_the_background)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT_IGNORING_SIGINT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout.readline() == "imported\n"  # type: ignore[union-attr]
    proc.send_signal(signal.SIGINT)
    stdout, stderr, _ = _finish_after(proc, "go\n")
    assert (proc.returncode, stdout) == (0, "finished 1\n"), stderr


def _finish_after(proc: subprocess.Popen[str], line: str) -> tuple[str, str, float]:
    proc.stdin.write(line)  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    proc.stdin.close()  # type: ignore[union-attr]
    proc.stdin = None
    return _finish(proc)
