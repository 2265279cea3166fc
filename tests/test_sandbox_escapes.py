"""The escape corpus of SandboxRuntime: each attempt is made by a program
inside the sandbox (tests/programs/sandbox_probe.py, copied into the working
folder as a task's setup would), and each count lands in the fault suite's
summary (tests/helpers/fault_report.py). Every count must be 0.

Every address used is on this machine: test servers listen on the host's
loopback, which is outside the sandbox's network namespace; the names
`allowed.rollkit.test` and `blocked.rollkit.test` exist only in the
runtime's own hosts map (the proxy's), so no DNS query leaves the machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

import pytest

import rollkit as rk
from rollkit.programs.sandbox_runtime import SandboxRuntime, sandbox_unavailable
from rollkit.programs.subprocess_runtime import SubprocessRuntime

from helpers.processes import PROGRAMS, exited, gone, kill_marked, processes_marked
from helpers.fault_report import report

_WHY = sandbox_unavailable("bwrap")
pytestmark = [pytest.mark.faults, pytest.mark.skipif(_WHY is not None, reason=f"no sandboxes here: {_WHY}")]

PROCESSES, TMP_BYTES, FILE_BYTES = 64, 8 << 20, 4 << 20


async def _http_server(body: str) -> tuple[asyncio.AbstractServer, int]:
    """A real HTTP/1.0-style server on the host's loopback answering `body` to anything."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            data = body.encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(data), data))
            await writer.drain()
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.fixture
async def world(monkeypatch):
    """A sandbox allowed to reach `allowed.rollkit.test` only, next to what it must not reach."""
    marker = f"host-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("ROLLKIT_TEST_HOST_SECRET", marker)
    outside, outside_port = await _http_server("outside-secret")
    allowed, allowed_port = await _http_server("allowed-ok")
    other_server = rk.programs.InterceptionServer()  # another rollout's interception server
    await other_server.start()
    other = SubprocessRuntime()  # another rollout's folder
    await other.start()
    other.write("secret.txt", marker)
    sandbox = SandboxRuntime(hosts={"allowed.rollkit.test": "127.0.0.1", "blocked.rollkit.test": "127.0.0.1"},
                             processes=PROCESSES, tmp_bytes=TMP_BYTES, file_bytes=FILE_BYTES)
    await sandbox.start()
    info = await sandbox.apply_network_policy(rk.NetworkPolicy(allow=["allowed.rollkit.test"]), keep=[])
    sandbox.write("probe.py", (PROGRAMS / "sandbox_probe.py").read_text())
    try:
        yield {"sandbox": sandbox, "other": other, "marker": marker, "outside": outside_port,
               "allowed": allowed_port, "other_server": other_server.port, "info": info}
    finally:
        await sandbox.stop()
        await other.stop()
        await other_server.stop()
        for server in (outside, allowed):
            server.close()
            await server.wait_closed()


async def _probe(sandbox: SandboxRuntime, *args: object, timeout: float = 60) -> dict:
    done = await sandbox.run([sys.executable, "probe.py", *map(str, args)], timeout=timeout)
    lines = done.stdout.strip().splitlines()
    assert lines, f"the probe printed nothing (exit {done.returncode}): {done.stderr}"
    return json.loads(lines[-1])


def _count(kind: str, results: dict[str, dict], escaped) -> int:
    got_through = [name for name, result in results.items() if escaped(result)]
    report(f"sandbox escapes, {kind}: {len(got_through)} of {len(results)} attempts got through {got_through or ''}")
    return len(got_through)


async def test_network_escapes_reach_nothing_outside_the_allow_list(world):
    sandbox, outside, other = world["sandbox"], world["outside"], world["other_server"]
    attempts = {
        "loopback port the test opened, directly": ("direct", "127.0.0.1", outside),
        "another rollout's interception server, directly": ("direct", "127.0.0.1", other),
        "test host by IP through the proxy (CONNECT)": ("via_proxy_connect", f"127.0.0.1:{outside}"),
        "test host by IP through the proxy (plain HTTP)": ("via_proxy_get", f"http://127.0.0.1:{outside}/"),
        "test host by name through the proxy (CONNECT)": ("via_proxy_connect", f"blocked.rollkit.test:{outside}"),
        "test host by name through the proxy (plain HTTP)": ("via_proxy_get", f"http://blocked.rollkit.test:{outside}/"),
        "another rollout's interception server through the proxy": ("via_proxy_get", f"http://localhost:{other}/v1/models"),
        "IPv6 loopback through the proxy": ("via_proxy_connect", f"[::1]:{outside}"),
    }
    results = {name: await _probe(sandbox, *args) for name, args in attempts.items()}
    assert _count("network", results, lambda r: r["got"] is not None) == 0, results
    # Each was stopped for the right reason: no route inside, or the proxy's refusal.
    assert "Connection refused" in results["loopback port the test opened, directly"]["how"]
    assert "403" in results["test host by name through the proxy (CONNECT)"]["how"]
    assert any("blocked.rollkit.test" in r and "not in the allow list" in r for r in sandbox.refused)


