"""The sandbox's filtering HTTP proxy, and the relay bookkeeping it shares with the bridges.

What it owns: reading one proxy request from a sandboxed program (CONNECT
or an absolute-form plain HTTP request), parsing it strictly, asking the
network policy's `Decision` (rollkit.core.network_policy) and either
refusing in HTTP or splicing the connection to the destination; `Relay`,
the per-relay connection cap; `splice`, the two-way copy of a tunnel.

What it accepts, exactly: a request line `METHOD target HTTP/1.x` of at
most `MAX_LINE` bytes, a method of `METHODS`; a target that is
`host:port` for CONNECT, `http://host[:port][/path]` otherwise; a host
that `canonical_host` reads (a name, or an address in any spelling the C
library reads; IPv6 in brackets where a port follows); a port of 1-65535
in decimal digits; at most `MAX_HEADERS` header lines, each `name: value`
with a token name and no control character in the value; the whole head
at most `MAX_HEAD` bytes, sent within `head_seconds`. Anything else gets
one HTTP error (400, 405, 408, 414, 431, 505; the policy's 403, 502 where
the destination does not answer, 503 past the relay's cap) and is closed.

What it logs: one line per kind of refusal per proxy (a proxy is one
sandbox runtime, one rollout), then counts the rest in `refusals`; a
program that sends a million bad requests writes one line of rollkit's
log per kind. No input raises out of `handle` (tests/test_sandbox_proxy.py
fuzzes it); an unexpected error there is a refusal of kind "internal".

It must not know about rollouts, bubblewrap or the framework's routes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..core.network_policy import Decision, canonical_host

__all__ = ["FilteringProxy", "answer", "ProxyRefusal", "ProxyRequest", "Relay", "parse_request", "splice",
           "MAX_HEAD", "MAX_LINE", "MAX_HEADERS", "METHODS"]

log = logging.getLogger("rollkit")

MAX_HEAD = 16 << 10  # the request line and headers together
MAX_LINE = 8 << 10
MAX_HEADERS = 100
METHODS = frozenset({"CONNECT", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_VERSION = re.compile(r"HTTP/1\.[01]")
_VISIBLE = re.compile(r"[\x21-\x7e]+")
_PORT = re.compile(r"[0-9]{1,5}")
_ABSOLUTE = re.compile(r"http://(\[[^\]/]*\]|[^/:\[\]@]*)(?::([^/]*))?(/[^\s]*)?", re.I)
_REASONS = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 408: "Request Timeout",
            414: "URI Too Long", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 505: "HTTP Version Not Supported", 429: "Too Many Requests"}


class ProxyRefusal(Exception):
    """A request the proxy answers with HTTP `status`; `kind` groups it for the log."""

    def __init__(self, status: int, kind: str, why: str) -> None:
        super().__init__(why)
        self.status, self.kind, self.why = status, kind, why


@dataclass(frozen=True)
class ProxyRequest:
    """One parsed request: where to, and (plain HTTP) the bytes to send there first."""

    method: str
    host: str
    port: int
    forward: bytes = b""


def _shown(text: str, limit: int = 80) -> str:
    """`text` safe for one log line: repr'd (control characters escaped) and cut."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _port(text: str, target: str) -> int:
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise ProxyRefusal(400, "bad port", f"the port of {_shown(target)} is not a number from 1 to 65535")
    return int(text)


def _host(text: str, target: str) -> str:
    try:
        canonical_host(text)
    except ValueError:
        raise ProxyRefusal(400, "bad host", f"the host of {_shown(target)} is neither a host name nor an "
                                            "address (IPv6 goes in brackets: [::1]:443)") from None
    return text


def _connect_target(target: str) -> tuple[str, int]:
    host, colon, port = target.rpartition(":")
    if not colon or not host:
        raise ProxyRefusal(400, "bad target", f"CONNECT names host:port, not {_shown(target)}")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ProxyRefusal(400, "bad host", f"an IPv6 host goes in brackets ([::1]:443), not {_shown(target)}")
    return _host(host, target), _port(port, target)


def _headers(lines: list[str]) -> list[str]:
    if len(lines) > MAX_HEADERS:
        raise ProxyRefusal(431, "too many headers", f"{len(lines)} header lines; at most {MAX_HEADERS}")
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
            raise ProxyRefusal(400, "bad header", f"header line {_shown(line)} is not `name: value`")
    names = {line.partition(":")[0].lower() for line in lines}
    if {"content-length", "transfer-encoding"} <= names:
        raise ProxyRefusal(400, "bad header", "both Content-Length and Transfer-Encoding: send one")
    return lines


