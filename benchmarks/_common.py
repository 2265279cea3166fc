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
    baseline; the options it ran with (the sizes); and where and when they
    were measured (machine, load, date, commit), because a number without
    them cannot be read.
    scripts/benchmarks_page.py tables the committed files in
    docs/benchmarks.md."""

    def __init__(self, script: str, what: str) -> None:
        import os

        self.script, self.what = script, what
        self.load_before = os.getloadavg()
        # The options it ran with (the sizes), but where the numbers went.
        given = sys.argv[1:]
        at = given.index("--json") if "--json" in given else len(given)
        self.options = given[:at] + given[at + 2:]
        self.rows: list[dict] = []

    def add(self, name: str, value: float, unit: str, baseline: float | None = None,
            baseline_name: str | None = None) -> None:
        row = {"name": name, "value": value, "unit": unit}
        if baseline is not None:
            row |= {"baseline": baseline, "baseline_name": baseline_name, "ratio": value / baseline}
        self.rows.append(row)

    def add_record(self, prefix: str, record: dict, bare: str = "") -> None:
        """Each number of `record` (what a fresh process printed as JSON;
        nested records flattened) as a row "PREFIX: KEY", its unit read
        from the key's words (wall_s: s, peak_mb: MB, rows_per_s: /s,
        ratio_cpu: x; a count such as rows or traces: none) and else
        `bare`; flags and text are left out."""
        for key, value in record.items():
            if isinstance(value, dict):
                self.add_record(f"{prefix}, {key}", value, bare)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                self.add(f"{prefix}: {key}", value, unit_of(key, bare))

    def save(self, path: str | None) -> None:
        """Write the record to `path` when `--json PATH` gave one."""
        if path is not None:
            self.write(path)

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
            "script": self.script, "options": self.options, "what": self.what, "results": self.rows,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
                        "system": f"{platform.system()} {platform.release()}"},
            "load": {"before": [round(x, 2) for x in self.load_before],
                     "after": [round(x, 2) for x in os.getloadavg()]},
            "rollkit": rollkit.__version__, "commit": commit,
        }
        Path(path).write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {path}")


_UNITS = {"s": "s", "seconds": "s", "ms": "ms", "us": "µs", "mb": "MB", "gb": "GB", "ratio": "x"}
_COUNTS = {"rows", "traces", "hits", "lines", "parts", "sample", "n", "concurrency"}


def unit_of(key: str, bare: str = "") -> str:
    """The unit a JSON key's words name: rows_per_s is /s, json_rows_per_cpu_s
    /CPU s, peak_mb_build MB, search_hits none; `bare` when none is named."""
    words = key.lower().split("_")
    if words[-2:] == ["per", "s"]:
        return "/s"
    if words[-3:] == ["per", "cpu", "s"]:
        return "/CPU s"
    if words[-1] in _COUNTS:
        return ""
    return next((_UNITS[w] for w in words if w in _UNITS), bare)


def json_option(parser) -> None:  # type: ignore[no-untyped-def]
    """`--json PATH` on a script's argparse parser, as json_path reads it
    from argv for the scripts without one."""
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the numbers, with the machine, load and date, to PATH "
                             "(benchmarks/results/NAME.json; scripts/benchmarks_page.py tables them)")


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
