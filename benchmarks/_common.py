"""What the benchmark scripts share: running a measurement in a fresh
interpreter (so its time and peak memory are its own) and reading the JSON
it prints. Scripts run as `python benchmarks/<name>.py`, so this module is
imported as `_common` (the script's folder is first on sys.path).

It measures nothing itself and asserts nothing."""

from __future__ import annotations

import json
import subprocess
import sys


def in_fresh_python(code: str, *args: str) -> dict:
    """Run `code` with `args` in a new interpreter (this one's executable) and
    return the JSON object on the last line it prints; its stderr's tail is
    the error when it fails."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])
