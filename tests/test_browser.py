"""The rollout panel in a real browser: Voila serves a notebook of
tests/browser_app/ on 127.0.0.1, headless Chromium (Debian's, driven by
Playwright) works the panel, and the DOM must show what happened.

- panel.ipynb: type a user message and click Send; the agent's reply, a
  budget chart with new points and a status line that moved appear.
- agent_seat.ipynb: play the agent (a HumanModel): a tool call with its
  argument left empty is refused in the form; pick the calculator, fill its
  argument, call it; answer in text; close; the reward shows in the status.
- trace_browser_plots.ipynb: the picked trace's two plots draw, and follow
  a row clicked in the table.

Follows ../shared/notes/browser-testing.md: readiness is Voila's own "running
at" line plus an open port (its /api answers 403 in this mode); every request
not to 127.0.0.1 is aborted (a CDN font request would hang the page); one
generous expect() budget, no sleeps; the text box sends its value on blur, so
the click cannot overtake the typing. The screenshot is always saved (and its
path printed); set ROLLKIT_SCREENSHOT=<file.png> to keep a copy.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

playwright_sync = pytest.importorskip("playwright.sync_api")
pytest.importorskip("voila")

CHROMIUM = "/usr/bin/chromium"
APPS = Path(__file__).parent / "browser_app"
BUDGET_MS = 90_000  # first render takes ~8 s here; generous for a loaded machine
# Voila's executor is nbclient: a cell that captured output into an Output
# widget made it write that widget's state to the kernel on the shell channel
# while it waited for the cell's reply, and that write could hide the reply
# until the cell's timeout (rollkit.notebook.outputs; the trace browser did so
# until its figures became state). Voila's default is no timeout, so such a
# page waited forever; with one, a cell that truly runs past it fails with
# Voila's "Cell execution timed out" in the page. A cell of these apps takes
# ~1 s (15 s on a loaded machine).
CELL_TIMEOUT_S = 40
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


class _Server:
    """A server in its own process group, so stopping it stops its kernels
    too; its stderr is kept in `log`. A subclass starts it with `_start` and
    names the stderr text that says it has started."""

    started_when: tuple[str, ...] = ()
    port: int

    def _start(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, env=env, cwd=cwd)
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
        """Block until the server says it has started, then until its port accepts."""
        name = type(self).__name__.strip("_")
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"{name} did not start:\n" + "".join(self.log)) from None
            if line is None:
                raise AssertionError(f"{name} exited:\n" + "".join(self.log))
            if any(text in line for text in self.started_when):
                break
        # Some servers say so a moment before their socket listens.
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=timeout):
                    return
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
            try:  # wait a tenth of a second for the port, or see the server exit
                self.proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
            raise AssertionError(f"{name} exited:\n" + "".join(self.log))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


class _Voila(_Server):
    """Voila serving one notebook."""

    started_when = ("Voila is running at", "Voil\u00e0 is running at")

    def __init__(self, notebook: Path, runtime_dir: Path) -> None:
        self.port = _free_port()
        # Voila's connection files and temporary folders stay under runtime_dir.
        runtime_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime_dir), "TMPDIR": str(runtime_dir),
               "PYTHONUNBUFFERED": "1"}
        self._start(
            [sys.executable, "-m", "voila", str(notebook), "--no-browser", f"--port={self.port}",
             "--Voila.ip=127.0.0.1", "--show_tracebacks=True", f"--VoilaExecutor.timeout={CELL_TIMEOUT_S}"],
            env, notebook.parent,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@pytest.fixture
def voila(tmp_path: Path, request):
    app = getattr(request, "param", "panel.ipynb")
    server = _Voila(APPS / app, tmp_path / "runtime")
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


@contextlib.contextmanager
def _page(server: _Server, tmp_path: Path, name: str, url: str | None = None,  # type: ignore[no-untyped-def]
          console: list[str] | None = None, aborted: list[str] | None = None):
    """A page on the server's app (`url`, by default the Voila app's); on
    failure the browser console (kept in `console` when given) and the
    server's log are printed, and the screenshot is always saved. The
    requests not to 127.0.0.1, refused, are kept in `aborted` when given;
    uncaught errors in the page are console lines "error: uncaught ..."."""
    playwright_sync.expect.set_options(timeout=BUDGET_MS)
    screenshot = tmp_path / f"{name}.png"
    console = [] if console is None else console
    with playwright_sync.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        page = context.new_page()
        # Voila answers once the notebook ran: on a loaded machine that alone
        # can pass playwright's 30 s default (a first FigureWidget imports
        # nbformat's jsonschema, which builds a grammar at import).
        page.set_default_navigation_timeout(BUDGET_MS)
        try:
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            # An uncaught error (anywidget's "Failed to initialize model" is one) is no console
            # message to Playwright: kept as an error line, so a test counting errors counts it.
            page.on("pageerror", lambda exc: console.append(f"error: uncaught {exc}"))
            def local_only(route) -> None:  # type: ignore[no-untyped-def]
                if aborted is not None and not route.request.url.startswith("http://127.0.0.1"):
                    aborted.append(route.request.url)
                _local_only(route)

            page.route("**/*", local_only)
            # Voila runs the notebook before it answers: ~8 s here, 40 s and more on a loaded machine.
            page.goto(url or server.url, wait_until="domcontentloaded", timeout=BUDGET_MS)  # type: ignore[attr-defined]
            yield page
            page.screenshot(path=str(screenshot), full_page=True)
        except BaseException:
            page.screenshot(path=str(screenshot), full_page=True)
            print("browser console:\n" + "\n".join(console))
            print(f"{type(server).__name__.strip('_').lower()} log:\n" + "".join(server.log[-60:]))
            raise
        finally:
            print(f"screenshot: {screenshot}")
            keep = os.environ.get("ROLLKIT_SCREENSHOT")
            if keep and screenshot.exists():
                shutil.copyfile(screenshot, keep.replace(".png", f"-{name}.png"))
            context.close()


def test_send_in_the_browser_shows_reply_chart_points_and_status(voila: _Voila, tmp_path: Path) -> None:
    expect = playwright_sync.expect
    with _page(voila, tmp_path, "panel") as page:
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


@pytest.mark.parametrize("voila", ["agent_seat.ipynb"], indirect=True)
def test_play_the_agent_in_the_browser_call_a_tool_answer_and_read_the_reward(voila: _Voila, tmp_path: Path) -> None:
    expect = playwright_sync.expect
    with _page(voila, tmp_path, "agent-seat") as page:
        status = page.locator(".rk-status-line")
        expect(status).to_have_attribute("data-kind", "asked")
        seat = page.locator(".rk-agent-seat")
        expect(seat.locator(".rk-asked")).to_contain_text("asked after")
        # A required argument left empty is refused in the form: nothing is sent.
        seat.locator("button.rk-call-tool").click()
        expect(seat.locator(".rk-form-error")).to_contain_text("expression: Field required")
        expect(page.locator(".rk-gauges")).to_contain_text("0 / 6")
        expect(seat.locator(".rk-tool-pick select")).to_have_value("calculator")
        argument = seat.locator(".rk-arg-expression input")
        argument.fill("34 + 8")
        argument.press("Tab")  # the field sends its value on blur
        seat.locator("button.rk-call-tool").click()
        expect(seat.locator(".rk-asked")).to_contain_text("tool: 42")  # the tool ran; the model is asked again
        reply = seat.locator(".rk-reply textarea")
        reply.fill("The answer is 42.")
        reply.press("Tab")
        seat.locator("button.rk-send-reply").click()
        expect(status).to_contain_text("after 2 turns")
        expect(page.locator(".rk-transcript .rk-assistant").last).to_contain_text("The answer is 42.")
        expect(page.locator(".rk-transcript .rk-tool")).to_contain_text("42")  # the tool's result, on the trace
        page.locator("button.rk-close").click()
        expect(status).to_contain_text("closed: ok, reward 1.000")


@pytest.mark.parametrize("voila", ["trace_browser_plots.ipynb"], indirect=True)
def test_a_picked_traces_plots_draw_and_follow_a_click(voila: _Voila, tmp_path: Path) -> None:
    """The trace browser's plots, set as its Output widget's state
    (rollkit.notebook.outputs) rather than captured, draw in the page: the
    pick made in the notebook's cell, then a row clicked in the table."""
    expect = playwright_sync.expect
    with _page(voila, tmp_path, "trace-browser-plots") as page:
        titles = page.locator(".js-plotly-plot .gtitle")
        expect(titles).to_have_text(["budget burn · arith-0-001", "phase timeline · arith-0-001"])
        page.locator(".rk-trace-table select").select_option(index=4)
        expect(titles).to_have_text(["budget burn · arith-0-004", "phase timeline · arith-0-004"])
