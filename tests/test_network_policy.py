"""The network policy's decision alone (rollkit.core.network_policy), for
addresses no test may send traffic to: private ranges blocked or allowed in
every spelling, names in every case. Nothing here opens a connection; names
resolve only through the runtime's hosts map given to the decision.
tests/test_sandbox_escapes.py sends the host-local spellings through the
real proxy to a real listener on 127.0.0.1."""

from __future__ import annotations

import ipaddress

import pytest

from rollkit.core.network_policy import Decision, canonical_host

from helpers.fault_report import report

# Each spelling of 10.1.2.3, and of the IPv6 address fd00::1234.
SPELLINGS_OF_10_1_2_3 = [
    "10.1.2.3", "10.1.2.3.", "167838211", "0xa010203", "0XA010203", "01200201003", "10.66051", "10.1.515",
    "012.1.2.3", "0xa.1.2.3", "0xa.0x1.0x2.0x3", "012.01.02.03", "[10.1.2.3]",
    "::ffff:10.1.2.3", "[::ffff:10.1.2.3]", "::ffff:a01:203", "::FFFF:A01:203", "0:0:0:0:0:ffff:10.1.2.3",
    "::ffff:10.1.2.3%eth0", "[::ffff:a01:203%25eth0]", "::10.1.2.3", "::a01:203",
    "64:ff9b::10.1.2.3", "64:ff9b::a01:203", "[64:FF9B::A01:203]",
]
SPELLINGS_OF_FD00__1234 = ["fd00::1234", "[fd00::1234]", "FD00::1234", "fd00:0:0:0:0:0:0:1234",
                           "fd00::1234%eth0", "[fd00::1234%25eth0]"]
BLOCKS = ["10.0.0.0/8", "::ffff:10.0.0.0/104", "fc00::/7"]


def _decide(decision: Decision, host: str) -> tuple[str | None, str]:
    import asyncio

    return asyncio.run(decision.resolve(host, 443))


@pytest.mark.parametrize("host, block", [(h, "10.0.0.0/8") for h in SPELLINGS_OF_10_1_2_3]
                         + [(h, "fc00::/7") for h in SPELLINGS_OF_FD00__1234])
def test_a_blocked_range_is_blocked_in_every_spelling(host, block):
    address = canonical_host(host)
    assert address in ipaddress.ip_network(block)
    assert _decide(Decision([], [block], {}), host) == (None, f"{host} ({address}) is blocked by address"
                                                        if host != str(address) else f"{host} is blocked by address")


@pytest.mark.parametrize("block", BLOCKS[:2])
def test_a_block_written_in_any_spelling_blocks_every_spelling(block):
    decision = Decision([], [block], {})
    passed = [host for host in SPELLINGS_OF_10_1_2_3 if _decide(decision, host)[0] is not None]
    report(f"network policy, private range spellings against block={block!r}: {len(passed)} of "
           f"{len(SPELLINGS_OF_10_1_2_3)} got through {passed or ''}")
    assert passed == []


def test_an_allowed_range_is_allowed_in_every_spelling_and_connected_to_canonically():
    decision = Decision(["10.0.0.0/8", "fd00::/8"], [], {})
    answers = {host: _decide(decision, host) for host in SPELLINGS_OF_10_1_2_3 + SPELLINGS_OF_FD00__1234}
    assert {host: address for host, (address, _) in answers.items()} == {
        **{host: "10.1.2.3" for host in SPELLINGS_OF_10_1_2_3}, **{host: "fd00::1234" for host in SPELLINGS_OF_FD00__1234}}
    assert _decide(decision, "11.1.2.3") == (None, "11.1.2.3 is not in the allow list")
    assert _decide(decision, "::ffff:11.1.2.3") == (None, "::ffff:11.1.2.3 (11.1.2.3) is not in the allow list")


@pytest.mark.parametrize("host", ["blocked.test", "BLOCKED.TEST", "blocked.test.", "Blocked.Test.", "a.evil.test",
                                  "A.EVIL.TEST.", "evil.test"])
def test_a_blocked_name_is_blocked_in_every_case_and_with_a_trailing_dot(host):
    decision = Decision([], ["blocked.test", "*.evil.test"], {name: "10.9.9.9" for name in ("blocked.test", "a.evil.test",
                                                                                             "evil.test")})
    assert _decide(decision, host) == (None, f"{host.lower().rstrip('.')} is blocked by name")