async def test_dns_resolves_nothing_the_policy_does_not_allow(world):
    sandbox = world["sandbox"]
    host_nameservers = [line.split()[1] for line in Path("/etc/resolv.conf").read_text().splitlines()
                        if line.startswith("nameserver")] if Path("/etc/resolv.conf").exists() else []
    attempts = {f"look up {name}": ("lookup", name) for name in ("blocked.rollkit.test", "allowed.rollkit.test")}
    # Raw queries to the host's nameservers (only loopback ones: nothing may leave the machine) and the usual stub.
    for server in {"127.0.0.53", "127.0.0.1", *[s for s in host_nameservers if s.startswith("127.")]}:
        attempts[f"raw DNS query to {server}"] = ("dns_query", server)
    results = {name: await _probe(sandbox, *args) for name, args in attempts.items()}
    assert _count("name lookups", results, lambda r: r["got"] is not None) == 0, results
    assert (await _probe(sandbox, "read", "/etc/resolv.conf"))["got"].count("nameserver") == 0


async def test_allowed_traffic_goes_through(world):
    sandbox, port = world["sandbox"], world["allowed"]
    by_get = await _probe(sandbox, "via_proxy_get", f"http://allowed.rollkit.test:{port}/")
    by_connect = await _probe(sandbox, "via_proxy_connect", f"allowed.rollkit.test:{port}")
    assert by_get["got"] == "allowed-ok" and by_get["how"] == "200"
    assert by_connect["got"].endswith("allowed-ok")
    assert world["info"]["enforced"] is True and world["info"]["allow"] == ["allowed.rollkit.test"]


async def test_file_escapes_read_and_write_nothing_of_the_host(world):
    sandbox, other, marker = world["sandbox"], world["other"], world["marker"]
    host_root = [p for p in Path("/root").iterdir() if p.is_file()][:3] if os.access("/root", os.R_OK) else []
    reads = {
        "/etc/shadow": ("read", "/etc/shadow"),
        "/root (listing)": ("read", "/root"),
        **{f"{p}": ("read", p) for p in host_root},
        "another rollout's folder": ("read", other.path("secret.txt")),
        "the rollkit process's /proc/<pid>/environ": ("read", f"/proc/{os.getpid()}/environ"),
        "every visible /proc/*/environ": ("environs", marker),
    }
    read_results = {name: await _probe(sandbox, *args) for name, args in reads.items()}
    listing = read_results.pop("/root (listing)")

    def leaked(result: dict) -> bool:
        got = result["got"]
        return got is not None and (marker in json.dumps(got) or "root:" in str(got) or bool(got) and host_root)

    leaks = _count("reads", read_results, leaked)
    root_entries = set(listing["got"] or []) - {".pyenv", ".cache", ".local"}  # only Python's prefix is bound
    targets = [Path("/usr/escape"), Path("/etc/escape"), Path(rk.__file__).parent / "escape", Path(sys.prefix) / "escape",
               other.path("escape"), Path("/root/escape"), Path(f"/tmp/escape-{uuid.uuid4().hex}"), Path("/escape")]
    write_results = {str(t): await _probe(sandbox, "write", t) for t in targets}
    written = _count("writes", {t: {"host": Path(t).exists()} for t in write_results}, lambda r: r["host"])
    for target in targets:
        if target.exists():
            target.unlink()
    assert (leaks, written, root_entries) == (0, 0, set()), (read_results, listing, write_results)
    # Inside the working folder, writing works and the host sees it.
    assert (await _probe(sandbox, "write", "inside.txt"))["got"] == "inside.txt" and sandbox.read("inside.txt") == "escaped"


