"""The machine's own addresses are host-local (rollkit.core.network_policy):
the decision given the host's addresses refuses each of them in every
spelling unless an entry names it alone, and in a network namespace this test
makes (a veth interface with its own IPv4, IPv6 and link-local addresses),
`host_addresses()` reads them and the real proxy refuses a CONNECT to a
listener bound to all interfaces there, while allowing it when named.
No traffic leaves the namespace or the loopback."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import subprocess
import sys
import textwrap
import uuid

import pytest

from rollkit.core.network_policy import Decision, canonical_host, host_addresses

HOST = [ipaddress.ip_address(a) for a in ("192.0.2.2", "fd00::2", "fe80::fc:ff:fe00:1")]
SPELLINGS = {
    "192.0.2.2": ["192.0.2.2", "3221225986", "0xc0.0x0.0x2.0x2", "0300.0.2.2", "192.0.514", "::ffff:192.0.2.2",
                  "[::ffff:c000:202]", "64:ff9b::192.0.2.2"],
    "fd00::2": ["fd00::2", "[FD00::2]", "fd00:0:0:0:0:0:0:2", "fd00::2%eth0"],
    "fe80::fc:ff:fe00:1": ["fe80::fc:ff:fe00:1", "[fe80::fc:ff:fe00:1%25eth0]"],
}


def _decide(allow: list[str], host: str, local=HOST) -> tuple[str | None, str]:
    return asyncio.run(Decision(allow, [], {}, local).resolve(host, 443))


@pytest.mark.parametrize("address", list(SPELLINGS))
def test_each_spelling_of_the_hosts_own_address_is_refused_by_a_range_that_holds_it(address):
    # A range that holds the address and more (fe80::/10 alone names link-local addresses: allowed).
    network = "192.0.2.0/24" if "." in address else "fd00::/8" if address.startswith("fd") else "fe00::/7"
    for spelling in SPELLINGS[address]:
        got, why = _decide([network], spelling)
        assert got is None and "host-local address" in why, spelling
        assert _decide(["*"], spelling)[0] is None, spelling
        assert _decide([], spelling)[0] is None, spelling
    # Named alone, it is allowed; another machine of the same range stays reachable.
    assert _decide([address], SPELLINGS[address][0]) == (str(canonical_host(address)), "allowed")


def test_without_the_hosts_addresses_the_range_allows_them_the_mechanism_under_test():
    assert _decide(["192.0.2.0/24"], "192.0.2.2", local=()) == ("192.0.2.2", "allowed")
    assert _decide(["192.0.2.0/24"], "192.0.2.3") == ("192.0.2.3", "allowed")


def test_host_addresses_reads_this_machines_interfaces():
    found = host_addresses()
    assert ipaddress.ip_address("127.0.0.1") in found
    shown = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout if shutil.which("ip") else ""
    for line in shown.splitlines():
        address = ipaddress.ip_interface(line.split()[3]).ip
        assert address in found or (address.version == 6 and address.ipv4_mapped), line


_INSIDE = textwrap.dedent("""
    import asyncio, json, socket, sys
    sys.path.insert(0, sys.argv[1])
    from rollkit.core.network_policy import Decision, host_addresses
    from rollkit.programs.sandbox_proxy import FilteringProxy, Relay

    async def ask(proxy, line):
        inside, outside = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=inside)
        r2, w2 = await asyncio.open_connection(sock=outside)
        w2.write(line.encode()); w2.write_eof()
        _, answer = await asyncio.gather(proxy.handle(reader, writer), r2.read())
        w2.close()
        return answer.split(b"\\r\\n", 1)[0].decode()

    async def main():
        async def serve(reader, writer):
            writer.close()
        server = await asyncio.start_server(serve, "0.0.0.0", 0)  # every interface, as a careless service binds
        port = server.sockets[0].getsockname()[1]
        local = host_addresses()
        out = {"local": sorted(map(str, local))}
        for allow in (["10.77.0.0/24"], ["10.77.0.1"]):
            proxy = FilteringProxy(Relay("proxy", 4), lambda: Decision(allow, [], {}, local))
            out[allow[0]] = await ask(proxy, f"CONNECT 10.77.0.1:{port} HTTP/1.1\\r\\n\\r\\n")
        server.close()
        print(json.dumps(out))
    asyncio.run(main())
""")


def test_in_a_namespace_of_its_own_the_hosts_lan_address_is_refused_unless_named(tmp_path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("making a network namespace needs root and iproute2")
    name = f"rk-test-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no network namespace here: {made.stderr.strip()}")
    try:
        for command in (["link", "add", "rk0", "type", "veth", "peer", "name", "rk1"],
                        ["addr", "add", "10.77.0.1/24", "dev", "rk0"], ["addr", "add", "fd77::1/64", "dev", "rk0", "nodad"],
                        ["addr", "add", "fe80::77/64", "dev", "rk0", "nodad"], ["link", "set", "rk0", "up"],
                        ["link", "set", "rk1", "up"], ["link", "set", "lo", "up"]):
            step = subprocess.run(["ip", "-n", name, *command], capture_output=True, text=True)
            if step.returncode != 0:
                pytest.skip(f"cannot set up the namespace's interface: {step.stderr.strip()}")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        done = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c", _INSIDE, root],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        import json

        out = json.loads(done.stdout)
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    assert {"10.77.0.1", "fd77::1", "127.0.0.1"} <= set(out["local"])
    assert "fe80::77" in out["local"]  # the interface's link-local address
    assert out["10.77.0.0/24"] == "HTTP/1.1 403 Forbidden"
    assert out["10.77.0.1"] == "HTTP/1.1 200 Connection established"
    assert "10.77.0.1" not in map(str, host_addresses())  # outside the namespace it is no address of ours
