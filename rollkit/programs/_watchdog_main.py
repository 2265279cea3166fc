"""The watchdog process itself (see rollkit.programs.watchdog, which starts it).

Run as `python -I -S <this file>`, it imports nothing of rollkit and starts
in a few milliseconds. It reads JSON lines on its standard input, each
`["+group", pid]`, `["-group", pid]`, `["+folder", path]` or
`["-folder", path]`, and keeps the set of what is still alive. When its
input ends, the process that started it is gone (it exited, crashed or was
killed; only that process held the other end of the pipe) or has nothing
left to watch: it then kills every process group still listed with SIGKILL
and removes every folder still listed, and exits. It must stay this small:
it is the last line of defence, and it runs for every rollkit process that
starts programs.
"""

import json
import os
import shutil
import signal
import sys


def main() -> None:
    # Ctrl-C in a terminal reaches the whole foreground process group; the
    # watchdog must outlive its parent's interruption to clean up after it.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    folders: set[str] = set()
    for line in sys.stdin.buffer:
        try:
            op, value = json.loads(line)
        except ValueError:
            continue
        if op == "+group":
            groups.add(int(value))
        elif op == "-group":
            groups.discard(int(value))
        elif op == "+folder":
            folders.add(str(value))
        elif op == "-folder":
            folders.discard(str(value))
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
