"""`SandboxRuntime`: programs run isolated by bubblewrap, with the network policy enforced.

What it owns: wrapping each program `SubprocessRuntime` launches in a
bubblewrap sandbox, the bridge that keeps the framework's routes reachable
from inside, and the filtering proxy that enforces the execution network
policy (L6). Everything else (the clean environment with the rollout's
secret, the working folder and its `read`/`write`, process groups, the
watchdog, timeouts) is `SubprocessRuntime`'s, reused unchanged.

What it enforces, exactly (each program gets its own sandbox):
- files: the host's /usr (and /bin, /lib*, /sbin), Python's prefix and
  rollkit's package directory, all read-only, plus `ro_paths`, plus what each
  launched program needs to run as it does outside (each symlink of its
  chain recreated, a venv's folder and the resolved interpreter's prefix
  bound read-only: a venv's `python` runs through its links); an /etc of the
  sandbox's own, read-only: copies (made once, in rollkit's cache folder) of
  a short list of host entries, only what every user may read (no
  /etc/shadow, no ssl/private), with its own passwd, group, hosts and
  resolv.conf; the working folder read-write at the same path
  as outside (so setup and finalize see what the program sees); private
  size-bounded tmpfs /tmp and /dev/shm; /proc of its own PID namespace; a
  minimal /dev. Nothing else of the host: not its home, not /root, not other
  rollouts' folders, not the rollkit process's files.
- identity: inside, the program is uid 1000 with no capabilities and may
  make no user namespace of its own (bubblewrap's --disable-userns). On the
  host it is never root: it is rollkit's own user, or, when rollkit runs as
  root, a uid and gid of the sandbox's own (picked per runtime from a range
  no account uses, or `nobody` where the user namespace rollkit runs in maps
  too few ids), so a file other users of the host may not read stays
  unreadable inside. bubblewrap then runs as that user; what rollkit (root)
  puts into the working folder is handed to it before each launch (chown
  through directory descriptors, never following a link), and the folders
  it binds read-only are opened by rollkit and bound by descriptor, so
  their parents need not be open to it (a venv under /root works; a 0600
  file in it stays unreadable). Every mount is nosuid, and after each
  program exits the setuid and setgid bits of what it left in the working
  folder are cleared (a setuid file there would work on the host).
- processes: its own PID, IPC and UTS namespaces, a new session. When the
  program exits, the sandbox's PID namespace ends and the kernel kills every
  process left in it (daemons, setsid grandchildren); a kill of the launch
  (stop, abort, agent timeout, the watchdog after the rollkit process died)
  kills bubblewrap, whose sandbox dies with it (--die-with-parent). A kill is
  immediate: `kill_grace` gives no SIGTERM grace inside the sandbox. The
  compiled first process is the sandbox's PID 1 and reaps its orphans.
- limits (setrlimit on the program, inherited by its children): processes
  (also a pids cgroup where rollkit may make one), open files, memory
  (address space), CPU seconds, file size; and the tmpfs sizes. Each limit
  hit is named on the trace (ProgramHarness puts `limits_named_by` on the
  warnings, on `info["program_runs"][i]["limit"]`, and in the error of a
  program that failed): from the kernel where it says so (killed by SIGXCPU
  or SIGXFSZ, the CPU time used up, /tmp or /dev/shm full at exit, process
  creations the pids cgroup refused); from the error the program printed
  where the kernel only returns one (EMFILE, ENOMEM or MemoryError, EAGAIN
  from fork, ENOSPC), which a program that swallows it leaves unreported.
  The working folder is on the host's disk: only `file_bytes` bounds what
  one file there may hold, not the folder's total.
- network: its own network namespace with loopback only, no nameserver and
  a minimal /etc/hosts. Inside, a relay listens on 127.0.0.1 at each port of
  the framework's routes (the ports in the policy's `keep` list and in the
  program's environment) and forwards to a Unix socket bound in from
  outside, where rollkit forwards it to the real 127.0.0.1 port. All other
  traffic goes through an HTTP proxy outside (HTTP_PROXY/HTTPS_PROXY point to
  its relay; CONNECT and plain HTTP; rollkit.programs.sandbox_proxy, which
  parses each request strictly and refuses a malformed one in HTTP, logging
  one line per kind per sandbox), which applies the `NetworkPolicy` by
  host name and by address and resolves only names it allows; host-local
  addresses (loopback, 0.0.0.0/8, link-local, unspecified, multicast, and
  every address of the machine's interfaces, read when the sandbox starts)
  are refused unless an allow entry names them. Hosts are compared and connected
  to in one canonical spelling (rollkit.core.network_policy), so
  `::ffff:127.0.0.1`, `0x7f.1` or `LOCALHOST.` is refused as 127.0.0.1 is. A
  program that ignores the proxy reaches nothing.
  Each relay (the proxy, each bridged route) holds at most
  `relay_connections` of the sandbox's connections at once (by default 64,
  at most 1/32 of rollkit's descriptor limit): one more is answered in HTTP
  (503 by the proxy, 429 by a route's relay) and closed, so one program
  cannot take rollkit's descriptors from the rollouts beside it. Inside,
  the relay rests its listeners while out of descriptors (no spinning).

Where bubblewrap is missing or user namespaces are off, `start` fails with a
`SandboxError` saying what to install or enable.

It must not know about rollouts, models or the interception server.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import resource
import secrets
import select
import shutil
import signal
import stat
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.cache_folder import user_cache_folder
from ..core.network_policy import Decision, host_addresses
from ..core.checks import whole
from ..core.errors import SandboxError
from ..core.runtime import NetworkPolicy
from . import guard, watchdog
from .sandbox_proxy import FilteringProxy, Relay
from .subprocess_runtime import Program, SubprocessRuntime

__all__ = ["SandboxRuntime", "sandbox_unavailable"]

_INIT = Path(__file__).with_name("_sandbox_init.py")
_INIT_SOURCE = Path(__file__).with_name("_sandbox_init.c")
_INSIDE_INIT = "/run/rollkit-init"
_compiled: list[Path | None] = []  # the compiled init, once looked for
_ETC_BOUND = ("alternatives", "ssl/certs")  # folders of many symlinks into /usr: bound, not copied
_etc: list[Path] = []  # the sandbox's /etc, once made
log = logging.getLogger("rollkit")
_PACKAGE = Path(__file__).resolve().parent.parent  # rollkit/: the harness programs live here
_INSIDE_CTL = "/run/rollkit"
_UID = 1000
_ETC = (
    "alternatives", "ssl", "ca-certificates", "ca-certificates.conf", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf", "mime.types", "os-release", "debian_version",
    "protocols", "services", "bash.bashrc", "profile", "inputrc", "terminfo", "magic", "gitconfig",
)
_LOCAL_URL = re.compile(r"\bhttps?://(?:127\.0\.0\.1|localhost):(\d+)")
_LIMIT_SIGNALS = {24: "cpu_seconds (SIGXCPU)", 25: "file_bytes (SIGXFSZ)"}
# Limits the kernel enforces with an error, not a signal or a counter: what
# a program then prints. In the sandbox these errors have no other cause
# than the limit (EMFILE: the descriptor limit; EAGAIN from fork or a new
# thread: the process limit; ENOMEM: the address-space limit, if set; ENOSPC
# on /tmp or /dev/shm: tmp_bytes, else the host's disk under the folder).
_OUTPUT_SIGNS = (
    ("open_files", re.compile(r"Too many open files(?! in system)|\bEMFILE\b|\[Errno 24\]")),
    ("processes", re.compile(r"(?:fork|clone|spawn|thread)\b[^\n]{0,80}(?:Resource temporarily unavailable|EAGAIN)"
                             r"|can't start new thread|fork: retry|Cannot fork", re.I)),
    ("memory_bytes", re.compile(r"MemoryError|Cannot allocate memory|\bENOMEM\b|\[Errno 12\]|bad_alloc"
                                r"|out of memory", re.I)),
    ("tmp_bytes", re.compile(r"No space left on device|\bENOSPC\b|\[Errno 28\]")),
)
_checked: dict[str, str | None] = {}  # bwrap path -> why it cannot run sandboxes (None: it can)
_userns_guard: dict[str, bool] = {}  # bwrap path -> it has --disable-userns (bubblewrap 0.8.0 and later)
# Where a rollkit running as root finds its sandboxes' own uids and gids: far
# above any account's (useradd stops at 60000), one per runtime.
_IDS_FIRST, _IDS_COUNT = 0x10000000, 1 << 20
_NOBODY = 65534


def _mapped(kind: str, first: int, count: int) -> bool:
    """Whether the ids [first, first + count) exist in this process's user namespace."""
    try:
        lines = Path(f"/proc/self/{kind}_map").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        inside, _, span = map(int, line.split())
        if inside <= first and first + count <= inside + span:
            return True
    return False


