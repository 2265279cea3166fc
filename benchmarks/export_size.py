"""How large a static export of a run is (`rollkit view RUN --export DIR`,
rollkit.notebook.export), per 1,000 rollouts, and how long writing it takes.

Runs N arithmetic demo rollouts (the toy calculator: a tool call and two
model calls each) into a run folder, exports 1/4 of them (--limit) and all
of them, and prints the bytes each took, what the rollouts take beside the
fixed part (plotly.js, the page script), and the seconds. The baseline is
the run's own traces.jsonl, measured in the same run.

    python benchmarks/export_size.py [N] [--json PATH]      # N defaults to 1000

It asserts nothing."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from _common import Results, json_option


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(n: int, json_to: str | None) -> None:
    import rollkit as rk
    from rollkit.examples.arithmetic import arithmetic_tasks, demo_agent
    from rollkit.notebook.export import export

    home = Path(tempfile.mkdtemp(prefix="rollkit-export-size-"))
    try:
        rk.evaluate(demo_agent(), arithmetic_tasks(n), out=home / "run", progress=False)
        traces = (home / "run" / "traces.jsonl").stat().st_size
        sizes = {}
        for taken in (n // 4, n):
            began = time.perf_counter()
            export([home / "run"], home / f"out-{taken}", limit=taken)
            sizes[taken] = (_size(home / f"out-{taken}"), time.perf_counter() - began)
        (small, _), (large, seconds) = sizes[n // 4], sizes[n]
        per_1000 = (large - small) / (n - n // 4) * 1000
        print(f"{n} rollouts: export {large / 1e6:.1f} MB in {seconds:.1f} s; {n // 4}: {small / 1e6:.1f} MB")
        print(f"per 1,000 rollouts: {per_1000 / 1e6:.1f} MB (fixed part {(small - per_1000 * (n // 4) / 1000) / 1e6:.1f} MB)")
        print(f"baseline, the run's traces.jsonl: {traces / 1e6:.2f} MB ({traces / n * 1000 / 1e6:.2f} MB per 1,000);"
              f" export / traces = {per_1000 / (traces / n * 1000):.1f}")
        results = Results("export_size.py", f"a static export of {n:,} demo rollouts (rollkit view --export)")
        results.add(f"export of {n:,} rollouts", large / 1e6, "MB")
        results.add(f"writing the export of {n:,} rollouts", seconds, "s")
        results.add("export per 1,000 rollouts", per_1000 / 1e6, "MB", traces / n * 1000 / 1e6,
                    "their traces.jsonl")
        results.save(json_to)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", type=int, nargs="?", default=1000, help="demo rollouts to export")
    json_option(parser)
    args = parser.parse_args()
    main(args.n, args.json)