async def test_signal_and_ptrace_reach_no_host_process(world):
    sandbox = world["sandbox"]
    host = await asyncio.create_subprocess_exec("sleep", "300")
    try:
        result = await _probe(sandbox, "signal_host", host.pid)
        alive = not gone(host.pid)
        assert _count("signals and ptrace", {"kill and ptrace a host process": {"got": result["got"], "alive": alive}},
                      lambda r: r["got"] is not None or not r["alive"]) == 0, result
    finally:
        host.kill()
        await host.wait()


async def test_fork_bomb_and_disk_filler_are_stopped_by_limits(world):
    sandbox = world["sandbox"]
    bomb = await _probe(sandbox, "fork_bomb", 30)
    # Files smaller than the file size limit, so that the tmpfs bound is what stops them.
    tmp = await _probe(sandbox, "fill", "/tmp/filler", 4 * TMP_BYTES, 16)
    shm = await _probe(sandbox, "fill", "/dev/shm/filler", 4 * TMP_BYTES, 16)
    big = await sandbox.run([sys.executable, "probe.py", "fill", "big.bin", str(4 * FILE_BYTES)], timeout=60)
    # Python ignores SIGXFSZ (its write fails instead); head is killed by it.
    head = await sandbox.run(["sh", "-c", f"exec head -c {4 * FILE_BYTES} /dev/zero > big2.bin"], timeout=60)
    results = {
        "fork bomb": {"over": bomb["got"] >= PROCESSES},
        "/tmp filler": {"over": tmp["got"] > TMP_BYTES},
        "/dev/shm filler": {"over": shm["got"] > TMP_BYTES},
        "one file in the working folder": {"over": sandbox.path("big.bin").stat().st_size > FILE_BYTES},
        "one file in the working folder (shell)": {"over": sandbox.path("big2.bin").stat().st_size > FILE_BYTES},
    }
    assert _count("limits", results, lambda r: r["over"]) == 0, (bomb, tmp, shm)
    assert "Resource temporarily unavailable" in bomb["how"] and "No space left on device" in tmp["how"]
    assert "File too large" in json.loads(big.stdout)["how"]
    assert head.returncode == -25  # SIGXFSZ: the file size limit killed it, reported as a signal death
    # The host is unharmed: it still starts processes, and the bomb's children are gone with the sandbox.
    check = await asyncio.create_subprocess_exec("true")
    assert await check.wait() == 0


async def test_nothing_outlives_the_program(world):
    sandbox = world["sandbox"]
    daemon_marker, setsid_marker = f"daemon-{uuid.uuid4().hex}", f"setsid-{uuid.uuid4().hex}"
    await _probe(sandbox, "daemon", daemon_marker)
    script = f"setsid {sys.executable} -c 'import time; time.sleep(600)' {setsid_marker} & echo started"
    await sandbox.run(["sh", "-c", script], timeout=60)
    survivors = {"a daemonised child": processes_marked(daemon_marker), "a setsid grandchild": processes_marked(setsid_marker)}
    for marker in (daemon_marker, setsid_marker):
        await kill_marked(marker)
    assert _count("outliving the program", {k: {"pids": v} for k, v in survivors.items()}, lambda r: r["pids"]) == 0


async def test_a_killed_launch_takes_its_whole_sandbox_with_it(world):
    sandbox = world["sandbox"]
    marker = f"kept-{uuid.uuid4().hex}"
    # The grandchild says it started itself: then its argv (with the marker) is in place.
    sleeper = f"{sys.executable} -c 'print(\"started\", flush=True); import time; time.sleep(600)' {marker}"
    program = await sandbox.launch(["sh", "-c", f"setsid {sleeper} & sleep 600"])
    assert (await program.process.stdout.readline()) == b"started\n"
    inside = processes_marked(marker)
    assert len(inside) == 1
    await program.kill(grace=0)
    assert await exited(inside[0]) and processes_marked(marker) == []


