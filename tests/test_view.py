"""`rollkit view DIR` in a real browser: the command serves the run monitor
with Voila on 127.0.0.1 while another process writes the run folder;
headless Chromium (Debian's, driven by Playwright, as tests/test_browser.py)
sees the rollouts in flight, the done count grow as the test lets rollouts
finish, opens a finished rollout and reads its transcript (escaped), and
sees the run finish.

The run is a real `rk.evaluate` subprocess whose model answers task N only
once the file gate/N exists, so the test decides when each rollout ends and
waits on what the page shows, never on time. See test_browser.py for the
traps this follows (local requests only, one generous expect budget).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from evaluate_helpers import HERE
from test_browser import CHROMIUM, _page

playwright_sync = pytest.importorskip("playwright.sync_api")
pytest.importorskip("voila")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
]

RUNNER = """
import asyncio, sys
from pathlib import Path

import rollkit as rk
from evaluate_helpers import said_tasks

out, gate = Path(sys.argv[1]), Path(sys.argv[2])

async def gated(request):
    n = int(next(m.content for m in request.messages if m.role == "user").split()[-1])
    while not (gate / str(n)).exists():
        await asyncio.sleep(0.02)
    return f"I say {n} <b>loud</b>"

rk.evaluate(rk.Agent(model=rk.ScriptedModel(gated), limits=rk.RolloutLimits(max_turns=4)), said_tasks(6),
            concurrency=2, out=out, progress=False)
"""


@dataclass
class _Served:
    """What test_browser's _page needs of a server: its URL and its log."""

    url: str
    log: list[str]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1"}


def _url(proc: subprocess.Popen[str], timeout: float) -> str:
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    line = lines.get(timeout=timeout)
    assert line is not None and line.startswith("rollkit view: http://127.0.0.1:"), line
    return line.split()[2]


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def test_view_follows_a_run_as_it_is_written_and_opens_a_finished_rollout(tmp_path: Path) -> None:
    expect = playwright_sync.expect
    out, gate = tmp_path / "run", tmp_path / "gate"
    gate.mkdir()
    env = {**_env(), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(out), str(gate)], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    viewer = subprocess.Popen([sys.executable, "-m", "rollkit", "view", str(out), "--poll", "0.2"], env=env,
                              start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    viewer_log: list[str] = []
    try:
        url = _url(viewer, timeout=120)
        with _page(_Served(url, viewer_log), tmp_path, "view") as page:
            counts = page.locator(".rk-monitor-counts .rk-counts")
            # two rollouts in flight, each waiting on its model; none done
            expect(counts).to_have_attribute("data-inflight", "2")
            expect(counts).to_have_attribute("data-done", "0")
            expect(page.locator(".rk-monitor-lanes")).to_contain_text("said-0#0")
            expect(page.locator(".rk-monitor-lanes")).to_contain_text("agent")
            for n in (0, 1, 2):
                (gate / str(n)).touch()
            expect(counts).to_have_attribute("data-done", "3")
            expect(page.locator(".rk-monitor-signals")).to_contain_text("3 / 3")
            option = page.locator(".rk-monitor-picks select option", has_text="said-1#0")
            expect(option).to_have_count(1)
            page.locator(".rk-monitor-picks select").select_option(label=option.text_content())
            detail = page.locator(".rk-monitor-detail")
            expect(detail.locator(".rk-assistant")).to_contain_text("I say 1 <b>loud</b>")
            expect(detail.locator(".rk-user")).to_contain_text("say 1")
            expect(detail.locator(".rk-assistant b", has_text="loud")).to_have_count(0)  # escaped
            for n in (3, 4, 5):
                (gate / str(n)).touch()
            expect(counts).to_have_attribute("data-done", "6")
            expect(counts).to_have_attribute("data-status", "finished")
            expect(counts).to_have_attribute("data-inflight", "0")
        assert runner.wait(timeout=60) == 0, runner.stderr.read() if runner.stderr else ""
        os.kill(viewer.pid, signal.SIGTERM)  # the command stops Voila and its kernels, then exits
        assert viewer.wait(timeout=60) == 0, viewer.stderr.read() if viewer.stderr else ""
    finally:
        for n in range(6):
            (gate / str(n)).touch()
        _stop(runner)
        _stop(viewer)


def test_view_refuses_a_file_it_cannot_show_early(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x\n")
    (tmp_path / "empty.jsonl").write_text("")
    for name, why in (("notes.txt", "is neither a run folder nor a trace file rollkit reads (" + str(tmp_path / "notes.txt")
                       + ": line 1 is not a rollkit trace"), ("empty.jsonl", "holds no traces")):
        done = subprocess.run([sys.executable, "-m", "rollkit", "view", str(tmp_path / name)], env=_env(),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1
        assert f"Error: {tmp_path / name} {why}" in done.stderr
        assert ("pass the --out folder of rollkit eval, or a trace file in one of the formats rk.load reads "
                "(rollkit, inspect, trajectory, tau2, verifiers, messages)") in done.stderr
