"""Outbound URLs: which a webhook may name, and which addresses it may reach.

Two rules, both pure. ``parse_target`` says whether a string is a URL slotward
will POST to (422 ``invalid_url`` otherwise): absolute ``http``/``https`` with
a host, at most 2048 characters, no credentials (``user:pass@``: a URL is
listed back to every admin), no fragment, no whitespace or control character,
and no numeric host in a legacy form (``127.1``, ``0x7f.0.0.1``, ``2130706433``)
that resolvers read as an IPv4 address the rule below would not see written.

``refusal`` says why an address may not be reached (SSRF: a webhook must not
reach the server's own network or the cloud metadata service). Always refused:
unspecified, link-local (169.254.169.254 among them), multicast, reserved and
broadcast addresses. Refused unless private targets are allowed: loopback,
private, shared (carrier-grade NAT) and every other range that is not globally
reachable. An IPv6 address that embeds an IPv4 one (mapped, compatible,
translated, 6to4, NAT64) is judged by the IPv4 address it carries.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from typing import Final, TypeAlias
from urllib.parse import SplitResult, urlsplit

import idna

from slotward.engine.errors import ValidationFailed

__all__ = ["MAX_URL", "Address", "Target", "parse_target", "refusal"]

MAX_URL: Final = 2048
Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

_PORTS: Final = {"http": 80, "https": 443}
# A host whose last label is numeric is an IPv4 address to a resolver.
_NUMERIC_LABEL: Final = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)", re.ASCII)


@dataclass(frozen=True)
class Target:
    """A URL slotward may POST to, taken apart."""

    scheme: str  # "http" or "https"
    host: str  # lower case A-labels, or an IP address without brackets
    port: int
    url: str  # as given


def parse_target(url: str) -> Target:
    """``url`` taken apart, or ValidationFailed ``invalid_url`` saying what is wrong."""
    if len(url) > MAX_URL:
        raise _invalid(f"a URL is at most {MAX_URL} characters")
    if any(_bad_char(c) for c in url):
        raise _invalid("a URL has no whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise _invalid("not a URL: an unclosed '[', or a bracketed host that is not IPv6") from None
    if parts.scheme not in _PORTS:
        raise _invalid("the URL must be absolute, http:// or https://")
    if "#" in url:
        raise _invalid("a webhook URL has no fragment ('#...')")
    if "@" in parts.netloc:
        raise _invalid("a webhook URL carries no credentials ('user:pass@'): use its secret")
    return Target(parts.scheme, _host(parts), _port(parts), url)


def refusal(address: Address, *, allow_private: bool) -> str | None:
    """Why ``address`` may not be reached, or None when it may."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        kind, inner = embedded
        why = refusal(inner, allow_private=allow_private)
        return None if why is None else f"the {kind} form of {inner}, {why}"
    for network, why, always in _V4 if address.version == 4 else _V6:
        if address in network:
            return why if always or not allow_private else None
    if address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return None if allow_private else "an address in a range that is not globally reachable"
    return None


def _host(parts: SplitResult) -> str:
    netloc = parts.netloc
    if netloc.startswith("["):
        end = netloc.find("]")
        after = netloc[end + 1 :] if end > 0 else ""
        if end < 0 or not (after == "" or re.fullmatch(r":[0-9]{1,5}", after)):
            raise _invalid("the URL's IPv6 host must be '[address]', optionally ':port'")
        literal = netloc[1:end]
        if "%" in literal:
            raise _invalid("a webhook URL names no IPv6 zone ('%...')")
        try:
            return str(ipaddress.IPv6Address(literal))
        except ValueError:
            raise _invalid("the URL's IPv6 host is not an IPv6 address") from None
    host = parts.hostname or ""
    if host == "":
        raise _invalid("the URL has no host")
    try:
        # UTS #46 maps width variants (fullwidth digits among them) before the
        # numeric checks below, so they judge the name a resolver will see.
        name = idna.encode(host, uts46=True).decode("ascii").lower()
    except idna.IDNAError:
        raise _invalid("the URL's host is not a valid domain name") from None
    try:
        return str(ipaddress.IPv4Address(name))
    except ValueError:
        pass
    if _NUMERIC_LABEL.fullmatch(name.rstrip(".").rsplit(".", 1)[-1]):
        raise _invalid("a numeric host is a dotted-quad IPv4 address (like 192.0.2.1)")
    return name


def _port(parts: SplitResult) -> int:
    try:
        port = parts.port
    except ValueError:
        raise _invalid("the URL's port is not a number from 1 to 65535") from None
    if port == 0:
        raise _invalid("the URL's port is not a number from 1 to 65535")
    return _PORTS[parts.scheme] if port is None else port


def _bad_char(c: str) -> bool:
    return c.isspace() or unicodedata.category(c)[0] == "C"


def _invalid(detail: str) -> ValidationFailed:
    return ValidationFailed(detail, code="invalid_url")


def _embedded_ipv4(address: Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", address.ipv4_mapped
    if address.sixtofour is not None:
        return "6to4", address.sixtofour
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    for network, kind in _WRAPPERS:
        if address in network and address not in _NOT_WRAPPED:
            return kind, low
    return None


def _net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)


_NOT_WRAPPED: Final = (ipaddress.IPv6Address("::"), ipaddress.IPv6Address("::1"))
_WRAPPERS: Final = (
    (_net("::/96"), "IPv4-compatible"),
    (_net("::ffff:0:0:0/96"), "IPv4-translated"),
    (_net("64:ff9b::/96"), "NAT64"),
    (_net("64:ff9b:1::/48"), "NAT64"),
)

_Rule = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str, bool]  # always refused?
_LINK_LOCAL: Final = "a link-local address (the cloud metadata address 169.254.169.254 among them)"
# First match decides; past these, the reserved and non-global checks of refusal().
_V4: Final[tuple[_Rule, ...]] = (
    (_net("0.0.0.0/8"), "an unspecified address ('this network')", True),
    (_net("169.254.0.0/16"), _LINK_LOCAL, True),
    (_net("224.0.0.0/4"), "a multicast address", True),
    (_net("255.255.255.255/32"), "the broadcast address", True),
    (_net("240.0.0.0/4"), "a reserved address", True),
    (_net("127.0.0.0/8"), "a loopback address", False),
    (_net("10.0.0.0/8"), "a private address", False),
    (_net("172.16.0.0/12"), "a private address", False),
    (_net("192.168.0.0/16"), "a private address", False),
    (_net("100.64.0.0/10"), "a shared address (carrier-grade NAT)", False),
)
_V6: Final[tuple[_Rule, ...]] = (
    (_net("::/128"), "an unspecified address", True),
    (_net("::1/128"), "a loopback address", False),
    (_net("fe80::/10"), "a link-local address", True),
    (_net("ff00::/8"), "a multicast address", True),
    (_net("::/8"), "a reserved address", True),
    (_net("fc00::/7"), "a private address (unique local)", False),
    (_net("fec0::/10"), "a private address (site-local)", False),
)
