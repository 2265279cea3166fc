"""Where rollkit keeps what it can make again: the user cache folder.

`user_cache_folder()` is `$XDG_CACHE_HOME/rollkit`, else `~/.cache/rollkit`
(the XDG base directory rule Linux and most tools follow): the columnar
tables of a run whose own folder cannot be written, the sandbox's /etc and
first process, the made-up big runs of rollkit.examples. Never the
temporary folder: what is there is shared by every user of the machine and
outlives nothing it should, and a test run must not leave files in it.

This module only names the folder; it creates nothing (each user makes its
own subfolder when it writes).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["user_cache_folder"]


def user_cache_folder() -> Path:
    """rollkit's folder in the user cache folder (see the module docstring)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rollkit"