def _sandbox_ids() -> tuple[int, int] | None:
    """The host uid and gid a new sandbox runs as: None when rollkit is not
    root (the sandbox is then rollkit's own user, which the kernel maps
    without privilege), else a pair of its own from `_IDS_FIRST` on (or
    nobody's, where this user namespace maps too few ids, as in a rootless
    container)."""
    if os.geteuid() != 0:
        return None
    if _mapped("uid", _IDS_FIRST, _IDS_COUNT) and _mapped("gid", _IDS_FIRST, _IDS_COUNT):
        own = _IDS_FIRST + secrets.randbelow(_IDS_COUNT)
        return own, own
    return _NOBODY, _NOBODY


def _as_ids(ids: tuple[int, int] | None) -> dict[str, Any]:
    """Process-creation arguments that run a child as `ids` (no supplementary groups)."""
    return {} if ids is None else {"user": ids[0], "group": ids[1], "extra_groups": []}


def sandbox_unavailable(bwrap: str = "bwrap") -> str | None:
    """Why SandboxRuntime cannot start here with the bubblewrap binary `bwrap`
    (not found, or it cannot make the namespaces a sandbox needs), in words
    that say what to install or enable; None when it can. Asked once per
    binary, as the user the sandboxes run as (a probe sandbox that runs
    `true`); `SandboxRuntime.start` raises SandboxError with this reason, and
    a caller that would rather skip than fail asks it first."""
    if bwrap in _checked:
        return _checked[bwrap]
    path = shutil.which(bwrap)
    if path is None:
        why = (f"bubblewrap ({bwrap!r}) was not found: install it (Debian/Ubuntu: apt-get install bubblewrap; "
               "Fedora: dnf install bubblewrap)")
    else:
        try:
            probe = [path, "--unshare-user", "--disable-userns", "--unshare-net", "--unshare-pid",
                     "--ro-bind", "/", "/", "true"]
            ids = _as_ids(_sandbox_ids())
            result = subprocess.run(probe, capture_output=True, timeout=30, cwd="/", **ids)
            _userns_guard[path] = b"Unknown option" not in result.stderr
            if not _userns_guard[path]:
                log.warning("bubblewrap (%s) is older than 0.8.0 (no --disable-userns): programs in SandboxRuntime "
                            "may make user namespaces of their own; upgrade bubblewrap to deny them", path)
                probe.remove("--disable-userns")
                result = subprocess.run(probe, capture_output=True, timeout=30, cwd="/", **ids)
            why = None if result.returncode == 0 else (
                f"bubblewrap ({path}) cannot create namespaces here ({result.stderr.decode(errors='replace').strip()}): "
                "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces > 0, and on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)")
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"bubblewrap ({path}) does not run: {exc}"
    _checked[bwrap] = why
    return why


