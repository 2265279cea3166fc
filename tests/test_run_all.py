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
site-packages visible, so only ipykernel differs) and cached under
~/.cache/rollkit, like the npm tools of scripts/test.sh. The kernel imports
this checkout's rollkit through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CACHE = Path(os.environ.get("ROLLKIT_CACHE", Path.home() / ".cache" / "rollkit"))
# A hang fails with the cells still waiting named, before pytest-timeout's 300 s.
HANG_GUARD_S = 120


def _ipykernel_version(python: str) -> str:
    done = subprocess.run([python, "-c", "import ipykernel; print(ipykernel.__version__)"],
                          capture_output=True, text=True, timeout=120, env=_kernel_env())
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _ipykernel6_python() -> str:
    """The python of a venv that differs from this one only by ipykernel<7;
    built once into the cache (atomically: a half-built venv is never used)."""
    venv = CACHE / f"ipykernel6-py{sys.version_info[0]}{sys.version_info[1]}"
    python = venv / "bin" / "python"
    if python.exists():
        return str(python)
    CACHE.mkdir(parents=True, exist_ok=True)
    building = CACHE / f"{venv.name}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(building)],
                       check=True, capture_output=True, timeout=300)
        done = subprocess.run([str(building / "bin" / "python"), "-m", "pip", "install", "-q",
                               "--disable-pip-version-check", "ipykernel<7"],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"could not install ipykernel<7 into {building}: {done.stderr[-2000:]}")
        # Renamed into place once complete. Only bin/ scripts' shebangs keep
        # the build path; bin/python finds its venv by its own location,
        # which is all the kernel (and `python -m pip`) needs.
        try:
            building.rename(venv)
        except OSError:  # another session finished first: use its venv
            pass
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return str(python)


@pytest.fixture(scope="session", params=["ipykernel7", "ipykernel6"])
def kernel_python(request: pytest.FixtureRequest) -> str:
    if request.param == "ipykernel7":
        python = sys.executable
        major = "7"
    else:
        python = _ipykernel6_python()
        major = "6"
    version = _ipykernel_version(python)
    assert version.split(".")[0] == major, f"{python} has ipykernel {version}, expected {major}.x"
    return python


def _kernel_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("JPY_PARENT_PID", None)
    return env


def _code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def run_all(python: str, cells: list[str], cwd: Path) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Start a fresh kernel on `python`, queue every cell at once, then wait
    for every reply. Returns the replies in arrival order and the iopub
    messages of each request; fails naming the cells still waiting if the
    kernel stops answering."""
    specs = cwd / ".kernels"
    (specs / "rollkit-test").mkdir(parents=True)
    (specs / "rollkit-test" / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "rollkit test kernel", "language": "python",
    }))
    manager = jupyter_client.KernelManager(
        kernel_name="rollkit-test",
        kernel_spec_manager=jupyter_client.kernelspec.KernelSpecManager(kernel_dirs=[str(specs)]),
    )
    manager.start_kernel(cwd=str(cwd), env=_kernel_env())
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        ids = [client.execute(code, store_history=True, allow_stdin=False) for code in cells]
        replies: dict[str, dict[str, Any]] = {}
        arrival: list[dict[str, Any]] = []
        iopub: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
        idle: set[str] = set()
        deadline = time.monotonic() + HANG_GUARD_S
        while len(replies) < len(ids) or not idle >= set(ids):
            if time.monotonic() > deadline:
                waiting = [n for n, i in enumerate(ids) if i not in replies]
                errors = [m["content"] for i in ids for m in iopub[i]
                          if m["msg_type"] == "error" or (m["msg_type"] == "stream" and m["content"]["name"] == "stderr")]
                pytest.fail(f"Run All hung: cells {waiting} of {len(ids)} never replied; "
                            f"errors and stderr seen: {json.dumps(errors)[-3000:]}")
            try:
                msg = client.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                pass
            else:
                parent = msg["parent_header"].get("msg_id")
                if parent in iopub:
                    iopub[parent].append(msg)
                    if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                        idle.add(parent)
            while True:
                try:
                    msg = client.get_shell_msg(timeout=0)
                except queue.Empty:
                    break
                parent = msg["parent_header"].get("msg_id")
                if parent in iopub and msg["msg_type"] == "execute_reply":
                    replies[parent] = msg
                    arrival.append(msg)
        return arrival, iopub
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _outputs(messages: list[dict[str, Any]]) -> list[str]:
    texts = []
    for msg in messages:
        content = msg["content"]
        if msg["msg_type"] == "stream":
            texts.append(content["text"])
        elif msg["msg_type"] in ("execute_result", "display_data"):
            texts.append(content["data"].get("text/plain", ""))
        elif msg["msg_type"] == "error":
            texts.append(f"{content['ename']}: {content['evalue']}")
    return texts


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_run_all_runs_every_cell_in_order(kernel_python: str, notebook: Path, tmp_path: Path) -> None:
    cells = _code_cells(notebook)
    replies, iopub = run_all(kernel_python, cells, tmp_path)
    statuses = [(r["content"]["execution_count"], r["content"]["status"]) for r in replies]
    errors = {n: _outputs(iopub[r["parent_header"]["msg_id"]]) for n, r in enumerate(replies)
              if r["content"]["status"] != "ok"}
    assert [s for _, s in statuses] == ["ok"] * len(cells), f"cells that did not run: {errors}"
    counts = [c for c, _ in statuses]
    assert counts == list(range(counts[0], counts[0] + len(cells))), "the cells replied out of order"
    last = replies[-1]["parent_header"]["msg_id"]
    assert _outputs(iopub[last]) != [] or not _ends_with_output(notebook), "the last cell's output is missing"
    stderr = [m["content"]["text"] for msgs in iopub.values() for m in msgs
              if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"]
    assert not any("RuntimeError" in t or "Task was destroyed" in t for t in stderr), stderr


def _ends_with_output(notebook: Path) -> bool:
    """Whether the saved notebook's last code cell shows something (a cell
    that only cleans up, like 03's, shows nothing either way)."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    return bool(cells[-1].get("outputs"))
