"""A broken or hostile program cannot hurt the rollouts beside it
(rollkit.programs.guard): idle and slowloris connections are closed, one
rollout's connections are capped (429 in its dialect), the server's are
capped (503 before the request is read), a body that never arrives gets a
408, a body nested 100,000 deep gets a 400 (it was a 500), and a program
holding 1,100 connections leaves a new rollout able to run in a process
whose descriptor limit is 512 (it failed with an unrelated error before), or
96 set after `import rollkit`, leaving no temporary folder.
Raw sockets play the abuser: the SDKs would never misbehave this way."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import fault_report
import pytest

import rollkit as rk
from rollkit.programs import interception
from rollkit.programs.guard import ServerLimits
from rollkit.programs.mcp_tools import ToolServer

pytestmark = pytest.mark.faults  # part of the fault suite (tests/test_faults.py)

HERE = Path(__file__).resolve().parent


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent until it closed the connection (bounded:
    a connection the server keeps open fails the test instead of hanging)."""
    async with asyncio.timeout(30):
        return await reader.read()


def _head(method: str, path: str, secret: str | None, body: bytes = b"", *, length: int | None = None,
          headers: str = "") -> bytes:
    auth = f"Authorization: Bearer {secret}\r\n" if secret else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}{headers}Content-Type: application/json\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode() + body


def _status_and_json(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.fixture
async def served():
    """An interception server with short timeouts and small caps, and one
    registered rollout's secret."""
    server = interception.InterceptionServer(
        limits=ServerLimits(max_connections=12, per_rollout=3, idle_timeout=0.3, body_timeout=0.3))
    await server.start()
    rollout = rk.Agent(model=rk.ScriptedModel(["ok"])).rollout(rk.Task(prompt="hi"))
    server.register(rollout.ctx.secret, rollout.session, rollout_id=rollout.id)
    yield server, rollout.ctx.secret
    await server.stop()
    await rollout.abort()


async def test_idle_connections_are_closed_after_the_idle_timeout(served):
    server, _ = served
    connections = [await _connect(server.port) for _ in range(10)]
    assert server.guard.connections == 10
    for reader, writer in connections:
        assert await _closed_by_server(reader) == b""
        writer.close()
    assert server.guard.connections == 0 and server.guard.expired == 10


async def test_a_request_head_trickled_in_slowly_is_cut_off(served):
    server, secret = served
    reader, writer = await _connect(server.port)
    head = _head("GET", "/v1/models", secret)

    async def trickle():
        for byte in head[:-2]:  # never the final line break: the head never completes
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)  # the attack's pace: a byte well inside the idle timeout

    trickling = asyncio.ensure_future(trickle())
    assert await _closed_by_server(reader) == b""
    trickling.cancel()
    writer.close()
    assert server.guard.expired == 1


async def test_one_rollout_gets_429_in_its_dialect_past_its_connection_cap(served):
    server, secret = served
    held = []
    for _ in range(3):
        reader, writer = await _connect(server.port)
        writer.write(_head("GET", "/v1/models", secret))
        assert (await reader.readuntil(b"\r\n")).split()[1] == b"200"
        held.append(writer)
    for path, headers, shape in (("/v1/chat/completions", "", "openai"),
                                 ("/v1/messages", "anthropic-version: 2023-06-01\r\n", "anthropic")):
        reader, writer = await _connect(server.port)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}).encode()
        writer.write(_head("POST", path, secret, body, headers=headers))
        status, answer = _status_and_json(await _closed_by_server(reader))
        writer.close()
        assert status == 429
        error = answer["error"]
        if shape == "anthropic":
            assert answer["type"] == "error"
        assert error["message"].startswith("rollout ") and "already holds 3 connections to this server, its limit" in error["message"]
    for writer in held:
        writer.close()


async def _all_busy(server, count: int) -> None:
    """Wait (loop turns, bounded) until `count` connections are handling a request."""
    async with asyncio.timeout(30):
        while sum(c._busy > 0 for c in server.guard._open.values()) < count:
            await asyncio.sleep(0)