@pytest.mark.parametrize("allow", [["0.0.0.0/0"], ["::/0"], ["10.0.0.0/8", "0.0.0.0/1"], ["*.test"]])
def test_a_broad_allow_entry_does_not_name_this_machine(allow):
    decision = Decision(allow, [], {"loop.test": "127.0.0.1"})
    for host in ["127.0.0.1", "0x7f.1", "::ffff:7f00:1", "0.0.0.0", "::1", "::", "169.254.169.254",
                 "::ffff:169.254.169.254", "fe80::1%eth0", "224.0.0.1", "255.255.255.255", "[::ffff:0:0]"]:
        address, why = _decide(decision, host)
        assert address is None and ("host-local address no allow entry names" in why
                                    or "not in the allow list" in why), (host, why)
    # A name the allow list names is allowed whatever it resolves to: the entry chose it.
    expected = {"*.test": ("127.0.0.1", "allowed"), "::/0": (None, "loop.test (127.0.0.1) is not in the allow list")}
    assert _decide(decision, "loop.test") == expected.get(allow[-1], (
        None, "loop.test (127.0.0.1) is a host-local address no allow entry names"))


def test_an_allow_entry_naming_this_machine_opens_it_in_every_spelling():
    decision = Decision(["::ffff:127.0.0.0/104", "169.254.169.254"], [], {})
    assert [_decide(decision, h)[0] for h in ["127.0.0.1", "127.1", "[::ffff:7f00:1]", "64:ff9b::7f00:1",
                                              "0xa9.0xfe.0xa9.0xfe", "::ffff:169.254.169.254"]] == \
        ["127.0.0.1"] * 4 + ["169.254.169.254"] * 2


@pytest.mark.parametrize("text, said", [
    ("a b", "network policy entry 'a b': 'a b' is neither an address nor a host name; write a host name, "
            "*.domain, an address or a network"),
    ("10.0.0.0/33", "network policy entry '10.0.0.0/33' is not a network (write e.g. 10.0.0.0/8)"),
    ("*.10.0.0.1", "network policy entry '*.10.0.0.1': a domain pattern needs a name after '*.'"),
    ("::ffff:1.2.3.4.5", "network policy entry '::ffff:1.2.3.4.5': '::ffff:1.2.3.4.5' is not an IPv6 address; write "
                         "a host name, *.domain, an address or a network"),
])
def test_a_policy_entry_that_is_no_host_is_refused_naming_it(text, said):
    with pytest.raises(ValueError) as caught:
        Decision([text], [], {})
    assert str(caught.value) == said


@pytest.mark.parametrize("host, why", [
    ("a b", "'a b' is neither an address nor a host name"), ("1.2.3.4.5", "'1.2.3.4.5' is neither an address nor a host name"),
    ("08.1", "'08.1' is neither an address nor a host name"), ("x@10.1.2.3", "'x@10.1.2.3' is neither an address nor a host name"),
    ("[::ffff:1.2.3]", "'[::ffff:1.2.3]' is not an IPv6 address"), ("", "'' is neither an address nor a host name"),
])
def test_a_host_that_is_neither_address_nor_name_is_refused(host, why):
    assert _decide(Decision([], [], {}), host) == (None, why)


def test_a_network_policy_with_an_entry_that_names_no_host_is_refused_where_it_is_written():
    import pydantic

    import rollkit as rk

    with pytest.raises(pydantic.ValidationError) as caught:
        rk.NetworkPolicy(allow=["api.example.org"], block=["10.0.0.0/8", "10.0.0.0/33"])
    assert "network policy entry '10.0.0.0/33' is not a network (write e.g. 10.0.0.0/8)" in str(caught.value)
    assert rk.NetworkPolicy(block=["::ffff:10.0.0.0/104", "*.Example.ORG.", "0x7f.1"]).block == [
        "::ffff:10.0.0.0/104", "*.Example.ORG.", "0x7f.1"]  # kept as written; compared canonically


def test_a_star_entry_means_every_host_but_names_no_host_local_one():
    """Before: `block=["*"]` was read as a host named `*` and blocked nothing."""
    assert _decide(Decision([], ["*"], {"api.test": "10.9.9.9"}), "api.test") == (None, "api.test is blocked by name")
    assert _decide(Decision([], ["*"], {}), "::ffff:10.1.2.3") == (None, "::ffff:10.1.2.3 (10.1.2.3) is blocked by address")
    everything = Decision(["*"], [], {"api.test": "10.9.9.9", "loop.test": "127.0.0.1"})
    assert _decide(everything, "api.test") == ("10.9.9.9", "allowed")
    assert _decide(everything, "0x7f.1") == (None, "0x7f.1 (127.0.0.1) is a host-local address no allow entry names")
    assert _decide(everything, "loop.test") == (None, "loop.test (127.0.0.1) is a host-local address no allow entry names")
    assert _decide(everything, "localhost") == (None, "localhost is a host-local name no allow entry names")
