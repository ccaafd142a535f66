"""Which URLs a webhook may name, and which addresses it may reach (engine/rules/urls.py)."""

from __future__ import annotations

import ipaddress

import pytest

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.urls import MAX_URL, Target, parse_target, refusal


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("https://hooks.example.com/slotward", ("https", "hooks.example.com", 443)),
        ("http://hooks.example.com:8080/x?y=1", ("http", "hooks.example.com", 8080)),
        ("HTTPS://Hooks.EXAMPLE.com/", ("https", "hooks.example.com", 443)),
        ("http://bücher.example/", ("http", "xn--bcher-kva.example", 80)),
        ("http://192.0.2.7:81/", ("http", "192.0.2.7", 81)),
        ("http://１９２.０.２.７/", ("http", "192.0.2.7", 80)),  # fullwidth: the same address
        ("http://１２７。０。０。１/", ("http", "127.0.0.1", 80)),  # judged as 127.0.0.1
        ("http://[2001:DB8::1]/", ("http", "2001:db8::1", 80)),
        ("https://[::ffff:127.0.0.1]:8443/", ("https", "::ffff:7f00:1", 8443)),
        ("http://localhost:3000/hook", ("http", "localhost", 3000)),
    ],
)
def test_a_url_is_taken_apart(url: str, target: tuple[str, str, int]) -> None:
    assert parse_target(url) == Target(*target, url=url)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("hooks.example.com/x", "absolute"),
        ("/relative", "absolute"),
        ("ftp://hooks.example.com/", "absolute"),
        ("file:///etc/passwd", "absolute"),
        ("javascript:alert(1)", "absolute"),
        ("http:///path", "no host"),
        ("http://:80/", "no host"),
        ("http:hooks.example.com", "no host"),
        ("http://user:pass@hooks.example.com/", "credentials"),
        ("http://user@hooks.example.com/", "credentials"),
        ("http://hooks.example.com\\@evil.example/", "credentials"),
        ("http://hooks.example.com/#frag", "fragment"),
        ("http://hooks.example.com/#", "fragment"),
        ("http://hooks.example.com/a b", "whitespace"),
        (" http://hooks.example.com/", "whitespace"),
        ("http://hooks.example.com/\n", "whitespace"),
        ("http://hooks.example.com/\x00", "control"),
        ("http://hooks.example.com/\u200b", "control"),  # a format character
        ("http://hooks.example.com:0/", "port"),
        ("http://hooks.example.com:65536/", "port"),
        ("http://hooks.example.com:http/", "port"),
        ("http://[::1/", "unclosed"),
        ("http://[not-ipv6]/", "IPv6"),
        ("http://[2606:4700::1111]junk/", "optionally ':port'"),  # was taken, then never sent
        ("http://[2606:4700::1111]:/", "optionally ':port'"),
        ("http://[fe80::1%25eth0]/", "zone"),
        ("http://127.1/", "numeric host"),
        ("http://0x7f.0.0.1/", "numeric host"),
        ("http://2130706433/", "numeric host"),
        ("http://0177.0.0.1/", "numeric host"),
        ("http://1.2.3.4.5/", "numeric host"),
        ("http://１２７.１/", "numeric host"),  # fullwidth digits map to 127.1
        ("http://under_score.example/", "domain name"),
        ("http://-lead.example/", "domain name"),
        ("http://" + "a" * 64 + ".example/", "domain name"),
        ("http://hooks.example.com/" + "a" * MAX_URL, "2048"),
    ],
)
def test_a_url_slotward_will_not_post_to_is_refused(url: str, why: str) -> None:
    with pytest.raises(ValidationFailed, match=why) as caught:
        parse_target(url)
    assert caught.value.code == "invalid_url"


def test_a_url_of_exactly_the_limit_is_taken() -> None:
    base = "https://hooks.example.com/"
    url = base + "a" * (MAX_URL - len(base))
    assert parse_target(url).url == url


def test_a_refusal_quotes_no_credentials() -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_target("https://admin:hunter2@hooks.example.com/")
    assert "hunter2" not in caught.value.detail


ALWAYS = [
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("169.254.169.254", "link-local"),
    ("169.254.0.1", "link-local"),
    ("fe80::1", "link-local"),
    ("febf::1", "link-local"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("ff0e::1", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("::2", "IPv4-compatible form of 0.0.0.2, an unspecified"),
    ("100::1", "reserved"),
    ("4000::1", "reserved"),
    ("::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254, a link-local"),
    ("::ffff:0.0.0.0", "IPv4-mapped form of 0.0.0.0"),
    ("::ffff:224.0.0.1", "IPv4-mapped form of 224.0.0.1, a multicast"),
    ("::ffff:0:169.254.169.254", "IPv4-translated form of 169.254.169.254"),
    ("2002:a9fe:a9fe::1", "6to4 form of 169.254.169.254"),
    ("64:ff9b::169.254.169.254", "NAT64 form of 169.254.169.254"),
    ("64:ff9b:1::a9fe:a9fe", "NAT64 form of 169.254.169.254"),
    ("::169.254.169.254", "IPv4-compatible form of 169.254.169.254"),
]

UNLESS_PRIVATE = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("fec0::1", "private"),
    ("100.64.0.1", "shared"),
    ("100.127.255.254", "shared"),
    ("192.0.2.1", "not globally reachable"),  # documentation
    ("198.18.0.1", "not globally reachable"),  # benchmarking
    ("2001:db8::1", "not globally reachable"),  # documentation
    ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, a loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped form of 10.0.0.1, a private"),
    ("::127.0.0.1", "IPv4-compatible form of 127.0.0.1, a loopback"),
    ("2002:c0a8:101::", "6to4 form of 192.168.1.1, a private"),
    ("2002:7f00:1::", "6to4 form of 127.0.0.1, a loopback"),
    ("64:ff9b::10.0.0.1", "NAT64 form of 10.0.0.1, a private"),
]

GLOBAL = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "172.32.0.1",  # just past 172.16/12
    "100.128.0.1",  # just past 100.64/10
    "169.255.0.1",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::8.8.8.8",
    "2002:808:808::1",
]


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize(("text", "why"), ALWAYS)
def test_always_refused_whatever_the_setting(text: str, why: str, allow_private: bool) -> None:
    reason = refusal(ipaddress.ip_address(text), allow_private=allow_private)
    assert reason is not None
    assert why in reason


@pytest.mark.parametrize(("text", "why"), UNLESS_PRIVATE)
def test_refused_unless_private_targets_are_allowed(text: str, why: str) -> None:
    address = ipaddress.ip_address(text)
    reason = refusal(address, allow_private=False)
    assert reason is not None
    assert why in reason
    assert refusal(address, allow_private=True) is None


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("text", GLOBAL)
def test_a_global_address_is_allowed(text: str, allow_private: bool) -> None:
    assert refusal(ipaddress.ip_address(text), allow_private=allow_private) is None


def test_the_metadata_address_is_named_in_its_refusal() -> None:
    reason = refusal(ipaddress.ip_address("169.254.169.254"), allow_private=True)
    assert reason is not None
    assert "metadata" in reason
