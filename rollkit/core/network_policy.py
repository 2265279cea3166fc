"""The network policy's decision for one destination, on one spelling of each host.

What it owns: `canonical_host`, the only place a host as a program wrote it
(in a CONNECT line, a URL, a policy entry, the runtime's hosts map, an answer
of the resolver) becomes what rollkit compares: an `ipaddress` object or a
normalised name; and `Decision`, the allow/block/host-local verdict the
sandbox's proxy asks before it connects (rollkit.programs.sandbox_runtime).
`NetworkPolicy` (rollkit.core.runtime) checks each entry here when it is
made, so an entry that names no host is refused where it is written.

Why one function: the proxy connects to what the C library makes of a host,
and the C library reads many spellings of one address (`::ffff:127.0.0.1`,
`::ffff:7f00:1`, `2130706433`, `0x7f.1`, `127.1`, `0177.0.0.1`,
`fe80::1%eth0`, `[::1]`, `LOCALHOST.`). A check that compared text, or
parsed with a stricter parser than the one that connects, let a program
spell a refused address so the check did not recognise it. Here every
spelling the kernel or resolver would take to an IPv4 address becomes that
IPv4 address (IPv4-mapped, IPv4-compatible and NAT64 `64:ff9b::/96` IPv6
included), and the proxy connects to exactly the canonical address it
checked.

Host-local means this machine in every form: loopback in every spelling,
0.0.0.0/8, link-local, multicast, the limited broadcast, `localhost`
names, and every address of every interface of the machine
(`host_addresses`, read from /proc when a sandbox starts: IPv4 and IPv6,
link-local included), so a service the host binds to all interfaces is not
reachable through its LAN address. Such an address is allowed only by an
entry that names it alone (`192.0.2.2`, not `192.0.2.0/24`).

It must not open connections or know about sandboxes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Mapping

__all__ = ["canonical_host", "host_local", "host_addresses", "Decision", "Rule"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPATIBLE = ipaddress.ip_network("::/96")  # less :: and ::1, which are IPv6's own
# This machine and its link, in every form the canonical spelling leaves.
_HOST_LOCAL = tuple(map(ipaddress.ip_network, (
    "127.0.0.0/8", "0.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32",  # loopback, this network,
    "::1/128", "::/128", "fe80::/10", "ff00::/8",  # link-local, multicast, the limited broadcast
)))
_HOST_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
# The spelling inet_aton(3) reads: one to four parts, each decimal, octal
# (leading 0) or hex (0x); the last part fills the bytes that remain.
_IPV4_PART = re.compile(r"0x[0-9a-f]+|0[0-7]*|[1-9][0-9]*")


def _legacy_ipv4(text: str) -> ipaddress.IPv4Address | None:
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(p) for p in parts):
        return None
    values = [int(p, 16) if p.startswith("0x") else int(p, 8) if len(p) > 1 and p[0] == "0" else int(p)
              for p in parts]
    last_bits = 8 * (5 - len(values))
    if any(v > 255 for v in values[:-1]) or values[-1] >= 1 << last_bits:
        return None
    number = values[-1]
    for i, value in enumerate(values[:-1]):
        number |= value << (24 - 8 * i)
    return ipaddress.IPv4Address(number)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for: mapped, compatible or NAT64."""
    if ip in _MAPPED or ip in _NAT64 or (ip in _COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def canonical_address(ip: Address) -> Address:
    """`ip` as compared and connected to: an IPv6 spelling of an IPv4 address is that IPv4 address."""
    if isinstance(ip, ipaddress.IPv6Address):
        ip = ipaddress.IPv6Address(int(ip))  # drops a zone id
        return _embedded_ipv4(ip) or ip
    return ip


def canonical_host(text: str) -> Address | str:
    """The one spelling of host `text`: an IPv4 or IPv6 address (see the
    module docstring), or a host name lower-cased without its trailing dot.
    Raises ValueError for what is neither."""
    host = text.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        # A zone id (`%eth0`, or `%25eth0` as a URL spells it) only picks an interface.
        try:
            return canonical_address(ipaddress.IPv6Address(host.split("%", 1)[0]))
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv6 address") from None
    host = host.rstrip(".") if host.endswith(".") and not host.endswith("..") else host
    legacy = _legacy_ipv4(host)
    if legacy is not None:
        return legacy
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{text!r} is neither an address nor a host name")
    if labels[-1].isdigit() or re.fullmatch(r"0x[0-9a-f]*", labels[-1]):
        raise ValueError(f"{text!r} is neither an address nor a host name")  # a malformed number, not a name
    return host


def _canonical_network(network: Network) -> Network:
    if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96:
        for prefix in (_MAPPED, _NAT64):
            if network.subnet_of(prefix):
                low = int(network.network_address) & 0xFFFFFFFF
                return ipaddress.IPv4Network((low, network.prefixlen - 96))
    return network


def host_local(host: Address | str) -> bool:
    """Whether `host` (canonical) is this machine or its link: loopback, 0.0.0.0/8
    (unspecified included), link-local, multicast, the limited broadcast, a
    `localhost` name (RFC 6761) or a usual /etc/hosts alias of loopback."""
    if isinstance(host, str):
        return host in _HOST_LOCAL_NAMES or host.endswith(".localhost")
    return any(host.version == n.version and host in n for n in _HOST_LOCAL)


def _fib_local(text: str) -> set[Address]:
    """The IPv4 addresses /proc/net/fib_trie lists as this host's own."""
    found: set[Address] = set()
    last = None
    for line in text.splitlines():
        word = line.strip()
        if word.startswith("|-- "):
            last = word[4:]
        elif last is not None and word.startswith("/32 host LOCAL"):
            found.add(ipaddress.IPv4Address(last))
    return found


def host_addresses(proc: str = "/proc/net") -> frozenset[Address]:
    """Every address of every interface of this machine (of the network
    namespace this process is in), canonical: IPv4 from `fib_trie`'s local
    entries, IPv6 from `if_inet6` (link-local included). Empty where /proc
    does not say (the fixed host-local ranges still apply)."""
    found: set[Address] = set()
    try:
        with open(f"{proc}/fib_trie") as f:
            found |= _fib_local(f.read())
    except (OSError, ValueError):
        pass
    try:
        with open(f"{proc}/if_inet6") as f:
            for line in f:
                word = line.split()[0] if line.strip() else ""
                if len(word) == 32:
                    found.add(canonical_address(ipaddress.IPv6Address(int(word, 16))))
    except (OSError, ValueError):
        pass
    return frozenset(found)


class Rule:
    """One allow or block entry: `*` (every host), a host name (`*.x` or `.x`
    for a domain), an address in any spelling `canonical_host` reads, or a
    network."""

    def __init__(self, text: str) -> None:
        self.text = text
        entry = text.strip().lower()
        self.network: Network | None = None
        self.domain: str | None = None
        self.name: str | None = None
        self.everything = entry == "*"
        if self.everything:
            return
        if entry.startswith(("*.", ".")):
            domain = canonical_host(entry.lstrip("*").lstrip("."))
            if not isinstance(domain, str):
                raise ValueError(f"network policy entry {text!r}: a domain pattern needs a name after '*.'")
            self.domain = domain
            return
        if "/" in entry:
            try:
                self.network = _canonical_network(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                raise ValueError(f"network policy entry {text!r} is not a network (write e.g. 10.0.0.0/8)") from None
            return
        try:
            host = canonical_host(entry)
        except ValueError as exc:
            raise ValueError(f"network policy entry {text!r}: {exc}; write a host name, *.domain, "
                             "an address or a network") from None
        if isinstance(host, str):
            self.name = host
        else:
            self.network = ipaddress.ip_network(host)

    def matches_name(self, host: str) -> bool:
        if self.everything:
            return True
        if self.domain is not None:
            return host == self.domain or host.endswith("." + self.domain)
        return host == self.name

    def matches_address(self, address: Address) -> bool:
        if self.everything:
            return True
        return self.network is not None and address.version == self.network.version and address in self.network

    def names_host_local(self) -> bool:
        """An entry names host-local addresses only if it holds nothing else:
        `127.0.0.1` or `::1/128` does, `0.0.0.0/0` or `*` does not; one
        address alone names itself (the host's own LAN address)."""
        network = self.network
        return network is not None and (network.num_addresses == 1 or any(
            network.version == n.version and network.subnet_of(n) for n in _HOST_LOCAL))


class Decision:
    """The proxy's decision for one destination, by host name then by address."""

    def __init__(self, allow: list[str], block: list[str], hosts: Mapping[str, str],
                 local: frozenset[Address] | set[Address] = frozenset()) -> None:
        """`local`: the machine's own addresses (`host_addresses()`), host-local too."""
        self.local = frozenset(canonical_address(a) for a in local)
        self.allow = [Rule(t) for t in allow]
        self.block = [Rule(t) for t in block]
        self.hosts: dict[Address | str, str] = {}
        for name, address in hosts.items():
            self.hosts[canonical_host(name)] = address

    async def resolve(self, text: str, port: int) -> tuple[str | None, str]:
        """The address to connect to (canonical, as a string), or None and why not."""
        try:
            host = canonical_host(text)
        except ValueError as exc:
            return None, str(exc)
        named = local_named = False
        if isinstance(host, str):
            if any(r.matches_name(host) for r in self.block):
                return None, f"{host} is blocked by name"
            naming = [r for r in self.allow if r.matches_name(host)]
            named = bool(naming)
            local_named = any(not r.everything for r in naming)  # `*` names no host in particular
            if self.allow and not named and not any(r.network is not None for r in self.allow):
                return None, f"{host} is not in the allow list (not resolved)"
            if host_local(host) and not local_named:
                return None, f"{host} is a host-local name no allow entry names"
            found = self.hosts.get(host)
            if found is None:
                try:
                    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
                except OSError as exc:
                    return None, f"{host} does not resolve ({exc})"
                found = infos[0][4][0]
            try:
                address = canonical_address(ipaddress.ip_address(found.split("%", 1)[0]))
            except ValueError:
                return None, f"{host} resolves to {found!r}, not an address"
        else:
            address = host
        said = text if text == str(address) else f"{text} ({address})"
        if any(r.matches_address(address) for r in self.block):
            return None, f"{said} is blocked by address"
        by_address = [r for r in self.allow if r.matches_address(address)]
        if self.allow and not (named or by_address):
            return None, f"{said} is not in the allow list"
        if (host_local(address) or address in self.local) and not (
                local_named or any(r.names_host_local() for r in by_address)):
            mine = " (an address of this machine's interfaces)" if address in self.local else ""
            return None, f"{said} is a host-local address{mine} no allow entry names"
        return str(address), "allowed"