def _pids_cgroup_parent() -> Path | None:
    """A cgroup folder this process may make pids-limited children in, or None.

    RLIMIT_NPROC counts every process of the sandbox's host user, and a
    rollkit that is not root runs all its sandboxes as itself, so where it
    can, each sandbox also runs in its own cgroup with `pids.max` (cgroup
    v1's pids hierarchy, or v2 with the pids controller delegated)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, own = line.split(":", 2)
        if controllers == "pids":
            candidates = [Path("/sys/fs/cgroup/pids") / own.lstrip("/")]
        elif controllers == "":
            candidates = [Path(root) / own.lstrip("/") for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")]
        else:
            continue
        for folder in candidates:
            probe = folder / f"rollkit-probe-{os.getpid()}"
            try:
                probe.mkdir()
            except OSError:
                continue
            usable = (probe / "pids.max").exists()
            probe.rmdir()
            if usable:
                return folder
    return None


def _etc_folder() -> Path:
    """The sandbox's /etc (without passwd, which is per runtime): copies of
    the `_ETC` host entries, only what every user may read (symlinks kept as
    they are: they point into /usr), with empty folders where `_ETC_BOUND`
    are bound, and its own group, hosts and resolv.conf.

    Made once per machine into rollkit's cache folder, named by what it
    copies (paths, sizes, modes, times, link targets), so a changed host
    entry makes a new one: writing a few hundred small files costs seconds on
    a slow disk. Where the cache cannot be written, a fresh temporary folder
    per process (watched, so it goes when the process dies)."""
    if _etc:
        return _etc[0]
    manifest: list[str] = []
    for name in _ETC:
        _list_readable(Path("/etc", name), manifest)
    key = hashlib.sha256("\n".join(manifest).encode()).hexdigest()[:16]
    target = user_cache_folder() / f"sandbox-etc-{key}"
    if not (target / "group").is_file():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
        except OSError:
            partial = target = Path(tempfile.mkdtemp(prefix="rollkit-sandbox-etc-"))
            watchdog.watch_folder(target)
        for name in _ETC:
            _copy_readable(Path("/etc", name), partial / name)
        (partial / "passwd").write_text("")  # where the runtime's own is bound
        (partial / "group").write_text(f"root:x:0:\nsandbox:x:{_UID}:\n")
        (partial / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
        (partial / "resolv.conf").write_text("# empty: names resolve only through the proxy (HTTP_PROXY)\n")
        partial.chmod(0o755)
        if partial != target:
            try:
                os.rename(partial, target)
            except OSError:  # another process made it meanwhile
                shutil.rmtree(partial, ignore_errors=True)
    _etc.append(target)
    return target


def _compiled_init() -> Path | None:
    """The C version of the sandbox's first process, built with the system's
    C compiler into rollkit's cache folder on first use (a Python start per
    launch costs more than the rest of it), or None where it cannot be built."""
    if _compiled:
        return _compiled[0]
    source = _INIT_SOURCE.read_bytes()
    cache = user_cache_folder()
    target = cache / f"sandbox-init-{hashlib.sha256(source).hexdigest()[:16]}"
    found: Path | None = target if target.is_file() else None
    compiler = shutil.which("cc") or shutil.which("gcc")
    if found is None and compiler is not None:
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        try:
            cache.mkdir(parents=True, exist_ok=True)
            # Static where the C library allows it: no dynamic loading per launch.
            for flags in (["-static"], []):
                result = subprocess.run([compiler, "-O2", *flags, "-o", str(partial), str(_INIT_SOURCE)],
                                        capture_output=True, timeout=120)
                if result.returncode == 0:
                    break
            if result.returncode == 0:
                os.replace(partial, target)
                found = target
            else:
                log.warning("SandboxRuntime uses its Python init (slower launches): %s failed: %s",
                            compiler, result.stderr.decode(errors="replace")[-500:])
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("SandboxRuntime uses its Python init (slower launches): %s", exc)
        finally:
            partial.unlink(missing_ok=True)
    _compiled.append(found)
    return found


def _relay_share() -> int:
    """How many connections one sandbox may hold through each of its relays
    by default: 64, and at most 1/32 of this process's descriptor limit (a
    bridged connection costs rollkit up to three descriptors, and a sandbox
    has three relays or more), at least 4."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 64 if soft == resource.RLIM_INFINITY else max(4, min(64, soft // 32))


class _Pipe(asyncio.Protocol):
    """One end of a bridged connection: what arrives is written to the other
    end's transport as it comes (protocols, not streams: no task, no copy and
    no await per chunk, which is what a model call through the bridge pays).

    Made for a connection from the sandbox (`relay` given): past the relay's
    cap it answers 429 and closes; else it opens the other end to the
    host's 127.0.0.1:`port` and reads nothing until that is up (where that
    fails, it answers 503)."""

    def __init__(self, port: int | None = None, peer: _Pipe | None = None, relay: Relay | None = None) -> None:
        self.port, self.peer, self.relay = port, peer, relay
        self.transport: asyncio.Transport | None = None
        self.eof = False
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.peer is None:
            if self.relay is not None and not self.relay.admit():
                transport.write(self.relay.too_many(429))  # type: ignore[attr-defined]
                transport.close()
                return
            self.counted = self.relay is not None
            transport.pause_reading()  # type: ignore[attr-defined]
            self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        assert self.transport is not None and self.port is not None
        try:
            _, self.peer = await asyncio.get_running_loop().create_connection(
                lambda: _Pipe(peer=self), "127.0.0.1", self.port)
        except OSError as exc:
            if self.relay is not None and not self.transport.is_closing():
                self.transport.write(self.relay.refusal(503, f"rollkit could not open the route's connection: {exc}"))
            self.transport.close()
            return
        if not self.transport.is_closing():
            self.transport.resume_reading()
        else:
            self.peer.transport.close()  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        other = self.peer.transport if self.peer is not None else None
        if other is None or self.peer.eof:  # type: ignore[union-attr]
            return False  # both directions ended: close
        other.write_eof()
        return True  # the other direction may still carry data

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self.counted = False
            self.relay.open -= 1  # type: ignore[union-attr]
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    # Flow control: a full write buffer here pauses reading at the other end.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.transport.is_closing():
            self.peer.transport.resume_reading()


