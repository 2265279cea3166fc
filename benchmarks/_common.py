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


class Results:
    """The numbers one benchmark run measured, for `--json PATH`: each with
    its unit and, where the script measures one in the same run, its
    baseline; and where and when they were measured (machine, load, date,
    commit), because a number without them cannot be read.
    scripts/benchmarks_page.py tables the committed files in
    docs/benchmarks.md."""

    def __init__(self, script: str, what: str) -> None:
        import os

        self.script, self.what = script, what
        self.load_before = os.getloadavg()
        self.rows: list[dict] = []

    def add(self, name: str, value: float, unit: str, baseline: float | None = None,
            baseline_name: str | None = None) -> None:
        row = {"name": name, "value": value, "unit": unit}
        if baseline is not None:
            row |= {"baseline": baseline, "baseline_name": baseline_name, "ratio": value / baseline}
        self.rows.append(row)

    def write(self, path: str) -> None:
        import datetime
        import os
        import platform
        from pathlib import Path

        import rollkit

        cpu = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                    if line.startswith("model name")), platform.processor() or "unknown")
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip() or None
        record = {
            "script": self.script, "what": self.what, "results": self.rows,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
                        "system": f"{platform.system()} {platform.release()}"},
            "load": {"before": [round(x, 2) for x in self.load_before],
                     "after": [round(x, 2) for x in os.getloadavg()]},
            "rollkit": rollkit.__version__, "commit": commit,
        }
        Path(path).write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {path}")


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return ""


def json_path(argv: list[str]) -> str | None:
    """The PATH of `--json PATH` in argv, if given."""
    if "--json" not in argv:
        return None
    at = argv.index("--json")
    if at + 1 >= len(argv):
        raise SystemExit("--json needs a file path: --json benchmarks/results/NAME.json")
    return argv[at + 1]
