"""A Jupyter kernel driven like a front end does, through jupyter_client:
requests sent without waiting, replies and outputs collected as they come.
Used by tests/test_run_all.py (Run All) and tests/test_readme.py."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jupyter_client
import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ROLLKIT_CACHE", Path.home() / ".cache" / "rollkit"))
# A hang fails with the cells still waiting named, before pytest-timeout's 300 s.
HANG_GUARD_S = 120


def kernel_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("JPY_PARENT_PID", None)
    return env



class Kernel:
    """A fresh kernel on `python` (its own kernel spec, written under
    `specs`), started in `cwd` and importing this checkout's rollkit."""

    def __init__(self, python: str, cwd: Path, specs: Path, env: dict[str, str] | None = None) -> None:
        (specs / "rollkit-test").mkdir(parents=True, exist_ok=True)
        (specs / "rollkit-test" / "kernel.json").write_text(json.dumps({
            "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "rollkit test kernel", "language": "python",
        }))
        self.manager = jupyter_client.KernelManager(
            kernel_name="rollkit-test",
            kernel_spec_manager=jupyter_client.kernelspec.KernelSpecManager(kernel_dirs=[str(specs)]),
        )
        self.manager.start_kernel(cwd=str(cwd), env=env or kernel_env())
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=120)
        except BaseException:
            self.stop()
            raise
        self.iopub: dict[str, list[dict[str, Any]]] = {}
        self.replies: dict[str, dict[str, Any]] = {}
        self.arrival: list[dict[str, Any]] = []
        self.idle: set[str] = set()

    def send(self, code: str) -> str:
        msg_id = self.client.execute(code, store_history=True, allow_stdin=False)
        self.iopub[msg_id] = []
        return msg_id

    def pump(self) -> list[dict[str, Any]]:
        """Read what has arrived (waiting briefly for iopub); the new iopub messages."""
        new = []
        try:
            msg = self.client.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            pass
        else:
            new.append(msg)
            parent = msg["parent_header"].get("msg_id")
            if parent in self.iopub:
                self.iopub[parent].append(msg)
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    self.idle.add(parent)
        while True:
            try:
                msg = self.client.get_shell_msg(timeout=0)
            except queue.Empty:
                break
            parent = msg["parent_header"].get("msg_id")
            if parent in self.iopub and msg["msg_type"] == "execute_reply":
                self.replies[parent] = msg
                self.arrival.append(msg)
        return new

    def wait(self, ids: list[str]) -> None:
        """Until every request in `ids` has replied and gone idle; a kernel that
        stops answering fails the test naming the cells still waiting."""
        deadline = time.monotonic() + HANG_GUARD_S
        while not (set(ids) <= set(self.replies) and set(ids) <= self.idle):
            if time.monotonic() > deadline:
                waiting = [n for n, i in enumerate(ids) if i not in self.replies]
                errors = [m["content"] for i in ids for m in self.iopub[i]
                          if m["msg_type"] == "error" or (m["msg_type"] == "stream" and m["content"]["name"] == "stderr")]
                pytest.fail(f"the kernel hung: cells {waiting} of {len(ids)} never replied; "
                            f"errors and stderr seen: {json.dumps(errors)[-3000:]}")
            self.pump()

    def run(self, code: str) -> tuple[dict[str, Any], list[str]]:
        """Run one cell to its end: its reply's content and its outputs."""
        msg_id = self.send(code)
        self.wait([msg_id])
        return self.replies[msg_id]["content"], outputs(self.iopub[msg_id])

    def stop(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)



def outputs(messages: list[dict[str, Any]]) -> list[str]:
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


def _site_dirs() -> list[str]:
    """The folders the running environment imports installed packages from,
    in its own order (a venv's, a conda env's or the base interpreter's,
    the user site included when this environment reads it)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def ipykernel6_python() -> str:
    """The python of a venv that differs from the running environment only
    by ipykernel<7, built once into the cache (atomically: a half-built venv
    is never used). scripts/test.sh builds it before the tests; a test
    session builds it if it is missing.

    `venv --system-site-packages` would not do: made from inside a venv, it
    sees the base interpreter's packages, not this venv's (rollkit's
    dependencies missing). Instead a `.pth` file adds this environment's
    site folders after the kernel venv's own, so its ipykernel 6 wins and
    everything else is what the tests run on. The cache key is that
    environment (interpreter, prefix, site folders), so a kernel venv built
    for one environment is never used by another."""
    sites = _site_dirs()
    key = hashlib.sha256(json.dumps([sys.version, os.path.realpath(sys.executable), sys.prefix, sites])
                         .encode()).hexdigest()[:12]
    venv = CACHE / f"ipykernel6-py{sys.version_info[0]}{sys.version_info[1]}-{key}"
    python = venv / "bin" / "python"
    if python.exists():
        return str(python)
    CACHE.mkdir(parents=True, exist_ok=True)
    building = CACHE / f"{venv.name}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, capture_output=True, timeout=300)
        built = building / "bin" / "python"
        own = subprocess.run([str(built), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, timeout=120).stdout.strip()
        # addsitedir, not a bare path: the folders' own .pth files (an
        # editable install's among them) are read too.
        Path(own, "_rollkit_test_environment.pth").write_text(
            "".join(f"import site; site.addsitedir({d!r})\n" for d in sites))
        # pip sees this environment's packages through the .pth, so it
        # installs ipykernel 6 alone (it never uninstalls outside its venv).
        done = subprocess.run([str(built), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               "ipykernel<7"], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"could not install ipykernel<7 into {building}: {done.stderr[-2000:]}")
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