async def test_past_the_servers_connection_cap_a_connection_gets_503_before_its_request():
    """At the cap with every connection handling a request, there is nothing
    to make room from: one more gets 503."""
    server = interception.InterceptionServer(limits=ServerLimits(max_connections=12, per_rollout=12, body_timeout=30))
    await server.start()
    rollout = rk.Agent(model=rk.ScriptedModel(["ok"])).rollout(rk.Task(prompt="hi"))
    server.register(rollout.ctx.secret, rollout.session, rollout_id=rollout.id)
    try:
        held = []
        for _ in range(12):  # each a request whose body never comes: busy until the body timeout
            reader, writer = await _connect(server.port)
            writer.write(_head("POST", "/v1/chat/completions", rollout.ctx.secret, b'{"messages": ', length=500))
            held.append(writer)
        await _all_busy(server, 12)
        reader, writer = await _connect(server.port)
        status, answer = _status_and_json(await _closed_by_server(reader))  # nothing was sent
        writer.close()
        assert status == 503
        assert answer["error"]["message"] == ("this server holds its limit of 12 connections; "
                                              "close idle connections and retry")
        assert (server.guard.refused, server.guard.evicted) == (1, 0)
        for held_writer in held:
            held_writer.close()
    finally:
        await server.stop()
        await rollout.abort()


async def test_keyless_idle_connections_at_the_cap_cannot_starve_a_rollouts_call(served):
    """Before: connections that showed no secret filled the server's cap and
    another rollout's call got 503 (512 of them against the default cap)."""
    server, secret = served
    keyless = [await _connect(server.port) for _ in range(12)]
    reader, writer = await _connect(server.port)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
    writer.write(_head("POST", "/v1/chat/completions", secret, body, headers="Connection: close\r\n"))
    status, answer = _status_and_json(await _closed_by_server(reader))
    writer.close()
    assert status == 200 and answer["choices"][0]["message"]["content"] == "ok"
    assert (server.guard.evicted, server.guard.refused) == (1, 0)
    assert await _closed_by_server(keyless[0][0]) == b""  # the oldest keyless one made room
    for _, keyless_writer in keyless:
        keyless_writer.close()
    fault_report.report("12 keyless idle connections at a cap of 12: a rollout's call got 200 (one evicted)")


async def test_a_connection_that_shows_no_secret_is_closed_after_the_anonymous_timeout():
    server = interception.InterceptionServer(limits=ServerLimits(idle_timeout=60, anonymous_timeout=0.2))
    await server.start()
    rollout = rk.Agent(model=rk.ScriptedModel(["ok"])).rollout(rk.Task(prompt="hi"))
    server.register(rollout.ctx.secret, rollout.session, rollout_id=rollout.id)
    try:
        keyless_reader, keyless_writer = await _connect(server.port)
        keyed_reader, keyed_writer = await _connect(server.port)
        keyed_writer.write(_head("GET", "/v1/models", rollout.ctx.secret))
        assert (await keyed_reader.readuntil(b"\r\n")).split()[1] == b"200"
        assert await _closed_by_server(keyless_reader) == b""  # closed well before the 60 s idle timeout
        assert server.guard.connections == 1  # the keyed one stays
        keyless_writer.close()
        keyed_writer.close()
    finally:
        await server.stop()
        await rollout.abort()


def test_the_connection_cap_follows_the_descriptor_limit_when_the_server_starts():
    """Before: the cap was computed at import (4096) and a limit lowered
    afterwards ran out of descriptors."""
    import resource

    from rollkit.programs.guard import ConnectionGuard

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    guard = ConnectionGuard(ServerLimits())
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))
    try:
        guard.protocol(lambda: None)  # what a server does when it starts
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert guard.cap == 150


async def test_a_body_that_never_arrives_gets_408(served):
    server, secret = served
    reader, writer = await _connect(server.port)
    writer.write(_head("POST", "/v1/chat/completions", secret, b'{"messages": ', length=500))
    status, answer = _status_and_json(await _closed_by_server(reader))
    writer.close()
    assert status == 408
    assert answer["error"]["message"] == "the request body did not arrive within 0.3s"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
async def test_a_body_nested_100000_deep_gets_400_not_500(served, path):
    server, secret = served
    reader, writer = await _connect(server.port)
    writer.write(_head("POST", path, secret, b"[" * 100_000 + b"]" * 100_000, headers="Connection: close\r\n"))
    status, answer = _status_and_json(await _closed_by_server(reader))
    writer.close()
    assert status == 400
    message = answer["error"]["message"]
    assert message.startswith("the request body nests deeper than 200 levels: recursion limit exceeded")


class Shout(rk.Task):
    @rk.tool
    def shout(self, text: str) -> str:
        """Upper-case a text."""
        return text.upper()


@pytest.fixture
async def tool_server():
    rollout = rk.Agent(model=rk.ScriptedModel(["ok"])).rollout(Shout(prompt="hi"))
    server = ToolServer(rollout.ctx, limits=ServerLimits(per_rollout=4, idle_timeout=0.3, body_timeout=0.3))
    urls = await server.start()
    port = int(urls["Shout"].split(":")[2].split("/")[0])
    yield server, port, rollout.ctx.secret
    await server.stop()
    await rollout.abort()


