"""The Binder setup cannot rot unnoticed: build a fresh virtual environment
from exactly what binder/ holds, the way repo2docker does (`pip install -r
binder/requirements.txt` from the repository root, then binder/postBuild if
there is one), and run a notebook in it top to bottom.

The venv is a real fresh one (no system site-packages), so a dependency
missing from the Binder files fails here. Binder's base image brings Jupyter
itself; the test adds only that part (ipykernel to run the notebook, nbclient
to drive it). pip's cache keeps the reinstall quick.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
NOTEBOOK = ROOT / "notebooks" / "01_step_by_hand.ipynb"

pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_binder_files_build_an_environment_that_runs_a_notebook(tmp_path: Path) -> None:
    assert (BINDER / "requirements.txt").is_file(), "binder/requirements.txt is what Binder installs"
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(venv),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # Kernel specs and runtime files of this environment only, inside tmp_path.
        "JUPYTER_PATH": str(venv / "share" / "jupyter"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        # `ipykernel install` and pip's builds make temporary folders; keep them
        # in tmp_path so nothing is left behind in /tmp.
        "TMPDIR": str(tmp_path / "tmp"),
    }
    (tmp_path / "tmp").mkdir()
    # As repo2docker does: from the repository root.
    _run([str(python), "-m", "pip", "install", "-q", "-r", str(BINDER / "requirements.txt")], cwd=ROOT, env=env)
    post_build = BINDER / "postBuild"
    if post_build.exists():
        _run(["bash", str(post_build)], cwd=ROOT, env=env)
    # What Binder's base image provides: a kernel and something to drive it.
    _run([str(python), "-m", "pip", "install", "-q", "ipykernel", "nbclient"], cwd=ROOT, env=env)
    _run([str(python), "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"], env=env)

    runner = textwrap.dedent(
        f"""
        import nbclient, nbformat
        nb = nbformat.read({str(NOTEBOOK)!r}, as_version=4)
        # Prove where the kernel runs: this environment, and rollkit installed into it.
        nb.cells.append(nbformat.v4.new_code_cell(
            "import sys, rollkit; print('PREFIX', sys.prefix); print('ROLLKIT', rollkit.__file__)"))
        nbclient.NotebookClient(nb, timeout=300, startup_timeout=300, kernel_name="python3",
                                resources={{"metadata": {{"path": {str(tmp_path)!r}}}}}).execute()
        print(nb.cells[-1].outputs[0]["text"])
        """
    )
    done = _run([str(python), "-c", runner], cwd=tmp_path, env=env)
    lines = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines() if line.startswith(("PREFIX", "ROLLKIT")))
    assert Path(lines["PREFIX"]).resolve() == venv.resolve()
    assert Path(lines["ROLLKIT"]).resolve().is_relative_to(venv.resolve())  # installed, not the checkout
