"""The rollout panel in a real browser: Voila serves tests/browser_app/panel.ipynb
on 127.0.0.1, headless Chromium (Debian's, driven by Playwright) types a user
message and clicks Send, and the DOM must show the agent's reply, a budget
chart with new points, and a status line that moved.

Follows ../shared/notes/browser-testing.md: readiness is Voila's own "running
at" line plus an open port (its /api answers 403 in this mode); every request
not to 127.0.0.1 is aborted (a CDN font request would hang the page); one
generous expect() budget, no sleeps; the text box sends its value on blur, so
the click cannot overtake the typing. The screenshot is always saved (and its
path printed); set ROLLKIT_SCREENSHOT=<file.png> to keep a copy.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

playwright_sync = pytest.importorskip("playwright.sync_api")
pytest.importorskip("voila")

CHROMIUM = "/usr/bin/chromium"
APP = Path(__file__).parent / "browser_app" / "panel.ipynb"
BUDGET_MS = 90_000  # first render takes ~8 s here; generous for a loaded machine
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Voila:
    """Voila in its own process group, so stopping it stops its kernels too."""

    def __init__(self, notebook: Path, runtime_dir: Path) -> None:
        self.port = _free_port()
        # Voila's connection files and temporary folders stay under runtime_dir.
        runtime_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime_dir), "TMPDIR": str(runtime_dir),
               "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voila", str(notebook), "--no-browser", f"--port={self.port}",
             "--Voila.ip=127.0.0.1", "--show_tracebacks=True"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True, env=env, cwd=notebook.parent,
        )
        self.log: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def wait_ready(self, timeout: float) -> None:
        """Block until Voila says it is running, then until the port accepts."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError("Voila did not start:\n" + "".join(self.log)) from None
            if line is None:
                raise AssertionError("Voila exited:\n" + "".join(self.log))
            if "Voila is running at" in line or "Voil\u00e0 is running at" in line:
                break
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout):
            pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)


@pytest.fixture
def voila(tmp_path: Path):
    server = _Voila(APP, tmp_path / "runtime")
    try:
        server.wait_ready(timeout=120)
        yield server
    finally:
        server.stop()


def _local_only(route) -> None:  # type: ignore[no-untyped-def]
    if route.request.url.startswith("http://127.0.0.1"):
        route.continue_()
    else:
        route.abort()


def test_send_in_the_browser_shows_reply_chart_points_and_status(voila: _Voila, tmp_path: Path) -> None:
    expect = playwright_sync.expect
    expect.set_options(timeout=BUDGET_MS)
    screenshot = tmp_path / "panel.png"
    console: list[str] = []
    with playwright_sync.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = context.new_page()
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            page.route("**/*", _local_only)
            page.goto(voila.url, wait_until="domcontentloaded")

            status = page.locator(".rk-status-line")
            expect(status).to_contain_text("type the opening message")
            expect(status).to_have_attribute("data-kind", "waiting")
            # plotly draws no point before the first one exists: wait for the
            # chart itself (title, axes), then count its points.
            chart = page.locator(".rk-chart")
            expect(chart.locator(".gtitle")).to_contain_text("budget burn")
            expect(chart.locator(".x3title")).to_contain_text("turn")  # the shared x axis, under the last row
            points = chart.locator("path.point")
            assert points.count() == 0
            step = page.locator("button.rk-step")
            expect(step).to_be_disabled()  # the user speaks first

            page.locator(".rk-input textarea").fill("hello <b>from</b> the browser")
            page.locator("button.rk-send").click()

            transcript = page.locator(".rk-transcript")
            expect(transcript.locator(".rk-assistant")).to_contain_text("You said: hello <b>from</b> the browser")
            expect(transcript.locator(".rk-user")).to_have_count(1)
            expect(transcript.locator("b", has_text="from")).to_have_count(0)  # escaped, not markup
            expect(status).to_contain_text("waiting for the user after 1 turn")
            # one point per budget line (turns, input, output, total, agent time)
            expect(points).to_have_count(5)
            expect(page.locator(".rk-gauges")).to_contain_text("1 / 10")
            expect(step).to_be_enabled()
            page.screenshot(path=str(screenshot), full_page=True)
        except BaseException:
            page.screenshot(path=str(screenshot), full_page=True)
            print("browser console:\n" + "\n".join(console))
            print("voila log:\n" + "".join(voila.log[-60:]))
            raise
        finally:
            print(f"screenshot: {screenshot}")
            keep = os.environ.get("ROLLKIT_SCREENSHOT")
            if keep and screenshot.exists():
                shutil.copyfile(screenshot, keep)
            context.close()