# ---- addresses in every spelling ---------------------------------------------
# Each spelling the C library (inet_aton, getaddrinfo) or the kernel takes to
# this machine's 127.0.0.1, where the test's listener is. "host:port" is
# filled in with the listener's port.
LOOPBACK_ADDRESS_FORMS = [
    "127.0.0.1", "127.0.0.1.", "2130706433", "0x7f000001", "0X7F000001", "017700000001", "0x7f.1", "127.1",
    "127.0.1", "0177.0.0.1", "0177.1", "0x7f.0.0.1", "0x7f.0x0.0x0.0x1",
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::FFFF:7F00:1]", "[0:0:0:0:0:ffff:127.0.0.1]",
    "[0000:0000:0000:0000:0000:ffff:7f00:0001]", "[::ffff:127.0.0.1%25lo]", "[::ffff:127.0.0.1%lo]",
    "[::127.0.0.1]", "[::7f00:1]", "[64:ff9b::127.0.0.1]", "[64:ff9b::7f00:1]",
    "0.0.0.0", "0", "[::ffff:0.0.0.0]", "[::ffff:0:0]", "[::]", "[::1]", "[::1%lo]", "[::ffff:127.0.0.2]",
]
LOOPBACK_NAME_FORMS = ["localhost", "LOCALHOST", "LOCALHOST.", "localhost.", "LocalHost.LocalDomain",
                       "ip6-localhost", "sub.localhost", "loop.rollkit.test", "LOOP.ROLLKIT.TEST."]
# The first forms mean exactly 127.0.0.1: with it allowed, each reaches the listener.
ALLOWED_SPELLINGS_OF_127_0_0_1 = LOOPBACK_ADDRESS_FORMS[:24]


@pytest.fixture
async def open_sandbox():
    """A sandbox whose policy the test sets, next to a listener on the host's loopback."""
    listener, port = await _http_server("loopback-secret")
    # loop.rollkit.test: a name the runtime's hosts map points at loopback
    # (no DNS query leaves the machine).
    sandbox = SandboxRuntime(hosts={"loop.rollkit.test": "127.0.0.1"}, processes=PROCESSES, tmp_bytes=TMP_BYTES,
                             file_bytes=FILE_BYTES)
    await sandbox.start()
    sandbox.write("probe.py", (PROGRAMS / "sandbox_probe.py").read_text())
    try:
        yield sandbox, port
    finally:
        await sandbox.stop()
        listener.close()
        await listener.wait_closed()


async def _through_proxy(sandbox: SandboxRuntime, hosts: list[str], port: int) -> dict:
    attempts = [[method, f"{host}:{port}"] for host in hosts for method in ("CONNECT", "GET")]
    sandbox.write("attempts.json", json.dumps(attempts))
    return await _probe(sandbox, "through_proxy", "attempts.json")


@pytest.mark.parametrize("policy", [{}, {"block": ["10.0.0.0/8"]}, {"allow": ["allowed.rollkit.test", "10.0.0.0/8"]}],
                         ids=["no policy", "block only", "allow list"])
async def test_no_spelling_of_a_host_local_address_passes_the_proxy(open_sandbox, policy):
    sandbox, port = open_sandbox
    await sandbox.apply_network_policy(rk.NetworkPolicy(**policy), keep=[])
    result = await _through_proxy(sandbox, LOOPBACK_ADDRESS_FORMS + LOOPBACK_NAME_FORMS, port)
    forms = len(LOOPBACK_ADDRESS_FORMS) + len(LOOPBACK_NAME_FORMS)
    got = {key: body for key, body in result["got"].items() if body is not None}
    report(f"sandbox escapes, host-local address spellings ({policy or 'no policy'}): {len(got)} of "
           f"{len(result['got'])} attempts ({forms} forms x CONNECT and plain HTTP) got through {list(got) or ''}")
    assert got == {}
    # Each refused by the policy before any connection was tried (a 502 would mean the proxy tried).
    assert {key: status for key, status in result["how"].items() if not status.startswith("HTTP/1.1 403")} == {}
    assert len(result["how"]) == 2 * forms


async def test_every_spelling_of_an_allowed_address_reaches_it(open_sandbox):
    """The control: the refused spellings above do mean the listener's address,
    since with 127.0.0.1 allowed each reaches it (through the one address the proxy checked)."""
    sandbox, port = open_sandbox
    await sandbox.apply_network_policy(rk.NetworkPolicy(allow=["127.0.0.1"]), keep=[])
    result = await _through_proxy(sandbox, ALLOWED_SPELLINGS_OF_127_0_0_1, port)
    assert {key for key, body in result["got"].items() if body != "loopback-secret"} == set()
    # Not a name: an allow entry for the address does not name `localhost`.
    refused = await _through_proxy(sandbox, ["localhost", "[::1]", "127.0.0.2"], port)
    assert set(refused["got"].values()) == {None}
    assert "localhost is a host-local name no allow entry names" in "\n".join(sandbox.refused)