async def test_mcp_server_closes_idle_connections_and_keyless_ones_cannot_block_its_tool_calls(tool_server):
    """Before: as many keyless connections as the server's cap blocked the
    rollout's own tool calls (503)."""
    server, port, secret = tool_server
    held = [await _connect(port) for _ in range(4)]
    reader, writer = await _connect(port)
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
    writer.write(_head("POST", "/mcp/Shout/", secret, call,
                       headers="Accept: application/json, text/event-stream\r\nConnection: close\r\n").replace(
        b"Host: x", f"Host: 127.0.0.1:{port}".encode()))
    raw = await _closed_by_server(reader)
    writer.close()
    assert int(raw.split()[1]) == 200 and b'"serverInfo"' in raw
    assert server.guard.evicted == 1
    for held_reader, held_writer in held:
        assert await _closed_by_server(held_reader) == b""  # evicted or idle: closed
        held_writer.close()
    assert server.guard.expired == 3


async def test_mcp_server_refuses_a_deep_body_and_a_body_that_never_arrives(tool_server):
    _, port, secret = tool_server
    headers = "Accept: application/json, text/event-stream\r\nConnection: close\r\n"
    reader, writer = await _connect(port)
    writer.write(_head("POST", "/mcp/Shout/", secret, b"[" * 100_000 + b"]" * 100_000, headers=headers))
    raw = await _closed_by_server(reader)
    writer.close()
    assert 400 <= int(raw.split()[1]) < 500
    reader, writer = await _connect(port)
    writer.write(_head("POST", "/mcp/Shout/", secret, b'{"jsonrpc": ', length=500, headers=headers))
    raw = await _closed_by_server(reader)
    writer.close()
    assert raw == b"" or int(raw.split()[1]) >= 400  # cut off, not held open