def parse_request(head: bytes) -> ProxyRequest:
    """The request in `head` (its bytes up to and including the blank line),
    or ProxyRefusal saying what is wrong with it."""
    if len(head) > MAX_HEAD:
        raise ProxyRefusal(431, "head too large", f"the request's head has {len(head)} bytes; at most {MAX_HEAD}")
    lines = head.decode("latin-1").split("\r\n")[:-2]
    first = lines[0] if lines else ""
    if len(first) > MAX_LINE:
        raise ProxyRefusal(414, "request line too long", f"the request line has {len(first)} bytes; at most {MAX_LINE}")
    parts = first.split(" ")
    if len(parts) != 3:
        raise ProxyRefusal(400, "bad request line", f"{_shown(first)} is not `METHOD target HTTP/1.1`")
    method, target, version = parts
    if not _VISIBLE.fullmatch(target):
        raise ProxyRefusal(400, "bad target", f"the target {_shown(target)} is empty or holds a control character")
    if method not in METHODS:
        raise ProxyRefusal(405, "bad method", f"method {_shown(method)} is not one of {sorted(METHODS)}")
    if not _VERSION.fullmatch(version):
        raise ProxyRefusal(505, "bad version", f"{_shown(version)}: the proxy speaks HTTP/1.0 and HTTP/1.1")
    headers = _headers(lines[1:])
    if method == "CONNECT":
        host, port = _connect_target(target)
        return ProxyRequest(method, host, port)
    match = _ABSOLUTE.fullmatch(target)
    if match is None:
        raise ProxyRefusal(400, "bad target", f"{_shown(target)} is not an absolute http:// URL (use CONNECT for "
                                              "https, and give the proxy the whole URL)")
    host = _host(match.group(1), target)
    port = 80 if match.group(2) is None else _port(match.group(2), target)
    kept = [h for h in headers if not h.lower().startswith(("proxy-", "connection:"))]
    forward = "\r\n".join([f"{method} {match.group(3) or '/'} {version}", *kept, "Connection: close", "", ""])
    return ProxyRequest(method, host, port, forward.encode("latin-1"))


def answer(status: int, why: str, kind: str | None = None) -> bytes:
    """An HTTP answer refusing a request, its reason as JSON (every route and the proxy speak HTTP)."""
    body = json.dumps({"error": {"message": why, "type": kind or "refused", "code": status}}).encode()
    retry = "Retry-After: 1\r\n" if status in (429, 503) else ""
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Refused')}\r\nContent-Type: application/json\r\n"
            f"Connection: close\r\n{retry}Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


class Relay:
    """One relay of one sandbox (its proxy, or the bridge to one route): the
    connections it holds now, its cap, and how many it refused."""

    def __init__(self, name: str, cap: int) -> None:
        self.name, self.cap = name, cap
        self.open = 0
        self.refused = 0

    def admit(self) -> bool:
        if self.open >= self.cap:
            self.refused += 1
            return False
        self.open += 1
        return True

    def refusal(self, status: int, why: str) -> bytes:
        return answer(status, why, "too_many_connections" if status == 429 else "relay_unavailable")

    def too_many(self, status: int) -> bytes:
        return self.refusal(status, f"this sandbox already holds {self.cap} connections through its {self.name}, "
                                    "its limit; close idle connections (or reuse them) and retry")


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        pass


async def splice(a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 b: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    """Copy both ways between two connections until both end, then close both."""
    try:
        await asyncio.gather(_pump(a[0], b[1]), _pump(b[0], a[1]))
    finally:
        for writer in (a[1], b[1]):
            writer.close()


class FilteringProxy:
    """The proxy of one sandbox: `handle` serves one connection from it.

    `decision()` gives the policy's `Decision` in force; `refused` collects
    "host:port: why" of each request the policy refused; `refusals` counts
    every refusal by kind; `head_seconds` bounds the time to send the head."""

    def __init__(self, relay: Relay, decision: Callable[[], Decision], refused: list[str] | None = None,
                 head_seconds: float = 10.0) -> None:
        self.relay, self.decision, self.head_seconds = relay, decision, head_seconds
        self.refused: list[str] = [] if refused is None else refused
        self.refusals: Counter[str] = Counter()

    def _refuse(self, writer: asyncio.StreamWriter, refusal: ProxyRefusal) -> None:
        self.refusals[refusal.kind] += 1
        if self.refusals[refusal.kind] == 1:
            log.warning("the sandbox's proxy refused a request (%s, HTTP %d): %s; further refusals of this kind in "
                        "this sandbox are counted, not logged", refusal.kind, refusal.status, refusal.why)
        try:
            writer.write(answer(refusal.status, refusal.why, refusal.kind.replace(" ", "_")))
        except (OSError, RuntimeError):
            pass

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection; never raises (but CancelledError)."""
        if not self.relay.admit():
            # Answered before the request is read: CONNECT and plain HTTP clients both read a 503.
            writer.write(self.relay.too_many(503))
            writer.close()
            return
        try:
            await self._serve(reader, writer)
        except ProxyRefusal as refusal:
            self._refuse(writer, refusal)
        except Exception as exc:  # noqa: BLE001 - a program's input must never put a traceback in rollkit's log
            self._refuse(writer, ProxyRefusal(500, "internal", f"{type(exc).__name__}: {exc}"))
        finally:
            self.relay.open -= 1
            writer.close()

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            async with asyncio.timeout(self.head_seconds):
                return await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise ProxyRefusal(408, "slow request", f"the request's head did not arrive within "
                                                    f"{self.head_seconds:g} s") from None
        except asyncio.LimitOverrunError:
            raise ProxyRefusal(431, "head too large", f"no end of the request's head in its first "
                                                      f"{MAX_HEAD} bytes") from None
        except (asyncio.IncompleteReadError, OSError):
            return None  # the program closed before a whole request: nobody to answer

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await self._read_head(reader)
        if head is None:
            return
        request = parse_request(head)
        address, why = await self.decision().resolve(request.host, request.port)
        if address is None:
            self.refused.append(f"{request.host}:{request.port}: {why}")
            raise ProxyRefusal(403, "refused by the network policy", f"refused by the rollout's network policy: {why}")
        try:
            upstream = await asyncio.wait_for(asyncio.open_connection(address, request.port), 30)
        except (OSError, TimeoutError) as exc:
            raise ProxyRefusal(502, "destination unreachable",
                               f"{request.host}:{request.port} did not answer ({type(exc).__name__})") from None
        if request.method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream[1].write(request.forward)
        await splice((reader, writer), upstream)