class SandboxProgram(Program):
    """A program in a sandbox: its exit status comes from the sandbox's first
    process (bubblewrap reports a signal death as 128 + signal).

    `limits_hit` names each resource limit the kernel says the program hit:
    killed by its signal (SIGXCPU, SIGXFSZ), CPU time used up (the SIGKILL
    after an ignored SIGXCPU), /tmp or /dev/shm left full, process creations
    refused by the pids cgroup. `limits_named_by(output)` adds those whose
    error the program printed (see `_OUTPUT_SIGNS`)."""

    def __init__(self, process: asyncio.subprocess.Process, argv: Sequence[str], runtime: SandboxRuntime,
                 status_fd: int, cgroup: Path | None) -> None:
        super().__init__(process, argv, runtime)
        self._sandbox = runtime
        self._status_fd = status_fd
        self._cgroup = cgroup
        self._status: dict[str, Any] | None = None
        self.limits_hit: list[str] = []

    @property
    def limit_hit(self) -> str | None:
        """The limits hit, in one line (None: none)."""
        return "; ".join(self.limits_hit) or None

    def limits_named_by(self, output: str) -> list[str]:
        """The limits hit: `limits_hit` and those whose error `output` shows."""
        hits = list(self.limits_hit)
        for name, sign in _OUTPUT_SIGNS:
            value = self._sandbox.tmp_bytes if name == "tmp_bytes" else self._sandbox.limits[name]
            found = sign.search(output[-(1 << 16):])
            if value is None or found is None or any(name in hit for hit in hits):
                continue
            where = " or the host's disk under the working folder" if name == "tmp_bytes" else ""
            hits.append(f"the sandbox's {name} limit ({value}{where}) was likely hit: the program printed "
                        f"{found.group(0)!r}")
        return hits

    @property
    def returncode(self) -> int | None:
        if self.process.returncode is None:
            return None
        self._read_status()
        return self._status["status"] if self._status else self.process.returncode

    def _read_status(self) -> None:
        if self._status_fd < 0:
            return
        try:
            code, signum, cpu_ms, tmp_full, shm_full = map(int, os.read(self._status_fd, 128).split())
            self._status = {"status": code, "signal": signum or None}
        except (OSError, ValueError):  # the sandbox died before its first process could say
            self._status = None
        os.close(self._status_fd)
        self._status_fd = -1
        if self._status is None:
            return
        cpu = self._sandbox.limits["cpu_seconds"]
        if signum in _LIMIT_SIGNALS:
            self.limits_hit.append(f"the program was killed by the sandbox's {_LIMIT_SIGNALS[signum]} limit")
        elif cpu is not None and cpu_ms >= cpu * 1000:
            self.limits_hit.append(f"the program used up the sandbox's cpu_seconds limit ({cpu} s of CPU; "
                                   f"{_signal_name(signum)})")
        for full, where in ((tmp_full, "/tmp"), (shm_full, "/dev/shm")):
            if full:
                self.limits_hit.append(f"{where} was full when the program exited: the sandbox's tmp_bytes limit "
                                       f"({self._sandbox.tmp_bytes})")

    async def _reap(self) -> int:
        await super()._reap()
        status = self.returncode
        if self._cgroup is not None:
            # Bubblewrap exits after its PID namespace is empty: so is the cgroup.
            try:
                refused = int(dict(line.split() for line in (self._cgroup / "pids.events").read_text().splitlines())
                              .get("max", 0))
            except (OSError, ValueError):
                refused = 0
            if refused:
                self.limits_hit.append(f"the sandbox's processes limit ({self._sandbox.limits['processes']}) refused "
                                       f"{refused} process creations (fork/clone)")
            _remove_cgroup(self._cgroup)
            self._cgroup = None
        folder = self._sandbox._workdir
        if folder is not None and self._sandbox.alive:
            # The sandbox is gone (its PID namespace with it): nothing changes the folder meanwhile.
            await asyncio.to_thread(_clear_special_bits, folder)
        return status  # type: ignore[return-value]


