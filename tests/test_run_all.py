"""Every notebook survives JupyterLab's Run All, under ipykernel 7 and 6.

Run All does not run one cell and wait, as nbval does: the front end sends
every code cell's execute_request at once and then reads the replies. A kernel
that re-enters its own loop while requests are still queued (what a
nest-asyncio facade did) loses cells that way under ipykernel 7, so this test
drives a fresh kernel exactly like that, through jupyter_client: queue every
cell, then wait for every reply, and require each to be "ok", in order, with
the last cell's output present.

Both ipykernel majors people have are run: 7.x is this environment's; the last
6.x lives in a virtual environment built once (with this environment's
site folders visible, so only ipykernel differs; kernel_helpers says how) and
cached under ~/.cache/rollkit, like the npm tools of scripts/test.sh. The kernel imports
this checkout's rollkit through PYTHONPATH.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyter_client")

from helpers.kernel_helpers import Kernel, ipykernel6_python, kernel_env, outputs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _ipykernel_version(python: str) -> str:
    done = subprocess.run([python, "-c", "import ipykernel; print(ipykernel.__version__)"],
                          capture_output=True, text=True, timeout=120, env=kernel_env())
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="session", params=["ipykernel7", "ipykernel6"])
def kernel_python(request: pytest.FixtureRequest) -> str:
    if request.param == "ipykernel7":
        python = sys.executable
        major = "7"
    else:
        python = ipykernel6_python()
        major = "6"
    version = _ipykernel_version(python)
    assert version.split(".")[0] == major, f"{python} has ipykernel {version}, expected {major}.x"
    return python


def _code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def run_all(python: str, cells: list[str], cwd: Path) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """What Run All does: on a fresh kernel, queue every cell at once, then
    wait for every reply. The replies in arrival order and the iopub messages
    of each request."""
    kernel = Kernel(python, cwd, cwd / ".kernels")
    try:
        ids = [kernel.send(code) for code in cells]
        kernel.wait(ids)
        return kernel.arrival, kernel.iopub
    finally:
        kernel.stop()


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_run_all_runs_every_cell_in_order(kernel_python: str, notebook: Path, tmp_path: Path) -> None:
    cells = _code_cells(notebook)
    replies, iopub = run_all(kernel_python, cells, tmp_path)
    # The status first: an error or aborted reply need not carry a count.
    errors = {n: (r["content"]["status"], outputs(iopub[r["parent_header"]["msg_id"]]))
              for n, r in enumerate(replies) if r["content"]["status"] != "ok"}
    assert [r["content"]["status"] for r in replies] == ["ok"] * len(cells), f"cells that did not run: {errors}"
    counts = [r["content"]["execution_count"] for r in replies]
    assert counts == list(range(counts[0], counts[0] + len(cells))), "the cells replied out of order"
    last = replies[-1]["parent_header"]["msg_id"]
    assert outputs(iopub[last]) != [] or not _ends_with_output(notebook), "the last cell's output is missing"
    stderr = [m["content"]["text"] for msgs in iopub.values() for m in msgs
              if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"]
    assert not any("RuntimeError" in t or "Task was destroyed" in t for t in stderr), stderr


def _ends_with_output(notebook: Path) -> bool:
    """Whether the saved notebook's last code cell shows something (a cell
    that only cleans up, like 03's, shows nothing either way)."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    return bool(cells[-1].get("outputs"))



@pytest.mark.slow
def test_interrupting_a_blocking_step_cancels_it_and_leaves_nothing_running(kernel_python: str, tmp_path: Path) -> None:
    """Ctrl-C in Jupyter (interrupt the kernel) while `ro.step()` waits on a
    model that never answers: the cell stops with KeyboardInterrupt once the
    step has unwound, no task is left on rollkit's loop, and the rollout
    says what happened and still closes."""
    kernel = Kernel(kernel_python, tmp_path, tmp_path / ".kernels")
    try:
        content, _ = kernel.run(
            "import asyncio, rollkit as rk\n"
            "async def stuck(request):\n"
            "    print('the model was asked', flush=True)\n"
            "    await asyncio.Event().wait()\n"
            "ro = rk.notebook.open(rk.Agent(model=rk.ScriptedModel(stuck)), rk.Task(prompt='go'))\n"
        )
        assert content["status"] == "ok", content
        step = kernel.send("ro.step()")
        asked = False
        while not asked:  # the model runs: the step is in flight
            asked = any(m["msg_type"] == "stream" and "the model was asked" in m["content"]["text"]
                        for m in kernel.pump())
        kernel.manager.interrupt_kernel()
        kernel.wait([step])
        assert kernel.replies[step]["content"]["ename"] == "KeyboardInterrupt"
        content, outputs = kernel.run(
            "from rollkit.notebook import sync_loop\n"
            "async def others():\n"
            "    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]\n"
            "print(ro.busy, sync_loop.run(others()))\n"
            "print(ro.status)\n"
            "trace = ro.close()\n"
            "print(ro.status.kind, trace.errors[0].type)\n"
        )
        assert content["status"] == "ok", outputs
        assert "".join(outputs).splitlines() == [
            "False []",
            "failed in agent: HarnessError: the step was cancelled before the agent yielded; the trajectory "
            "is incomplete (close to end it; a failed run is not scored)",
            "aborted HarnessError",
        ]
    finally:
        kernel.stop()
