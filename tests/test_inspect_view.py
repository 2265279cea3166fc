"""An inspect log rollkit wrote, in inspect's own viewer: `inspect view`
serving it on 127.0.0.1, read in headless Chromium. The log list shows each
sample's score and tokens (the aggregate results and per-sample usage are
there), and a sample's Transcript tab shows its model and tool events."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import rollkit as rk

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parent / "fixtures"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, server: subprocess.Popen) -> None:
    import time

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"inspect view exited with {server.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)  # polling a port that is not open yet; nothing to wait on
    raise TimeoutError("inspect view did not open its port")


@pytest.fixture
def served(tmp_path):
    pytest.importorskip("inspect_ai")
    pytest.importorskip("playwright")
    if not shutil.which("chromium"):
        pytest.skip("needs Debian's chromium")
    (tmp_path / "logs").mkdir()
    rk.save(rk.load(FIXTURES / "inspect/adding.eval"), tmp_path / "logs" / "again.eval", format="inspect")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "inspect_ai", "view", "start", "--log-dir", str(tmp_path / "logs"),
                               "--host", "127.0.0.1", "--port", str(port)], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, server)
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_inspect_view_shows_scores_tokens_and_the_transcript(served, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=60_000)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path="/usr/bin/chromium",
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-dev-shm-usage"])
        try:
            page = context.new_page()
            page.route("**/*", lambda route: route.continue_() if "127.0.0.1" in route.request.url else route.abort())
            page.goto(served, wait_until="domcontentloaded")
            body = page.locator("body")
            # the log's aggregate scores and the samples' tokens and limit
            expect(body).to_contain_text("includes")
            expect(body).to_contain_text("0.333")
            expect(body).to_contain_text("What is 2 + 3?")
            expect(body).to_contain_text("134")  # s1's tokens: 40 + 12 + (40 + 30 cached) + 12
            expect(body).to_contain_text("message")  # s3's limit
            page.get_by_text("What is 2 + 3?").first.click()
            page.get_by_text("Transcript", exact=True).first.click()
            # the model and tool events of the sample, not "events were removed"
            expect(body).to_contain_text("add")
            expect(body).to_contain_text("The answer is 5.")
            expect(body).not_to_contain_text("removed")
        except Exception:
            page.screenshot(path=str(tmp_path / "inspect-view-failure.png"))  # kept in pytest's temp folder
            raise
        finally:
            context.close()