_UNPRIVILEGED = 54321  # a uid no account of this machine has: the "normal user" who starts rollkit


@pytest.fixture
def shared_folder():
    """A folder every user may enter (an `ro_paths` entry), with a file only
    root may read and one everyone may."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="rollkit-test-shared-"))
    folder.chmod(0o755)
    (folder / "private.txt").write_text("root's secret")
    (folder / "private.txt").chmod(0o600)
    (folder / "public.txt").write_text("public")
    (folder / "public.txt").chmod(0o644)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to `path` that other users cannot enter."""
    for folder in [*reversed(path.resolve().parents), path.resolve()]:
        if not folder.stat().st_mode & 0o001:
            return folder
    return None


def _as_unprivileged_user(home: Path) -> tuple[list[str], dict[str, str]]:
    """The command prefix and environment that run the identity program as
    `_UNPRIVILEGED` (setpriv drops root's ids and capabilities). The venv's
    interpreter lives under root's private home here, so the user runs the
    system's Python of the same version with the venv's packages."""
    import shutil
    import sysconfig

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed: cannot start rollkit as an unprivileged user")
    python = shutil.which(f"python{sys.version_info.major}.{sys.version_info.minor}", path="/usr/bin:/usr/local/bin")
    if python is None:
        pytest.skip(f"no system python{sys.version_info.major}.{sys.version_info.minor} an unprivileged user can run")
    worktree = str(Path(rk.__file__).resolve().parent.parent)
    for needed in (worktree, sysconfig.get_paths()["purelib"]):
        private = _closed_to_others(Path(needed))
        if private is not None:
            pytest.skip(f"{private} is closed to other users (mode {private.stat().st_mode & 0o777:o}): an unprivileged "
                        f"user cannot run rollkit from {needed}")
    os.chown(home, _UNPRIVILEGED, _UNPRIVILEGED)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": f"{worktree}:{sysconfig.get_paths()['purelib']}"}
    return ["setpriv", f"--reuid={_UNPRIVILEGED}", f"--regid={_UNPRIVILEGED}", "--clear-groups", python], env


@pytest.mark.parametrize("who", ["root", "an unprivileged user"])
def test_the_program_is_never_root_on_the_host(who, shared_folder):
    """Whoever starts rollkit, the program's host identity reads no file
    other users may not, makes no user namespace, and leaves no setuid file."""
    import shutil
    import subprocess
    import tempfile

    if who == "root" and os.geteuid() != 0:
        pytest.skip("rollkit does not run as root here")
    home = Path(tempfile.mkdtemp(prefix="rollkit-test-home-"))  # rollkit's cache goes there
    try:
        if who == "root" or os.geteuid() != 0:
            command, env = [sys.executable], {**os.environ, "HOME": str(home)}
        else:
            command, env = _as_unprivileged_user(home)
        done = subprocess.run([*command, str(PROGRAMS / "sandbox_identity.py"), str(shared_folder)],
                              capture_output=True, text=True, env=env, timeout=300)
    finally:
        shutil.rmtree(home)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    inside, host = seen["inside"], seen["host"]
    attempts = {
        "a 0600 file of root's under ro_paths": {"got": inside["private"] is not None},
        "a user namespace inside the sandbox": {"got": inside["nested_userns"]},
        "a file made by the program owned by root on the host": {"got": host["made_by_uid"] == 0},
        "a setuid/setgid file left in the working folder": {"got": set(host["special_bits"].values()) != {"0o0"}},
    }
    assert _count(f"host identity, rollkit started by {who}", attempts, lambda r: r["got"]) == 0, seen
    assert inside["public"] == "public" and inside["bits_set_inside"] == "0o6000"  # it did try
    if who == "root":
        assert host["rollkit_uid"] == 0 and host["made_by_uid"] >= 0x10000000
    else:
        assert host["rollkit_uid"] == host["made_by_uid"] == (_UNPRIVILEGED if os.geteuid() == 0 else os.geteuid())
    # What setup wrote stays usable by the program, and the folder is gone after the stop.
    assert (host["given"], host["folder_left"]) == ("from setup and the program", False)
