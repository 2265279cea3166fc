"""Reading other tools' files: `rk.load` against each tool's own reader, on
the same file, in the same run, with the ratio printed (aim: rk.load no
slower than the tool's reader, ratio <= 1).

- inspect-ai: a 2,000-sample `.eval` (the samples of
  tests/fixtures/inspect/adding.eval repeated, written by inspect's
  `write_eval_log`), read by inspect's `read_eval_log` and by `rk.load`.
- verifiers v1: a 2,000-episode `traces.jsonl` (the episodes of
  tests/fixtures/verifiers/v1-run repeated), read by verifiers 0.4's
  `read_episodes` (under the python of a virtualenv holding verifiers:
  $ROLLKIT_BENCH_VERIFIERS_PYTHON; skipped when unset) and by `rk.load`.
- verifiers results.jsonl: 2,000 rollouts (the math-python fixture's lines
  repeated), `rk.load` against a bare `json.loads` of every line (the least
  any reader of the file does; verifiers 0.4 ships no reader for it).
- inspect-ai `.json`: the same 2,000 samples as a JSON log, against
  `read_eval_log`.
- The formats whose tools are not installed here, or ship no reader
  (tau2-bench, SWE-agent / mini-swe-agent trajectories, Harbor's ATIF,
  OpenAI transcripts) and rollkit's own JSON lines: `rk.load` against a
  bare `json.loads` of the same bytes (the floor under any reader: no
  objects built). These ratios are above 1 by construction; they say what
  building rollkit's traces costs over parsing.

Every timing is the best of a few runs in this process; the machine may be
shared, so compare ratios, not seconds.

    PYTHONPATH=. python benchmarks/readers.py [--samples 2000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Results, json_option

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
MEASURED = Results("readers.py", "reading a file with rk.load against each tool's own reader (or a bare "
                   "json.loads) on the same file, best of 2")


def _best(fn, repeat: int = 2) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _report(what: str, ours: float, theirs: float, reader: str) -> None:
    print(f"{what:<34} rk.load {ours:7.3f} s   {reader} {theirs:7.3f} s   ratio {ours / theirs:5.2f}")
    MEASURED.add(f"{what}: rk.load", ours, "s", theirs, reader)


def inspect_eval(folder: Path, samples: int) -> None:
    from inspect_ai.log import read_eval_log, write_eval_log

    import rollkit as rk

    log = read_eval_log(str(FIXTURES / "inspect/adding.eval"))
    base = log.samples
    log.samples = [base[i % len(base)].model_copy(update={"id": f"s{i}", "epoch": 1}) for i in range(samples)]
    log.eval.dataset.samples = samples
    path = folder / "big.eval"
    write_eval_log(log, str(path), "eval")
    theirs = _best(lambda: read_eval_log(str(path)))
    ours = _best(lambda: rk.load(path))
    _report(f"inspect .eval, {samples} samples", ours, theirs, "read_eval_log")
    path = folder / "big.json"
    write_eval_log(log, str(path), "json")
    theirs = _best(lambda: read_eval_log(str(path)))
    ours = _best(lambda: rk.load(path))
    _report(f"inspect .json, {samples} samples", ours, theirs, "read_eval_log")


def verifiers_v1(folder: Path, samples: int) -> None:
    import rollkit as rk

    python = os.environ.get("ROLLKIT_BENCH_VERIFIERS_PYTHON")
    lines = (FIXTURES / "verifiers/v1-run/traces.jsonl").read_text().splitlines()
    run = folder / "v1"
    run.mkdir()
    (run / "traces.jsonl").write_text("\n".join(lines[i % len(lines)] for i in range(samples)) + "\n")
    ours = _best(lambda: rk.load(run))
    if not python:
        print(f"verifiers v1 traces.jsonl: rk.load {ours:.3f} s (set ROLLKIT_BENCH_VERIFIERS_PYTHON to time read_episodes)")
        MEASURED.add(f"verifiers v1, {samples} episodes: rk.load (read_episodes not timed)", ours, "s")
        return
    code = ("import sys, time; from pathlib import Path; from verifiers.v1.utils.trace_store import read_episodes;"
            "from verifiers.v1.trace import Trace; from verifiers.v1.task import WireTaskData;"
            "best = 1e9\nfor _ in range(2):\n t = time.perf_counter(); read_episodes(Path(sys.argv[1]), Trace[WireTaskData]);"
            " best = min(best, time.perf_counter() - t)\nprint(best)")
    theirs = float(subprocess.run([python, "-c", code, str(run)], capture_output=True, text=True, check=True,
                                  timeout=600).stdout.split()[-1])
    _report(f"verifiers v1, {samples} episodes", ours, theirs, "read_episodes")


def verifiers_results(folder: Path, samples: int) -> None:
    import rollkit as rk

    source = FIXTURES / "verifiers/math-python--gpt-5-nano"
    lines = (source / "results.jsonl").read_text().splitlines()
    run = folder / "results"
    run.mkdir()
    path = run / "results.jsonl"
    path.write_text("\n".join(lines[i % len(lines)] for i in range(samples)) + "\n")
    (run / "metadata.json").write_text((source / "metadata.json").read_text())
    ours = _best(lambda: rk.load(path))
    theirs = _best(lambda: [json.loads(line) for line in path.read_text().splitlines()])
    _report(f"verifiers results, {samples} rows", ours, theirs, "json.loads")


def _against_json(what: str, path: Path, lines: bool) -> None:
    """rk.load of `path` against json.loads of its bytes (each line, or the
    whole document)."""
    import rollkit as rk

    def parse() -> None:
        data = path.read_bytes()
        if lines:
            [json.loads(line) for line in data.splitlines() if line.strip()]
        else:
            json.loads(data)

    ours = _best(lambda: rk.load(path), 3)
    theirs = _best(parse, 3)
    _report(what, ours, theirs, "json.loads")


def others(folder: Path, samples: int) -> None:
    import rollkit as rk

    # tau2-bench: the fixture's simulations repeated in one results document.
    tau2 = json.loads((FIXTURES / "tau2/airline_results.json").read_text())
    sims = tau2["simulations"]
    tau2["simulations"] = [{**sims[i % len(sims)], "id": f"sim-{i}"} for i in range(samples)]
    path = folder / "tau2.json"
    path.write_text(json.dumps(tau2, indent=2))
    _against_json(f"tau2 results, {samples} simulations", path, lines=False)
    # SWE-agent: one trajectory a file, as the tool writes them; the larger fixture.
    path = FIXTURES / "swe-agent/6e44b9__sweagenttestrepo-1c2844.traj"
    n = max(1, samples // 20)
    ours = _best(lambda: [rk.load(path) for _ in range(n)], 3)
    theirs = _best(lambda: [json.loads(path.read_bytes()) for _ in range(n)], 3)
    _report(f"SWE-agent .traj, {n} files", ours, theirs, "json.loads")
    # ATIF: one trajectory a line.
    atif = json.dumps(json.loads((FIXTURES / "harbor/atif_rfc_example.json").read_text()))
    path = folder / "atif.jsonl"
    path.write_text("".join(atif + "\n" for _ in range(samples)))
    _against_json(f"ATIF, {samples} trajectories", path, lines=True)
    # Transcripts and rollkit's own format: the verifiers fixture's rollouts,
    # written by rk.save.
    results = folder / "results" / "results.jsonl"
    traces = rk.load(results) if results.exists() else []
    if traces:
        path = rk.save(traces, folder / "chats.jsonl", format="messages")
        _against_json(f"transcripts, {len(traces)} chats", path, lines=True)
        path = rk.save(traces, folder / "traces.jsonl")
        _against_json(f"rollkit traces.jsonl, {len(traces)} traces", path, lines=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=2000)
    json_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollkit-readers-") as tmp:
        folder = Path(tmp)
        inspect_eval(folder, args.samples)
        verifiers_v1(folder, args.samples)
        verifiers_results(folder, args.samples)
        others(folder, args.samples)
    MEASURED.save(args.json)


if __name__ == "__main__":
    sys.exit(main())
