"""Run All in JupyterLab, in a real browser, on notebook 01.

JupyterLab serves a copy of notebooks/01_step_by_hand.ipynb (its saved
outputs cleared) from a temporary folder on 127.0.0.1 with a token; headless
Chromium opens it, clicks Run > Run All Cells, and the last cell must show its
output with execution count 15: every cell ran, in order, on one fresh kernel.
This is what hung under ipykernel 7 while the sync facade re-entered the
kernel's loop (tests/test_run_all.py drives the same at the protocol level).

Follows ../shared/notes/browser-testing.md: Debian's chromium, every request
not to 127.0.0.1 aborted, one generous expect() budget, no sleeps; the server
runs in its own process group (test_browser._Server) with its runtime,
config, settings and workspace folders under the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
from pathlib import Path

import pytest

playwright_sync = pytest.importorskip("playwright.sync_api")
pytest.importorskip("jupyterlab")

from helpers.kernel_helpers import ROOT, kernel_env  # noqa: E402
from test_browser import CHROMIUM, _free_port, _page, _Server  # noqa: E402

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


class _Lab(_Server):
    """JupyterLab serving `root`, its state kept under `state`."""

    started_when = ("Use Control-C to stop this server",)

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
        self._start(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            env, root,
        )

    def url(self, notebook: str) -> str:
        return f"http://127.0.0.1:{self.port}/lab/tree/{notebook}?token={self.token}"


def test_run_all_in_jupyterlab_runs_notebook_01_to_its_last_cell(tmp_path: Path) -> None:
    root = tmp_path / "notebooks"
    root.mkdir()
    notebook, cells = _cleared_copy(NOTEBOOK, root)
    lab = _Lab(root, tmp_path / "jupyter")
    expect = playwright_sync.expect
    try:
        lab.wait_ready(timeout=120)
        with _page(lab, tmp_path, "lab-run-all", lab.url(notebook.name)) as page:
            code_cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
            expect(code_cells).to_have_count(cells)
            # The kernel is up (its status reads Idle) before the click, as a person would see it.
            expect(page.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator")).to_have_attribute(
                "data-status", "idle")
            # The notebook made the current widget first, as a person's click on it does: Lab
            # enables "Run All Cells" (when its menu opens) only for a current notebook.
            code_cells.first.locator(".jp-InputArea-prompt").click()
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            run_all = page.locator(".lm-Menu-item", has=page.locator(".lm-Menu-itemLabel").get_by_text(
                "Run All Cells", exact=True))
            expect(run_all).not_to_have_class(re.compile("lm-mod-disabled"))
            run_all.click()
            last = code_cells.last
            # Count 15 on a fresh kernel: the 14 cells before it ran first
            # (Lab draws only the cells in view, so their prompts are not read).
            expect(last.locator(".jp-InputArea-prompt")).to_have_text(f"[{cells}]:")
            expect(last.locator(".jp-OutputArea-output")).to_contain_text("ok=True reward=1.000")
    finally:
        lab.stop()
