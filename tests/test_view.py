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

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.evaluate_helpers import HERE
from helpers.fault_report import report
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
from helpers.evaluate_helpers import said_tasks

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
                "(rollkit, inspect, atif, trajectory, tau2, verifiers, verifiers-v1, messages)") in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", "line too costly to parse"])
def test_view_refuses_what_rk_load_refuses_before_it_serves(tmp_path: Path, kind: str) -> None:
    """Issue 31, item 4. Before: a FIFO or a link to /dev/zero was no regular
    file, so no trace file either, and the view served a "not a run folder
    (yet)" page for it."""
    import rollkit as rk

    path = tmp_path / "traces.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text('{"id": "x", "task": {"key": [' + "[]," * 4_000_000 + "[]]}}\n")
    with pytest.raises(rk.TraceFileError) as refused:
        rk.load(path)
    done = subprocess.run([sys.executable, "-m", "rollkit", "view", str(path)], env=_env(), capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert f"Error: {path} is neither a run folder nor a trace file rollkit reads ({refused.value.reason})" \
        in done.stderr, done.stderr
    assert "not a run folder (yet)" not in done.stderr


# ---- issue 23, item 6: a locked-down viewer -------------------------------------------------


def _view(folder: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rollkit", "view", str(folder), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**_env(), **(env or {})}, start_new_session=True)


def _get(port: int, path: str, host: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path, headers={"Host": host, **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace") if response.status != 101 else ""
    finally:
        conn.close()


def _websocket(port: int, path: str, host: str) -> int:
    return _get(port, path, host, {"Origin": f"http://{host}", "Connection": "Upgrade", "Upgrade": "websocket",
                                   "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})[0]


def _opened(tmp_path: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int, str, str]:
    """A view served and its page loaded once (so its kernel runs): the
    process, the port, the token and the kernel's id."""
    import re

    folder = tmp_path / "run"
    folder.mkdir()
    proc = _view(folder, env=env)
    url = _url(proc, 180)
    port, token = int(url.split(":")[2].split("/")[0]), url.split("?token=")[1]
    status, page = _get(port, f"/?token={token}", f"127.0.0.1:{port}")
    assert status == 200
    kernel = re.search(r'"kernelId": *"([0-9a-f-]+)"', page)
    assert kernel is not None
    return proc, port, token, kernel.group(1)


def test_view_url_carries_a_token_and_a_rebound_host_reaches_neither_page_nor_kernel(tmp_path: Path) -> None:
    """Before: no token, no Host check: a page whose name was rebound to
    127.0.0.1 (DNS rebinding) loaded the view and its kernel's websocket."""
    proc, port, token, kernel = _opened(tmp_path)
    try:
        assert len(token) >= 40
        assert _get(port, "/", f"127.0.0.1:{port}")[0] in (302, 403)  # no token: to the login page
        rebound = f"rebind.example:{port}"
        assert _get(port, f"/?token={token}", rebound)[0] == 403
        channels = f"/api/kernels/{kernel}/channels?token={token}"
        assert _websocket(port, channels, rebound) == 403
        assert _websocket(port, channels, f"127.0.0.1:{port}") == 101  # the page's own connection still works
    finally:
        _stop(proc)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL], ids=["SIGHUP", "SIGKILL"])
async def test_view_killed_by_any_signal_takes_voila_its_kernel_and_its_folder(tmp_path: Path, sig: int) -> None:
    """Before: SIGHUP or SIGKILL of the command left Voila and its kernel
    serving and its temporary folder behind."""
    from helpers.processes import exited

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc, port, _, _ = _opened(tmp_path, env={"TMPDIR": str(tmp)})
    try:
        children = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(proc.pid)], capture_output=True,
                                  text=True).stdout.splitlines()
        voila = [int(line.split()[0]) for line in children if " -m voila " in line]
        kernels = subprocess.run(["ps", "-o", "pid=", "--ppid", str(voila[0])], capture_output=True, text=True).stdout
        watchdogs = [int(line.split()[0]) for line in children if "_watchdog_main" in line]
        served = voila + [int(pid) for pid in kernels.split()]
        assert len(served) == 2 and len(watchdogs) == 1
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
        for pid in served + watchdogs:
            assert await exited(pid, guard=60), f"process {pid} outlived `rollkit view`"
        assert sorted(p.name for p in tmp.iterdir()) == []
    finally:
        _stop(proc)


def test_view_port_taken_is_an_error_naming_it(tmp_path: Path) -> None:
    """Before: Voila quietly took the next port and the URL printed was the
    taken port's, someone else's page."""
    import socket

    folder = tmp_path / "run"
    folder.mkdir()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "rollkit", "view", str(folder), "--port", str(port)],
                              capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (f"Error: --port {port}: 127.0.0.1:{port} is taken (Address already in use); "
                                            "choose another port, or leave --port out for a free one")


# ---- issue 31, item 5: a viewer that stops and keeps its token private ------------------------


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(parents.get(found[-1], []))
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
async def test_view_started_as_a_background_job_stops_on_a_signal_and_keeps_its_token_off_command_lines(
        tmp_path: Path, sig: int) -> None:
    """Before: `sh -c 'rollkit view RUN &'` ignored SIGINT (import rollkit
    had replaced the inherited SIG_IGN before the command looked for it),
    and the token was on Voila's command line, readable by any local user
    in /proc/PID/cmdline."""
    from helpers.processes import exited

    folder, tmp = tmp_path / "run", tmp_path / "tmp"
    folder.mkdir()
    tmp.mkdir()
    # A shell that is not interactive starts its `&` job with SIGINT and SIGQUIT ignored (POSIX; checked here).
    job = subprocess.run(["sh", "-c", "grep SigIgn: /proc/self/status & wait"], capture_output=True, text=True,
                         timeout=30)
    assert int(job.stdout.split()[1], 16) & (1 << (signal.SIGINT - 1)), job.stdout
    shell = subprocess.Popen(["sh", "-c", f'"$0" -m rollkit view "$1" & echo "$!"; wait', sys.executable, str(folder)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env={**_env(), "TMPDIR": str(tmp)}, start_new_session=True)
    try:
        assert shell.stdout is not None
        view = int(shell.stdout.readline())
        url = _url(shell, 180)
        token = url.split("?token=")[1]
        port = int(url.split(":")[2].split("/")[0])
        assert _get(port, f"/?token={token}", f"127.0.0.1:{port}")[0] == 200  # its kernel runs now
        processes = _tree(view)
        commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in processes}
        assert len(commands) == 4, commands  # the command, its watchdog, Voila, the page's kernel
        assert [pid for pid, line in commands.items() if token in line] == []
        voila = next(pid for pid, line in commands.items() if " -m voila " in line)
        settings = Path(os.readlink(f"/proc/{voila}/cwd")) / "voila.json"
        assert token in settings.read_text()
        assert (oct(settings.stat().st_mode & 0o777), oct(settings.parent.stat().st_mode & 0o777)) == ("0o600", "0o700")
        os.kill(view, sig)
        stopped = await asyncio.gather(*(exited(pid, guard=2.0) for pid in processes))
        assert dict(zip(processes, stopped)) == {pid: True for pid in processes}, commands
        assert sorted(p.name for p in tmp.iterdir()) == []
        assert shell.wait(timeout=60) == 0
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait(timeout=20)


def test_view_page_loads_nothing_from_off_the_machine(tmp_path: Path) -> None:
    """Before: the page asked a public CDN for Font Awesome's stylesheets
    (twice), which failed offline and told a third party someone was
    looking at a run. Every request not to 127.0.0.1 is refused and counted."""
    expect = playwright_sync.expect
    folder = tmp_path / "run"
    folder.mkdir()
    viewer = _view(folder)
    off_machine: list[str] = []
    try:
        url = _url(viewer, 180)
        with _page(_Served(url, []), tmp_path, "offline", aborted=off_machine) as page:
            expect(page.locator("body")).to_contain_text("not a run folder")
            page.wait_for_load_state("networkidle")
        report(f"rollkit view page: {len(off_machine)} requests to another machine {off_machine or ''}")
        assert off_machine == []
    finally:
        _stop(viewer)