def _abuse(mode: str, attempts: int, limit: int, tmp_path: Path) -> tuple[dict, Path]:
    """Run `helpers/abuse_helpers.py MODE ATTEMPTS LIMIT` with a temporary folder of
    its own; its report, and that folder (to check nothing is left there)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = subprocess.run([sys.executable, str(HERE / "helpers" / "abuse_helpers.py"), mode, str(attempts), str(limit)],
                            capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(temp)})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1]), temp


@pytest.mark.parametrize("attempts, limit", [(1100, 512), (300, 96)])
def test_a_program_holding_connections_does_not_starve_a_new_rollout(attempts, limit, tmp_path):
    """Run in a process whose descriptor limit is lowered after `import
    rollkit`: before the guard, the hog's connections took every
    descriptor, the hog itself never got an answer, and the new rollout
    could not start. At 96 descriptors the cap (48) followed the limit, but
    one rollout could still hold 64 of them and the new rollout's program
    died of a broken pipe (a HarnessError); now one rollout holds at most
    half the cap. Whatever happens, no temporary folder is left behind."""
    report, temp = _abuse("hog", attempts, limit, tmp_path)
    share = min(64, max(16, limit // 2) // 2)
    fault_report.report(f"a hog program opening {attempts:,} connections in a {limit}-descriptor process: answers "
                        f"{report['counts']}, the server held {report['held_while_holding']}, a new rollout ran")
    assert report["b_ok"] is True, report["b_error"]
    assert report["a_ok"] is True, report["a_error"]
    counts = report["counts"]
    assert counts["200"] == share and counts["model 200"] == 1
    assert counts["200"] + counts.get("429", 0) + counts.get("503", 0) + counts.get("error", 0) == attempts
    assert report["held_while_holding"] <= share
    assert sorted(p.name for p in temp.iterdir()) == []


def _sandbox_missing() -> str | None:
    from rollkit.programs.sandbox_runtime import sandbox_unavailable

    return sandbox_unavailable("bwrap")


@pytest.mark.skipif(_sandbox_missing() is not None, reason=f"no sandboxes here: {_sandbox_missing()}")
def test_a_sandboxed_program_flooding_every_relay_starves_no_other_rollout(tmp_path):
    """A program in a SandboxRuntime opens 1,000 idle connections to each
    relay of its sandbox (its proxy, the interception server's, its MCP tool
    server's) in a process whose descriptor limit is 512. Before the caps, at
    300 each, rollkit's process ran out of descriptors: the flood's own model
    call never got through and the run hung. Now each relay holds at most its
    cap (512 / 32 = 16) and answers the rest in HTTP (503 from the proxy,
    429 from a route's relay); the other rollout runs to the end, nothing is
    left in the temporary folder, and the log stays short."""
    attempts, limit, cap = 1000, 512, 16
    report, temp = _abuse("flood", attempts, limit, tmp_path)
    assert report["a_ok"] is True, report["a_error"]
    counts, relays = report["counts"], report["relays"]
    seconds = counts.pop("seconds")
    fault_report.report(f"a sandboxed program opening {attempts:,} connections to each of its 3 relays in a "
                        f"{limit}-descriptor process: {counts}; rollkit held {report['descriptors_while_flooded']} "
                        f"descriptors, logged {report['log_records']} records, flooded in {seconds} s; "
                        "another rollout ran")
    assert report["b_ok"] is True and report["b_answer"] == "fine", report["b_error"]
    refusal = {"proxy": "503", "interception": "429", "mcp": "429"}
    for relay, got in counts.items():
        # What rollkit's relay did not take, the sandbox's own relay turned away ("closed").
        assert sum(got.values()) == attempts, (relay, got)
        # At most `cap` held by rollkit's relay, as it counts them; the program may see a few more
        # "held" (waiting in the kernel's accept queue, not yet taken or refused when it looked).
        assert relays[relay]["held"] <= cap and relays[relay]["cap"] == cap, (relay, got, relays)
        # Every refusal rollkit made reached the program as an HTTP answer, and there were many.
        assert got.get(refusal[relay], 0) == relays[relay]["refused"] >= 100, (relay, got, relays)
    assert report["descriptors_while_flooded"] < limit // 2
    assert report["log_records"] <= 20, report["first_log_records"]
    assert sorted(p.name for p in temp.iterdir()) == []


_STUCK_FOLDER = """
import asyncio, json, os, resource, sys
import rollkit as rk
from rollkit.programs import watchdog
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

async def main():
    runtime, later = rk.SubprocessRuntime(), rk.SubprocessRuntime()
    await runtime.start()
    await later.start()
    for n in range(20):
        runtime.write(f"deep/{n}/file.txt", "x")
    held = []
    try:
        while True:  # what a flood would hold: the stop's removal fails
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    await runtime.stop()
    stuck = {"kept": os.path.isdir(runtime._workdir), "listed": str(runtime._workdir) in watchdog.stuck_folders()}
    for fd in held:
        os.close(fd)
    if sys.argv[1] == "retried":
        await later.stop()  # the next removal retries it first
        stuck["after_retry"] = os.path.isdir(runtime._workdir)
        stuck["listed_after"] = watchdog.stuck_folders() != {}
    else:  # no later removal: the process ends (`later` still open, as in a killed run)
        stuck["watchdog"] = watchdog._process.pid if watchdog._process else None
        stuck["later"] = str(later._workdir)
    stuck["folder"] = str(runtime._workdir)
    print(json.dumps(stuck), flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("how", ["retried", "at exit"])
async def test_a_working_folder_whose_removal_failed_is_kept_watched_until_it_is_gone(how, tmp_path):
    """Out of descriptors, a stop's removal of the working folder fails: it
    was forgotten (left on disk for good). Now it stays watched: the next
    removal retries it, and if none comes, the watchdog removes it when the
    process ends."""
    from helpers.processes import exited

    temp = tmp_path / "tmp"
    temp.mkdir()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _STUCK_FOLDER, "retried" if how == "retried" else "exit",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "TMPDIR": str(temp)})
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()[-3000:]
    seen = json.loads(out.decode().splitlines()[-1])
    assert (seen["kept"], seen["listed"]) == (True, True), seen  # the failure happened, and was not forgotten
    if how == "retried":
        assert (seen["after_retry"], seen["listed_after"]) == (False, False)
    else:
        assert seen["watchdog"] is not None and await exited(seen["watchdog"])
        assert not Path(seen["later"]).exists()
    assert not Path(seen["folder"]).exists() and list(temp.iterdir()) == []


async def test_accept_errors_are_logged_once_a_minute_not_once_a_second_per_server(caplog):
    """asyncio logs every failed accept (out of descriptors) with its
    traceback, once a second per listening socket: with a few servers per
    sandbox that was thousands of lines. Through the loop's own exception
    handler, 500 of them leave one record."""
    import errno as codes

    from rollkit.programs.guard import quiet_accept_errors

    quiet_accept_errors()
    loop = asyncio.get_running_loop()
    with caplog.at_level("ERROR", logger="asyncio"):
        for _ in range(500):
            loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                         "exception": OSError(codes.EMFILE, "Too many open files")})
        loop.call_exception_handler({"message": "something else broke"})
    messages = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert len(messages) <= 2 and messages[-1] == "something else broke", messages
