"""What the field census costs rk.load: each real fixture read with the
census's walk (rollkit.interop.formats.census, which keeps unknown keys in
info["unmapped"] and kept ones in info["source"]) and, in the same process,
with the walk replaced by one that finds nothing (the baseline). Prints the
median of five reads of each and the ratio. Run as
`python benchmarks/census_load.py [--json PATH]`; asserts nothing."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import rollkit as rk
from rollkit.interop.formats import census
from _common import Results, json_path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
FILES = ["tau2/whissle_airline_run1.json", "tau2/airline_results.json", "verifiers/wiki-search--gpt-4.1-mini/d057f808",
         "mini-swe-agent/sqlfluff__sqlfluff-2419.traj.json", "swe-agent/pydicom__pydicom-1458.traj",
         "inspect/real/0.3.133_openai-gpt-4o-mini_theory-of-mind_bbB4eRCx2rFJLyPH42Cj9r_84043e8.eval"]


def _median_read(path: Path, reads: int = 5) -> float:
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        rk.load(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    results = Results("census_load.py", "reading real fixtures with rk.load with the field census's walk and "
                      "without it (median of 5 reads)")
    walk = census._walk
    for name in FILES:
        path = FIXTURES / name
        rk.load(path)  # imports and first-read costs out of the way
        census._walk = walk
        with_census = _median_read(path)
        census._walk = lambda *args, **kwargs: iter(())
        without = _median_read(path)
        census._walk = walk
        print(f"{name[:60]:60} census {with_census * 1000:8.1f} ms  baseline {without * 1000:8.1f} ms  "
              f"ratio {with_census / without:.2f}")
        results.add(f"rk.load {name[:60]}", with_census * 1000, "ms", without * 1000, "census walk finding nothing")
    results.save(json_path(sys.argv))


if __name__ == "__main__":
    main()