class SandboxRuntime(SubprocessRuntime):
    """Programs run in bubblewrap sandboxes (see the module docstring).

    Beyond `SubprocessRuntime`'s arguments: `ro_paths` are more host paths
    bound read-only (e.g. where a CLI agent is installed); `hosts` maps names
    the proxy resolves itself (name -> address) before the system resolver;
    `processes`, `open_files`, `memory_bytes`, `cpu_seconds` and `file_bytes`
    are the programs' resource limits (None: the host's); `tmp_bytes` bounds
    each of /tmp and /dev/shm. `relay_connections` caps the connections the
    sandbox holds at once through each relay (the proxy, each bridged route;
    None: 64, at most 1/32 of rollkit's descriptor limit, at least 4): one
    more is answered 503 by the proxy, 429 by a route's relay, and closed.
    `bwrap` is the bubblewrap executable.
    """

    kind = "sandbox"

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        pass_env: Iterable[str] = (),
        ro_paths: Iterable[str | os.PathLike[str]] = (),
        hosts: Mapping[str, str] | None = None,
        processes: int | None = 1024,
        open_files: int | None = 4096,
        memory_bytes: int | None = None,
        cpu_seconds: int | None = None,
        file_bytes: int | None = 1 << 30,
        tmp_bytes: int = 256 << 20,
        kill_grace: float = 2.0,
        drain_grace: float = 1.0,
        bwrap: str = "bwrap",
        compiled_init: bool = True,
        relay_connections: int | None = None,
    ) -> None:
        super().__init__(env=env, pass_env=pass_env, kill_grace=kill_grace, drain_grace=drain_grace)
        if isinstance(ro_paths, (str, os.PathLike)):
            raise TypeError("ro_paths is a list of paths, e.g. ro_paths=['/opt/tool']")
        self.ro_paths = tuple(str(Path(p).resolve()) for p in ro_paths)
        self.hosts = {str(k): str(v) for k, v in (hosts or {}).items()}
        self.limits = {
            name: None if value is None else whole("SandboxRuntime", name, value, minimum=1)
            for name, value in (("processes", processes), ("open_files", open_files), ("memory_bytes", memory_bytes),
                                ("cpu_seconds", cpu_seconds), ("file_bytes", file_bytes))
        }
        self.tmp_bytes = whole("SandboxRuntime", "tmp_bytes", tmp_bytes, minimum=1 << 20)
        self.relay_connections = None if relay_connections is None else whole(
            "SandboxRuntime", "relay_connections", relay_connections, minimum=1)
        self._relay_cap = 0
        self.relays: dict[int, Relay] = {}  # 0: the proxy, else the bridged port
        self.bwrap = bwrap
        self.compiled_init = bool(compiled_init)
        self._init: list[str] = []
        self._compiled_path: Path | None = None
        self.policy = NetworkPolicy()
        self.kept: list[str] = []
        self.refused: list[str] = []  # what the proxy refused, "host:port: why"
        self.proxy: FilteringProxy | None = None  # its `refusals` count what it refused, by kind
        self._local: frozenset[Any] = frozenset()  # host_addresses() at start
        self._covered: list[Path] = []
        self._placed: dict[Path, Path] = {}  # a host path -> where bubblewrap finds it (see _stage)
        self._ctl: Path | None = None
        self._servers: dict[int, asyncio.AbstractServer] = {}  # host port (0: the proxy) -> Unix socket server
        self._proxy_port = 3128
        self._fds: set[int] = set()
        self._base_args: list[str] = []
        self._relays: list[tuple[int, str]] = []
        self._cgroups: Path | None = None
        self._etc: Path | None = None
        self._ids: tuple[int, int] | None = None  # the programs' host uid and gid when rollkit is root
        self._launcher: list[str] = []  # what runs bubblewrap as the sandbox's user from the staging namespace
        self._staged: tuple[Path, int] | None = None  # see _stage

    # ---- lifetime -----------------------------------------------------------
    async def _start(self) -> None:
        why = await asyncio.to_thread(sandbox_unavailable, self.bwrap)
        if why is not None:
            raise SandboxError(f"SandboxRuntime cannot start: {why}")
        self._bwrap_path = shutil.which(self.bwrap)
        if self.limits["processes"] is not None:
            self._cgroups = await asyncio.to_thread(_pids_cgroup_parent)
        compiled = await asyncio.to_thread(_compiled_init) if self.compiled_init else None
        self._etc = await asyncio.to_thread(_etc_folder)
        self._init = [_INSIDE_INIT] if compiled else [sys.executable, "-I", "-S", str(_INIT)]
        self._compiled_path = compiled
        self._ids = _sandbox_ids()
        self._local = await asyncio.to_thread(host_addresses)  # the machine's own addresses: host-local
        await super()._start()
        self._ctl = Path(tempfile.mkdtemp(prefix="rollkit-sandbox-"))
        watchdog.watch_folder(self._ctl)
        self._write_etc()
        guard.quiet_accept_errors()
        self._relay_cap = self.relay_connections or _relay_share()
        self.relays = {0: Relay("proxy", self._relay_cap)}
        self.proxy = FilteringProxy(self.relays[0], self._decision, self.refused)
        self._servers[0] = await asyncio.start_unix_server(self.proxy.handle, path=str(self._ctl / "proxy.sock"))
        if self._ids is not None:
            # The sandbox's user must enter its folders and connect to the
            # proxy's socket; nobody else may.
            for path in (self._workdir, self._ctl, self._ctl / "proxy.sock"):
                os.chown(path, *self._ids)
        self._base_args = await self._sandbox_args()

    async def _stop(self) -> None:
        try:
            await super()._stop()
        finally:
            for server in self._servers.values():
                server.close()
            self._servers.clear()
            for fd in self._fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fds.clear()
            if self._staged is not None:
                os.close(self._staged[1])
                watchdog.remove_folder(self._staged[0])  # empty folders: the mounts were never the host's
                self._staged = None
            if self._ctl is not None:
                watchdog.remove_folder(self._ctl)

    def _write_etc(self) -> None:
        """The sandbox's passwd (its home is this runtime's folder); the rest
        of its /etc is `_etc_folder()`'s."""
        assert self._ctl is not None
        (self._ctl / "passwd").write_text(f"root:x:0:0::/:/bin/sh\nsandbox:x:{_UID}:{_UID}::{self._workdir}:/bin/sh\n")

    async def _stage(self, sources: list[Path]) -> dict[Path, Path]:
        """Where bubblewrap, running as the sandbox's user, finds each of
        `sources` it could not reach on its own (a folder under a private
        home: Python under /root/.pyenv, rollkit's cache under /root/.cache).

        bubblewrap resolves what it binds as the user it runs as, so those
        are bound, by root, onto empty folders of a staging folder that user
        may enter, in a mount namespace of rollkit's own (the host's mounts
        are untouched; the namespace lives while its descriptor is open and
        bubblewrap is started inside it through nsenter, then made the
        sandbox's user by setpriv). What is inside keeps its own
        permissions: a 0600 file of root's stays unreadable."""
        # In a temporary folder every user may enter (TMPDIR may be private).
        where = next((d for d in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm")
                      if Path(d).is_dir() and _open_to_all(Path(d, "stage"))), None)
        stage = Path(tempfile.mkdtemp(prefix="rollkit-stage-", dir=where))
        stage.chmod(0o755)
        watchdog.watch_folder(stage)
        pairs: list[str] = []
        placed: dict[Path, Path] = {}
        for number, source in enumerate(sources):
            target = stage / str(number)
            target.mkdir() if source.is_dir() else target.touch()
            placed[source] = target
            pairs += [str(source), str(target)]
        script = 'while [ $# -gt 0 ]; do mount --rbind "$1" "$2" || exit 1; shift 2; done; echo ready; read _'
        try:
            helper = await asyncio.create_subprocess_exec(
                "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *pairs,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, cwd="/")
        except OSError as exc:
            shutil.rmtree(stage, ignore_errors=True)
            watchdog.forget_folder(stage)
            raise SandboxError(f"SandboxRuntime cannot start: {exc}; rollkit runs as root and binds "
                               f"{[str(s) for s in sources]}, which its sandboxes' user may not reach, through a "
                               "mount namespace of its own: install util-linux (unshare, nsenter, setpriv), or make "
                               "those folders' parents open to every user (chmod o+x)") from None
        assert helper.stdin is not None and helper.stdout is not None and helper.stderr is not None
        try:
            ready = await helper.stdout.readline()
            namespace = os.open(f"/proc/{helper.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC) if ready else -1
        finally:
            helper.stdin.close()
            errors = (await helper.stderr.read()).decode(errors="replace").strip()
            await helper.wait()
        if namespace < 0:
            shutil.rmtree(stage, ignore_errors=True)
            watchdog.forget_folder(stage)
            raise SandboxError(f"SandboxRuntime cannot start: binding {[str(s) for s in sources]} for its sandboxes' "
                               f"user failed: {errors}")
        self._staged = (stage, namespace)
        assert self._ids is not None
        self._launcher = [shutil.which("nsenter") or "nsenter", # not inherited: the program would hold it
                          f"--mount=/proc/{os.getpid()}/fd/{namespace}", "--",
                          shutil.which("setpriv") or "setpriv", f"--reuid={self._ids[0]}",
                          f"--regid={self._ids[1]}", "--clear-groups", "--"]
        return placed

    async def _stage_more(self, sources: list[Path]) -> dict[Path, Path]:
        """`_stage` for a launch: into the staging namespace there is (one
        more folder each), or a first one."""
        if self._staged is None:
            return await self._stage(sources)
        stage, namespace = self._staged
        placed: dict[Path, Path] = {}
        pairs: list[str] = []
        for source in sources:
            target = Path(tempfile.mkdtemp(dir=stage)) if source.is_dir() else Path(tempfile.mkstemp(dir=stage)[1])
            target.chmod(0o755)
            placed[source] = target
            pairs += [str(source), str(target)]
        script = 'while [ $# -gt 0 ]; do mount --rbind "$1" "$2" || exit 1; shift 2; done'
        done = await asyncio.create_subprocess_exec(
            shutil.which("nsenter") or "nsenter", f"--mount=/proc/{os.getpid()}/fd/{namespace}", "--",
            "sh", "-c", script, "sh", *pairs, stderr=asyncio.subprocess.PIPE, cwd="/", pass_fds=(namespace,))
        _, errors = await done.communicate()
        if done.returncode != 0:
            raise SandboxError(f"SandboxRuntime cannot bind {[str(s) for s in sources]} for its sandboxes' user: "
                               f"{errors.decode(errors='replace').strip()}")
        return placed

    async def _sandbox_args(self) -> list[str]:
        assert self._ctl is not None and self._etc is not None
        # The host entries bound read-only: (source, where inside).
        bound: list[tuple[Path, str]] = [(self._etc, "/etc")]
        seen: list[Path] = [Path("/usr")]
        self._covered = seen  # what the sandbox sees of the host (a launch binds what its program needs more)
        for path in (sys.prefix, sys.base_prefix, *_site_dirs(), str(_PACKAGE), *self.ro_paths):
            real = Path(path).resolve()
            # A folder inside one already bound is seen through that bind.
            if real.exists() and not any(real == s or s in real.parents for s in seen):
                seen.append(real)
                bound.append((real, str(real)))
        if self._compiled_path is not None:
            bound.append((self._compiled_path, _INSIDE_INIT))
        # The working folder and the control folder are the sandbox user's,
        # but TMPDIR may lie in a folder it cannot enter (pytest's, a private home).
        own = [self._workdir, self._ctl]
        unreachable = [source for source in [*(s for s, _ in bound), *own]
                       if self._ids is not None and source is not None and not _open_to_all(source)]
        placed = self._placed = await self._stage(unreachable) if unreachable else {}
        args = [self._bwrap_path, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--uid", str(_UID), "--gid", str(_UID),
                "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                "--ro-bind", "/usr", "/usr"]
        if _userns_guard.get(self._bwrap_path or "", False):
            args.insert(2, "--disable-userns")
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/", name)
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                args += ["--ro-bind", str(path), str(path)]
        # /etc: one folder bound as a whole, the big folders of symlinks bound
        # live into it (each mount costs bubblewrap a scan of the mount table).
        args += ["--ro-bind", str(placed.get(self._etc, self._etc)), "/etc",
                 "--ro-bind", str(placed.get(self._ctl, self._ctl) / "passwd"), "/etc/passwd"]
        for name in _ETC_BOUND:
            if (self._etc / name).is_dir():
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--size", str(self.tmp_bytes), "--tmpfs", "/tmp",
                 "--size", str(self.tmp_bytes), "--tmpfs", "/dev/shm"]
        for source, inside in bound[1:]:
            if inside != _INSIDE_INIT:
                args += ["--ro-bind", str(placed.get(source, source)), inside]
        workdir = str(self._workdir)
        args += ["--bind", str(placed.get(self._workdir, workdir)), workdir,
                 "--ro-bind", str(placed.get(self._ctl, self._ctl)), _INSIDE_CTL, "--chdir", workdir]
        if self._compiled_path is not None:
            # The compiled init is the sandbox's PID 1 and reaps its orphans
            # itself: one process fewer per launch.
            args += ["--ro-bind", str(placed.get(self._compiled_path, self._compiled_path)), _INSIDE_INIT,
                     "--as-pid-1"]
        return [*self._launcher, *args]

    # ---- network ------------------------------------------------------------
    async def apply_network_policy(self, policy: NetworkPolicy, keep: list[str]) -> dict[str, Any]:
        """Enforced, restricting or not: the sandbox has no network but the
        framework's routes and the proxy, which applies `policy`."""
        self.policy = policy
        self.kept = list(dict.fromkeys([*self.kept, *keep]))
        self._rules = Decision(policy.allow, policy.block, self.hosts, self._local)
        return {
            "enforced": True, "runtime": self.kind, "allow": list(policy.allow), "block": list(policy.block),
            "kept": list(keep),
            "isolation": "own network namespace, loopback only; the kept routes are relayed in over Unix sockets",
            "proxy": "HTTP proxy outside the sandbox (CONNECT and plain HTTP) applies allow/block by host name and "
                     "by address; host-local addresses need an allow entry",
            "dns": "no nameserver inside; the proxy resolves only names the policy allows",
        }

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        out = super().environment(env)
        proxy = f"http://127.0.0.1:{self._proxy_port}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            out.setdefault(name, proxy)
        for name in ("NO_PROXY", "no_proxy"):
            out.setdefault(name, "127.0.0.1,localhost,::1")
        return out

    async def _bridge(self, port: int) -> Path:
        """The Unix socket that forwards to the host's 127.0.0.1:`port`."""
        assert self._ctl is not None
        path = self._ctl / f"{port}.sock"
        if port not in self._servers:
            loop = asyncio.get_running_loop()
            relay = self.relays[port] = Relay(f"relay to 127.0.0.1:{port}", self._relay_cap)
            self._servers[port] = await loop.create_unix_server(lambda: _Pipe(port, relay=relay), path=str(path))
            if self._ids is not None:
                os.chown(path, *self._ids)
        return path

    def _decision(self) -> Decision:
        return getattr(self, "_rules", None) or Decision(self.policy.allow, self.policy.block, self.hosts, self._local)

    # ---- programs -----------------------------------------------------------
    def _command(self, argv: list[str]) -> tuple[list[str], tuple[int, ...], Any]:
        # The sandbox's first process reports the program's exit on this pipe.
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(write_fd, True)
        self._fds.update((read_fd, write_fd))
        relays = [*self._relays, (self._proxy_port, f"{_INSIDE_CTL}/proxy.sock")]
        limits = dict(self.limits)
        if self._ids is not None and limits["processes"] is not None:
            # RLIMIT_NPROC counts every process of the sandbox's own user,
            # bubblewrap outside the sandbox too: one more than the program's.
            limits["processes"] += 1
        limits = ",".join(f"{name}={value}" for name, value in limits.items() if value is not None)
        cgroup, join_fd = None, -1
        if self._cgroups is not None:
            cgroup = self._cgroups / f"rollkit-sandbox-{os.urandom(6).hex()}"
            try:
                cgroup.mkdir()
                watchdog.watch_folder(cgroup)  # emptied by the watchdog's kills, an empty cgroup can be removed
                (cgroup / "pids.max").write_text(str(self.limits["processes"]))
                # The sandbox's first process joins the cgroup through this
                # descriptor before it starts the program: every process of
                # the program is born in it.
                join_fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
                self._fds.add(join_fd)
            except OSError:
                _remove_cgroup(cgroup)
                cgroup = None
        command = [*self._base_args, *self._program_binds(argv[0]), "--", *self._init, str(write_fd), str(join_fd), limits,
                   ",".join(f"{port}={path}" for port, path in relays), "--", *argv]
        passed = (write_fd,) if join_fd < 0 else (write_fd, join_fd)
        return command, passed, (read_fd, passed, cgroup)

    def _program_binds(self, executable: str) -> list[str]:
        """bubblewrap arguments that make `executable` run inside as it does
        outside (see `_program_needs`): each symlink along its chain
        recreated (a venv's `python` -> the interpreter it links to), a
        venv's folder (pyvenv.cfg, its site-packages) and the resolved
        interpreter's prefix (its standard library) bound read-only, where
        the sandbox does not see them already; through the staging
        namespace where the sandbox's user cannot reach them (`launch`)."""
        args: list[str] = []
        for kind, path, target in self._needs(executable):
            if kind == "link":
                args += ["--symlink", target, str(path)]
            else:
                args += ["--ro-bind", str(self._placed.get(path, path)), str(path)]
        return args

    def _needs(self, executable: str) -> list[tuple[str, Path, str]]:
        needs = _program_needs(executable)
        seen = [*self._covered, *(path for kind, path, _ in needs if kind == "folder")]
        return [(kind, path, target) for kind, path, target in needs
                if not any(path == s or s in path.parents for s in (self._covered if kind == "folder" else seen))]

    async def launch(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                     stdin: bool = True) -> Program:
        """As `SubprocessRuntime.launch`, in a sandbox (see the module docstring)."""
        if self.alive:
            # The routes to bridge: the kept ones and those the program is told about.
            text = " ".join([*self.kept, *self.environment(env).values()])
            ports = {int(p) for p in _LOCAL_URL.findall(text)} - {self._proxy_port}
            self._relays = [(port, f"{_INSIDE_CTL}/{(await self._bridge(port)).name}") for port in sorted(ports)]
            if self._ids is not None:
                self.environment(env)  # makes the folder's .tmp, which is handed over with the rest
                await asyncio.to_thread(_hand_over, self.workdir, self._ids)
                # What the program's interpreter needs that the sandbox's user cannot reach: staged.
                needs = self._needs(self.resolve(argv[0], self.environment(env))) if argv else []
                hidden = [path for kind, path, _ in needs
                          if kind != "link" and path not in self._placed and not _open_to_all(path)]
                if hidden:
                    self._placed.update(await self._stage_more(hidden))
        return await super().launch(argv, env=env, stdin=stdin)

    def _spawn_options(self) -> dict[str, Any]:
        # Through the staging namespace, setpriv drops to the sandbox's user (nsenter needs root).
        return {} if self._launcher else _as_ids(self._ids)

    def _new_program(self, process: asyncio.subprocess.Process, argv: Sequence[str], launch_state: Any) -> Program:
        read_fd, passed, cgroup = launch_state
        for fd in passed:
            os.close(fd)
            self._fds.discard(fd)
        self._fds.discard(read_fd)
        return SandboxProgram(process, argv, self, read_fd, cgroup)

    def __repr__(self) -> str:
        where = f", {self._workdir}" if self._workdir is not None else ""
        return f"SandboxRuntime({self._state}{where})"


def _program_needs(executable: str) -> list[tuple[str, Path, str]]:
    """What running `executable` needs of the host, in order: ("link", path,
    its target) for each symlink of its chain, ("folder", path, "") for a
    venv's folder along it and for the resolved interpreter's prefix (a
    `bin/` whose `lib/` holds a Python standard library), ("file", path,
    "") for the resolved program itself."""
    needs: list[tuple[str, Path, str]] = []
    path = Path(executable)
    if not path.is_absolute():
        return needs
    for _ in range(40):  # the kernel's own limit on a chain
        if path.parent.name == "bin" and (path.parent.parent / "pyvenv.cfg").is_file():
            needs.append(("folder", path.parent.parent, ""))
        if not path.is_symlink():
            break
        target = os.readlink(path)
        needs.append(("link", path, target))
        path = Path(os.path.normpath(path.parent / target))
    prefix = path.parent.parent
    if path.parent.name == "bin" and any(prefix.glob("lib/python3*/os.py")):
        needs.append(("folder", prefix, ""))
    else:
        needs.append(("file", path, ""))
    return needs


def _remove_cgroup(cgroup: Path) -> None:
    """Remove a sandbox's cgroup. After a kill, bubblewrap is dead but the
    sandbox's processes die a moment later (the parent-death signal): they are
    killed here too and waited for (on their pidfds), then the cgroup goes."""
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        pidfds = []
        try:
            for pid in map(int, (cgroup / "cgroup.procs").read_text().split()):
                try:
                    pidfds.append(os.pidfd_open(pid))
                    os.kill(pid, 9)
                except OSError:
                    pass
            for fd in pidfds:
                select.select([fd], [], [], 5.0)  # readable once that process exited
            cgroup.rmdir()
        except OSError as exc:
            log.warning("SandboxRuntime could not remove its cgroup %s: %s", cgroup, exc)
        finally:
            for fd in pidfds:
                os.close(fd)
    watchdog.forget_folder(cgroup)


def _open_to_all(path: Path) -> bool:
    """Whether any user may reach `path` (every folder above it lets others through)."""
    return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in path.parents)


def _hand_over(folder: Path, ids: tuple[int, int]) -> None:
    """Make what is in `folder` (rollkit, root, may have written there) the
    sandbox user's. Through directory descriptors and without following a
    link: a program that swapped a folder for a link to /etc gets nothing
    of /etc chowned."""
    for _, folders, files, where in os.fwalk(folder, follow_symlinks=False):
        for name in (*folders, *files):
            try:
                info = os.stat(name, dir_fd=where, follow_symlinks=False)
                if (info.st_uid, info.st_gid) != ids:
                    os.chown(name, *ids, dir_fd=where, follow_symlinks=False)
            except FileNotFoundError:
                pass


def _clear_special_bits(folder: Path) -> None:
    """Clear the setuid and setgid bits of every file in `folder`: run by a
    host user, a setuid file a program left there runs as the sandbox's user
    (before sandboxes had users of their own: as root). Through a descriptor
    opened without following links, so only the folder's own files change."""
    special = stat.S_ISUID | stat.S_ISGID
    for top, _, files, where in os.fwalk(folder, follow_symlinks=False):
        for name in files:
            try:
                if not os.stat(name, dir_fd=where, follow_symlinks=False).st_mode & special:
                    continue
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=where)
            except OSError:
                continue
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISREG(mode):
                    os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(mode) & ~special)
            except OSError as exc:
                log.warning("SandboxRuntime could not clear the setuid/setgid bits of %s: %s",
                            os.path.join(top, name), exc)
            finally:
                os.close(fd)


