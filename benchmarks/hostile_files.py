"""Peak memory of `rk.load` on hostile trace files (issue 23, item 5).

Each case runs `rk.load` in a fresh process and prints that process's peak
resident memory (VmHWM) and what came of the load (the traces read, or
the error's first words). The files are written to a temporary folder and
removed. Run: `python benchmarks/hostile_files.py [--json PATH]` (about 1.5 GB of disk).

`python benchmarks/hostile_files.py view [MB]` measures `rollkit view FILE`
on a large well-formed verifiers file (MB of it, 200 by default): the peak
resident memory (VmHWM) of the command and of the page's kernel, once the
page has been loaded (so the kernel has read its traces), and the seconds
from the command's start to the page. Point PYTHONPATH at another checkout
to measure its code (the command and Voila's kernel inherit it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from _common import Results, json_path

# VmHWM, the process's own high-water mark: ru_maxrss would count this
# script's size too (the kernel keeps the larger over the exec after a vfork).
PROBE = """
import re, sys, warnings
def peak():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
import rollkit as rk
warnings.simplefilter("ignore")
base = peak()
try:
    fmt = sys.argv[2] or None
    outcome = f"{len(rk.load(sys.argv[1], format=fmt, errors='skip'))} traces"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {str(exc).split(': ', 1)[-1][:70]}"
print(f"{peak() / 1024:.0f} {base / 1024:.0f} {outcome}")
"""

LINE = {"example_id": 0, "prompt": [{"role": "user", "content": "hi"}],
        "completion": [{"role": "assistant", "content": "hello"}], "reward": 1.0}


def _write(folder: Path) -> list[tuple[str, Path, str]]:
    cases = []
    big = folder / "string_1gb.jsonl"  # one trace whose text is a 1 GB JSON string
    with open(big, "w") as f:
        f.write('{"example_id": 0, "prompt": [{"role": "user", "content": "')
        chunk = "x" * (1 << 20)
        for _ in range(1024):
            f.write(chunk)
        f.write('"}], "completion": [], "reward": 1.0}\n')
    cases.append(("1 GB JSON string (verifiers)", big, "verifiers"))
    lists = folder / "lists_100mb.json"  # 100 MB of [], as one trajectory document
    with open(lists, "w") as f:
        f.write('{"trajectory_format": "x", "messages": [')
        f.write("[]," * (100 * 2**20 // 3))
        f.write("[]]}")
    cases.append(("100 MB of [], (trajectory)", lists, "trajectory"))
    lines = folder / "lists_lines.jsonl"  # the same, one line per record of 1 MB
    with open(lines, "w") as f:
        for _ in range(100):
            f.write(json.dumps(dict(LINE, extra="[]," * (2**20 // 3))) + "\n")
    cases.append(("100 lines of 1 MB (verifiers)", lines, "verifiers"))
    deep = folder / "deep.jsonl"
    deep.write_text(json.dumps(LINE) + "\n" + '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    cases.append(("JSON nested 100,000 deep", deep, "verifiers"))
    bomb = folder / "bomb.eval"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", "{}")
        with archive.open("samples/1_epoch_1.json", "w", force_zip64=True) as member:
            chunk = b"0" * (1 << 20)
            for _ in range(4096):
                member.write(chunk)
    cases.append((f".eval zip bomb ({bomb.stat().st_size / 2**20:.0f} MB, 4 GB member)", bomb, ""))
    zero = folder / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    cases.append(("symlink to /dev/zero", zero, ""))
    fifo = folder / "fifo.jsonl"
    os.mkfifo(fifo)
    cases.append(("FIFO", fifo, ""))
    return cases


def _peak_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def _descendants(pid: int) -> list[int]:
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            children += [int(c) for c in f.read().split()]
    return [d for c in children for d in (c, *_descendants(c))]


def view(megabytes: int, results: Results) -> None:
    """Peak memory of `rollkit view FILE` and of its page's kernel."""
    import http.client

    with tempfile.TemporaryDirectory(prefix="rollkit-hostile-") as tmp:
        path = Path(tmp) / "results.jsonl"
        text = "x" * 100_000  # 100 kB of completion a line
        with open(path, "w") as f:
            for n in range(megabytes * 10):
                f.write(json.dumps(dict(LINE, example_id=n, completion=[{"role": "assistant", "content": text}])) + "\n")
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rollkit", "view", str(path)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True, cwd=tmp)
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().split()[2]
            port, token = int(url.split(":")[2].split("/")[0]), url.split("?token=")[1]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            conn.request("GET", f"/?token={token}", headers={"Host": f"127.0.0.1:{port}"})
            page = conn.getresponse().read().decode("utf-8", "replace")
            seconds = time.perf_counter() - start
            assert '"output_type": "execute_result"' in page, page[-2000:]  # the kernel ran the page's cell
            kernels = [pid for pid in _descendants(proc.pid) if "ipykernel" in open(f"/proc/{pid}/cmdline").read()]
            print(f"rollkit view on {path.stat().st_size / 2**20:.0f} MB ({megabytes * 10} verifiers lines of 100 kB): "
                  f"command peak {_peak_mb(proc.pid):.0f} MB (held while serving: {_resident_mb(proc.pid):.0f} MB), kernel peak "
                  f"{', '.join(f'{_peak_mb(k):.0f}' for k in kernels)} MB, page after {seconds:.1f} s")
            results.add("rollkit view: the command's peak RSS", _peak_mb(proc.pid), "MB")
            for kernel in kernels:
                results.add("rollkit view: the page kernel's peak RSS", _peak_mb(kernel), "MB")
            results.add("rollkit view: from the command's start to the page", seconds, "s")
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


def main() -> None:
    out = json_path(sys.argv)
    argv = sys.argv[1:] if out is None else [a for a in sys.argv[1:] if a not in ("--json", out)]
    if argv[:1] == ["view"]:
        megabytes = int(argv[1]) if len(argv) > 1 else 200
        results = Results("hostile_files.py", f"rollkit view FILE on a {megabytes} MB verifiers file: peak memory "
                          "(VmHWM) of the command and of its page's kernel")
        view(megabytes, results)
        results.save(out)
        return
    results = Results("hostile_files.py", "peak memory (VmHWM) of rk.load on hostile trace files, each in a fresh "
                      "process; the baseline is that process's peak after its imports")
    with tempfile.TemporaryDirectory(prefix="rollkit-hostile-") as tmp:
        cases = _write(Path(tmp))
        print(f"{'file':44} {'peak MB':>8} {'import MB':>9}  outcome")
        for name, path, fmt in cases:
            done = subprocess.run([sys.executable, "-c", PROBE, str(path), fmt], capture_output=True, text=True,
                                  timeout=600)
            peak, base, outcome = (done.stdout.split(" ", 2) + ["", "", done.stderr[-200:]])[:3]
            print(f"{name:44} {peak:>8} {base:>9}  {outcome.strip()}")
            if peak.isdigit() and base.isdigit():
                results.add(f"{name}: {outcome.strip()[:60]}", int(peak), "MB", int(base), "after the imports")
    results.save(out)


if __name__ == "__main__":
    main()
