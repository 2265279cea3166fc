"""Helpers shared by the tests of programs, runtimes and servers: what is
still alive after a rollout (processes, listening ports, tasks)."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
from pathlib import Path

PROGRAMS = Path(__file__).parents[1] / "programs"
AGENT = [sys.executable, str(PROGRAMS / "agent.py")]


def zombies() -> list[int]:
    """Children of this process that exited and were never reaped (the
    watchdog among them, once rollkit has told it to exit). Joins the
    watchdog reaper threads first: a watchdog told to exit is reaped by one
    as soon as it ends, which is not yet when the rollout returns."""
    import threading

    for thread in threading.enumerate():
        if thread.name == "rollkit-watchdog-reaper":
            thread.join(20.0)  # only bounds a hang, no timing assertion
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state == "Z" and int(ppid) == os.getpid():
            found.append(int(entry))
    return found


def gone(pid: int) -> bool:
    """True when `pid` no longer runs (absent, or a zombie awaiting its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def processes_in(folder: str | os.PathLike[str]) -> list[int]:
    """Live processes whose working directory is inside `folder`."""
    folder = os.path.realpath(folder)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd").removesuffix(" (deleted)")
        except OSError:
            continue
        if (cwd == folder or cwd.startswith(folder + os.sep)) and not gone(int(entry)):
            found.append(int(entry))
    return found


def processes_marked(marker: str) -> list[int]:
    """Live processes with `marker` as one of their arguments."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv and not gone(int(entry)):
            found.append(int(entry))
    return found


def escaping_program(marker: str, holding: str = "output") -> list[str]:
    """A shell that starts a grandchild which leaves its process group
    (setsid) holding the shell's stdout and stderr (`holding="output"`), or
    its stdin alone (`holding="input"`: it never reads it), waits until the
    grandchild is out of the group (it opens a fifo after setsid), then
    exits 0. The grandchild carries `marker` in its argv so the test can kill it."""
    sleeper = f"{shlex.quote(sys.executable)} -c \"open('escaped.fifo', 'w').write('x'); import time; time.sleep(300)\""
    # (An asynchronous command's stdin is /dev/null unless redirected: fd 3 carries it.)
    holds = {"output": "", "input": " <&3 3<&- >/dev/null 2>&1"}[holding]
    script = (f"exec 3<&0; mkfifo escaped.fifo; setsid {sleeper} {marker}{holds} & read _ < escaped.fifo; "
              "echo started; exit 0")
    return ["sh", "-c", script]


async def kill_marked(marker: str) -> list[int]:
    """Kill every process carrying `marker`; return their pids."""
    pids = processes_marked(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        await exited(pid)
    return pids


def listening_ports() -> set[int]:
    """TCP ports this process listens on (read from /proc, IPv4 and IPv6)."""
    return {port for _, port in listening_sockets()}


def listening_sockets(pid: int | str = "self") -> set[tuple[str, int]]:
    """(address, port) of each TCP socket process `pid` listens on, read
    from /proc (IPv4 and IPv6): "127.0.0.1", "0.0.0.0", "::", "::1", ..."""
    import ipaddress

    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].rsplit(":", 1)
                # /proc writes an address as 32-bit words in host (little-endian) order
                raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, len(address), 8))
                found.add((str(ipaddress.ip_address(raw)), int(port, 16)))
    return found


def other_tasks() -> set[asyncio.Task]:
    """Tasks of the running loop other than the caller's."""
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}


async def exited(pid: int, guard: float = 20.0) -> bool:
    """Wait for `pid` to end (a signal is delivered asynchronously) and say
    whether it did. Waits on the process's pidfd, an explicit exit event;
    `guard` only bounds a hang, it is no timing assertion."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        async with asyncio.timeout(guard):
            await done
    except TimeoutError:
        pass
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return gone(pid)
