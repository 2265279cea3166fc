"""Run All in JupyterLab, in a real browser, on notebook 01.

JupyterLab serves a copy of notebooks/01_step_by_hand.ipynb (its saved
outputs cleared) from a temporary folder on 127.0.0.1 with a token; headless
Chromium opens it, clicks Run > Run All Cells, and the last cell must show its
output with execution count 15: every cell ran, in order, on one fresh kernel.
This is what hung under ipykernel 7 while the sync facade re-entered the
kernel's loop (tests/test_run_all.py drives the same at the protocol level).

Follows ../shared/notes/browser-testing.md: Debian's chromium, every request
not to 127.0.0.1 aborted, one generous expect() budget, no sleeps; the server
runs in its own process group with its runtime, config, settings and
workspace folders under the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
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
pytest.importorskip("jupyterlab")

from kernel_helpers import ROOT, kernel_env  # noqa: E402
from test_browser import BUDGET_MS, CHROMIUM, CHROMIUM_ARGS, _free_port, _local_only  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
]

NOTEBOOK = ROOT / "notebooks" / "01_step_by_hand.ipynb"


def _cleared_copy(source: Path, folder: Path) -> tuple[Path, int]:
    """`source` without outputs or execution counts, in `folder`; and its
    number of code cells."""
    notebook = json.loads(source.read_text())
    code = 0
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
            code += 1
    notebook["metadata"].pop("widgets", None)
    target = folder / source.name
    target.write_text(json.dumps(notebook))
    return target, code


class _Lab:
    """JupyterLab in its own process group, so stopping it stops its kernels."""

    def __init__(self, root: Path, state: Path) -> None:
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        dirs = {name: state / name for name in ("runtime", "config", "data", "settings", "workspaces")}
        for folder in dirs.values():
            folder.mkdir(parents=True, exist_ok=True)
        env = {**kernel_env(), "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "JUPYTER_CONFIG_DIR": str(dirs["config"]),
               "JUPYTER_DATA_DIR": str(dirs["data"]), "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
               "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]), "TMPDIR": str(dirs["runtime"]),
               "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={root}", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
             "jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env, cwd=root,
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
        """Block until the server says it runs (its last start-up line), then until the port accepts."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError("JupyterLab did not start:\n" + "".join(self.log)) from None
            if line is None:
                raise AssertionError("JupyterLab exited:\n" + "".join(self.log))
            if "Use Control-C to stop this server" in line:
                break
        # The server logs that line a moment before its socket listens.
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=timeout):
                    return
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
            try:  # wait a tenth of a second for it, or see it exit
                self.proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
            raise AssertionError("JupyterLab exited:\n" + "".join(self.log))

    def url(self, notebook: str) -> str:
        return f"http://127.0.0.1:{self.port}/lab/tree/{notebook}?token={self.token}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def test_run_all_in_jupyterlab_runs_notebook_01_to_its_last_cell(tmp_path: Path) -> None:
    root = tmp_path / "notebooks"
    root.mkdir()
    notebook, cells = _cleared_copy(NOTEBOOK, root)
    lab = _Lab(root, tmp_path / "jupyter")
    expect = playwright_sync.expect
    expect.set_options(timeout=BUDGET_MS)
    screenshot = tmp_path / "lab-run-all.png"
    console: list[str] = []
    try:
        lab.wait_ready(timeout=120)
        with playwright_sync.sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                viewport={"width": 1280, "height": 900},
            )
            page = context.new_page()
            try:
                page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
                page.route("**/*", _local_only)
                page.goto(lab.url(notebook.name), wait_until="domcontentloaded")
                code_cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
                expect(code_cells).to_have_count(cells)
                # The kernel is up (its status reads Idle) before the click, as a person would see it.
                expect(page.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator")).to_have_attribute(
                    "data-status", "idle")
                page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
                page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
                last = code_cells.last
                expect(last.locator(".jp-InputArea-prompt")).to_have_text(f"[{cells}]:")
                expect(last.locator(".jp-OutputArea-output")).to_contain_text("ok=True reward=1.000")
                # Count 15 on a fresh kernel: the 14 cells before it ran first
                # (Lab draws only the cells in view, so their prompts are not read).
                page.screenshot(path=str(screenshot), full_page=True)
            except BaseException:
                page.screenshot(path=str(screenshot), full_page=True)
                print("browser console:\n" + "\n".join(console[-80:]))
                print("jupyterlab log:\n" + "".join(lab.log[-80:]))
                raise
            finally:
                print(f"screenshot: {screenshot}")
                keep = os.environ.get("ROLLKIT_SCREENSHOT")
                if keep and screenshot.exists():
                    shutil.copyfile(screenshot, keep.replace(".png", "-lab-run-all.png"))
                context.close()
    finally:
        lab.stop()
