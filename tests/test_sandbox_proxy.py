"""The sandbox's filtering proxy (rollkit.programs.sandbox_proxy) on its own:
what it answers to each kind of malformed request, one log line per kind
however many arrive, and a hypothesis fuzz over request lines and headers
proving no input raises out of its handler.

The handler is called directly on one end of a real socket pair (so an
exception would raise in the test), the test's client on the other end.
The only destination allowed is a listener of the test's own on loopback;
every other name is refused before it is resolved (no DNS query leaves
the machine)."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollkit.core.network_policy import Decision
from rollkit.programs.sandbox_proxy import MAX_HEAD, MAX_HEADERS, FilteringProxy, Relay

from helpers.fault_report import report

ALLOWED = "allowed.rollkit.test"
FUZZ_EXAMPLES = 600


async def _listener() -> tuple[asyncio.AbstractServer, int]:
    async def serve(reader, writer):
        await reader.read(1)  # the tunnel's first byte, or EOF
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nfar-end")
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _proxy(port: int | None = None, head_seconds: float = 10.0) -> FilteringProxy:
    hosts = {ALLOWED: "127.0.0.1"} if port is not None else {}
    return FilteringProxy(Relay("proxy", 8), lambda: Decision([ALLOWED], [], hosts), head_seconds=head_seconds)


async def _ask(proxy: FilteringProxy, data: bytes, *, eof: bool = True) -> bytes:
    """Send `data` (then EOF) to the handler; what it answered before closing."""
    inside, outside = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=inside)
    client_reader, client_writer = await asyncio.open_connection(sock=outside)
    client_writer.write(data)
    if eof:
        client_writer.write_eof()
    try:
        _, answered = await asyncio.gather(proxy.handle(reader, writer), client_reader.read())
    finally:
        client_writer.close()
    return answered


DOORS = [
    # (what the program sends, the status line it reads)
    (b"CONNECT 127.0.0.1:70000 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"CONNECT 127.0.0.1:-1 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"CONNECT 127.0.0.1:+80 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"CONNECT ::1:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"CONNECT bad_host!:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET http://example.com:99999/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET /relative HTTP/1.1\r\nHost: example.com\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET http://user@example.com/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET  http://example.com/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET http://example.com/ HTTP/1.1\r\nno colon here\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET http://example.com/ HTTP/1.1\r\nX: a\x00b\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET http://example.com/ HTTP/1.1\r\n folded\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"POST http://example.com/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
     "HTTP/1.1 400 Bad Request"),
    (b"BREW http://example.com/ HTTP/1.1\r\n\r\n", "HTTP/1.1 405 Method Not Allowed"),
    (b"GET http://example.com/ HTTP/2.0\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported"),
    (b"GET http://example.com/" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", "HTTP/1.1 414 URI Too Long"),
    (b"GET http://example.com/ HTTP/1.1\r\n" + b"X: y\r\n" * (MAX_HEADERS + 1) + b"\r\n",
     "HTTP/1.1 431 Request Header Fields Too Large"),
    (b"GET http://example.com/ HTTP/1.1\r\nX: " + b"y" * MAX_HEAD + b"\r\n\r\n",
     "HTTP/1.1 431 Request Header Fields Too Large"),
    (b"GET http://example.com/ HTTP/1.1\r\nX: " + b"y" * (1 << 17), "HTTP/1.1 431 Request Header Fields Too Large"),
    (b"CONNECT example.com:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 403 Forbidden"),
    (b"CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 403 Forbidden"),
]


@pytest.mark.parametrize("request_bytes, status", DOORS, ids=[repr(d[0][:40]) for d in DOORS])
async def test_each_malformed_request_gets_one_http_error(request_bytes, status):
    proxy = _proxy()
    answered = await _ask(proxy, request_bytes)
    assert answered.split(b"\r\n", 1)[0].decode() == status
    assert b'"message": ' in answered  # the reason, in words
    assert proxy.relay.open == 0


async def test_fifty_bad_ports_write_one_log_line(caplog):
    """The flood that wrote 1,250 lines of tracebacks: now one line, and 50 answers."""
    proxy = _proxy()
    with caplog.at_level(logging.DEBUG, logger="rollkit"):
        answers = [await _ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
                   for port in [70000, -1] * 25]
    assert {a.split(b"\r\n", 1)[0] for a in answers} == {b"HTTP/1.1 400 Bad Request"}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["the sandbox's proxy refused a request (bad port, HTTP 400): the port of '127.0.0.1:70000' "
                     "is not a number from 1 to 65535; further refusals of this kind in this sandbox are counted, "
                     "not logged"]
    assert all(r.exc_info is None for r in caplog.records)
    assert proxy.refusals == {"bad port": 50}


async def test_a_request_not_sent_in_time_is_answered_408():
    proxy = _proxy(head_seconds=0.3)
    answered = await _ask(proxy, b"CONNECT example.com:443 HTTP/1.1\r\n", eof=False)
    assert answered.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert proxy.refusals == {"slow request": 1}


async def test_well_formed_requests_reach_the_allowed_destination():
    server, port = await _listener()
    try:
        proxy = _proxy(port)
        tunnel = await _ask(proxy, f"CONNECT {ALLOWED}:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        plain = await _ask(proxy, f"GET http://{ALLOWED}:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    finally:
        server.close()
        await server.wait_closed()
    assert tunnel == b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200 OK\r\n\r\nfar-end"
    assert plain == b"HTTP/1.0 200 OK\r\n\r\nfar-end"
    assert proxy.refusals == {}


# ---- the fuzz -------------------------------------------------------------------------------------------------
_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=40)
_HOSTS = st.sampled_from(["example.com", "127.0.0.1", "[::1]", "::1", "[::ffff:127.0.0.1%25lo]", "0x7f.1",
                          "localhost.", "", "[", "]", "[]", "a..b", "-a.com", "x" * 300, "ex ample.com",
                          "é.com", "2130706433", "1.2.3.4.5", "[fe80::1%eth0]", "*", "%00"]) | _TEXT
_PORTS = st.sampled_from(["0", "1", "80", "65535", "65536", "70000", "-1", "+1", "", " 80", "80 ", "0x50",
                          "00080", "9" * 30, "80/", "８０"]) | st.integers(-10, 10**6).map(str) | _TEXT
_METHODS = st.sampled_from(["CONNECT", "GET", "POST", "HEAD", "get", "BREW", "", "CONNECT\x00"]) | _TEXT
_VERSIONS = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "http/1.1", "HTTP/1.1\x00", ""]) | _TEXT
_HEADERS = st.lists(st.sampled_from(["Host: x", "Content-Length: 5", "Transfer-Encoding: chunked",
                                     "Proxy-Authorization: y", "Connection: keep-alive", "X:", ": v", "X : v",
                                     " folded", "X: \x7f", "X: a\rb", "X: " + "y" * 20000]) | _TEXT, max_size=6)


def _mostly(draw, usual: str, strategy: st.SearchStrategy) -> str:
    """`usual` four times in five, else what `strategy` draws: most heads get
    past their first part, so every later check is reached too."""
    return usual if draw(st.integers(0, 4)) else draw(strategy)


@st.composite
def _heads(draw) -> bytes:
    method = _mostly(draw, draw(st.sampled_from(["CONNECT", "GET"])), _METHODS)
    version = _mostly(draw, "HTTP/1.1", _VERSIONS)
    host, port = draw(_HOSTS), draw(_PORTS)
    target = draw(st.sampled_from([f"{host}:{port}", f"http://{host}:{port}/p", f"http://{host}/", host,
                                   f"https://{host}:{port}/"]) | _TEXT)
    spaces = _mostly(draw, " ", st.sampled_from(["  ", "\t", ""]))
    newline = _mostly(draw, "\r\n", st.sampled_from(["\n", "\r"]))
    lines = [spaces.join([method, target, version]), *draw(_HEADERS)]
    end = _mostly(draw, "\r\n\r\n", st.sampled_from(["\r\n", ""]))
    return (newline.join(lines) + end).encode() + draw(st.binary(max_size=20))


def test_no_request_raises_out_of_the_handler(caplog):
    """Random request lines and headers, each through the real handler on a
    socket pair: it returns (never raises), answers in HTTP or closes, frees
    its relay slot, and logs at most one line per kind, never a traceback."""
    tried: list[bytes] = []
    loop = asyncio.new_event_loop()
    server, port = loop.run_until_complete(_listener())
    proxy = _proxy(port, head_seconds=5)

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(head=_heads() | st.binary(max_size=300)
           | st.just(f"CONNECT {ALLOWED}:{port} HTTP/1.1\r\n\r\n".encode()))
    def one(head: bytes) -> None:
        tried.append(head)
        answered = loop.run_until_complete(_ask(proxy, head))
        assert answered == b"" or answered.startswith(b"HTTP/1."), answered[:80]
        assert proxy.relay.open == 0

    try:
        with caplog.at_level(logging.DEBUG, logger="rollkit"):
            one()
    finally:
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()
    report(f"sandbox proxy fuzz: {len(tried)} request heads, none raised out of the handler; refusals by kind "
           f"{dict(sorted(proxy.refusals.items()))}; {len(caplog.records)} log lines")
    assert "internal" not in proxy.refusals
    assert len(caplog.records) == len(proxy.refusals)
    assert all(r.exc_info is None and r.levelno == logging.WARNING for r in caplog.records)
    assert len(tried) >= FUZZ_EXAMPLES // 2