def _signal_name(signum: int) -> str:
    if not signum:
        return "it exited on its own"
    try:
        return f"it was killed by {signal.Signals(signum).name}"
    except ValueError:
        return f"it was killed by signal {signum}"


def _readable(source: Path) -> str | None:
    """What `source` is, for the sandbox's /etc: "link", "bound", "dir",
    "file", or None where not every user may read it (e.g. ssl/private)."""
    if str(source.relative_to("/etc")) in _ETC_BOUND and source.is_dir() and not source.is_symlink():
        return "bound"
    if source.is_symlink():
        return "link"
    mode = source.stat().st_mode
    if source.is_dir():
        return "dir" if mode & 0o005 == 0o005 else None
    return "file" if source.is_file() and mode & 0o004 else None


def _list_readable(source: Path, out: list[str]) -> None:
    """Describe what `_copy_readable` would copy of `source`, one line each."""
    try:
        kind = _readable(source)
        if kind is None:
            return
        info = source.lstat()
        target = os.readlink(source) if kind == "link" else ""
        out.append(f"{source}\t{kind}\t{info.st_mode:o}\t{info.st_size}\t{info.st_mtime_ns}\t{target}")
        if kind == "dir":
            for entry in sorted(source.iterdir()):
                _list_readable(entry, out)
    except OSError:
        pass


def _copy_readable(source: Path, target: Path) -> None:
    """Copy `source` (a file, a symlink or a folder) to `target`, keeping
    symlinks and leaving out whatever not every user may read; a folder of
    `_ETC_BOUND` becomes an empty folder (where it is bound)."""
    try:
        kind = _readable(source)
        if kind == "link":
            os.symlink(os.readlink(source), target)
        elif kind in ("dir", "bound"):
            target.mkdir()
            target.chmod(0o755)
            for entry in source.iterdir() if kind == "dir" else ():
                _copy_readable(entry, target / entry.name)
        elif kind == "file":
            shutil.copyfile(source, target)
            target.chmod(0o644)
    except OSError:
        pass  # absent or unreadable: the sandbox goes without it


def _site_dirs() -> list[str]:
    import site

    return [*site.getsitepackages(), site.getusersitepackages()]
