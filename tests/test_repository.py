"""What the repository tracks: source, tests, notebooks and small fixtures, never build outputs.

Twelve wheel files (3.4 MB) once rode in the tree's root by accident; these
checks read `git ls-files` so a binary cannot come back unnoticed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_OUTPUTS = (".whl", ".tar.gz", ".zip", ".egg", ".so", ".pyd", ".pyc", ".dylib", ".dll", ".exe")


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout: {error}")
    return [name for name in out.stdout.decode().split("\0") if name]


def _build_outputs(names: list[str]) -> list[str]:
    return [name for name in names if name.lower().endswith(BUILD_OUTPUTS)]


def test_no_build_output_or_archive_is_tracked() -> None:
    found = _build_outputs(_tracked())
    assert not found, f"build outputs tracked by git (remove them, they are not source): {found}"


def test_the_binary_check_can_fail() -> None:
    names = ["rollkit/core/trace.py", "pydantic-2.14.4-py3-none-any.whl", "dist/rollkit-0.1.0.tar.gz"]
    assert _build_outputs(names) == names[1:]
