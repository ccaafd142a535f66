"""A ratchet: every request slotward sends out goes through the SSRF guard.

adapters/webhooks/sender.py is the one module that opens client connections
(its resolver is the guard: adapters/webhooks/guard.py); calendar providers
(adapters/providers/, to come) will be the other. Anywhere else in the shipped
package, an ``aiohttp.ClientSession``, a ``TCPConnector``, ``aiohttp.request``,
``urllib.request``, ``http.client`` or another HTTP client library would be a
way out past the guard. Benchmarks and tests are exempt: they talk to the
servers they start.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("engine", "adapters", "api", "testing")
ALLOWED = (ROOT / "adapters" / "webhooks" / "sender.py",)
# Clients of the slotward server the operator names on the command line
# (`slotward mcp --url`), never of a URL a tenant gave: no SSRF to guard against.
TO_OWN_SERVER = (ROOT / "api" / "mcp" / "remote.py",)
ALLOWED_UNDER = (ROOT / "adapters" / "providers",)
# The Python client (issue 17) sends to the slotward server its user names, never
# to a URL a tenant supplied, so the SSRF guard is not its concern.
# Its wire (api/client/wire.py) opens the session; the session module only names
# the type, for a session a caller brings.
CLIENTS = (ROOT / "api" / "client" / "wire.py", ROOT / "api" / "client" / "session.py")

_MODULES = {"urllib.request", "http.client", "httpx", "requests", "urllib3", "aiohttp.client"}
_FROM = {("urllib", "request"), ("http", "client")}
_AIOHTTP_NAMES = {"ClientSession", "TCPConnector", "UnixConnector", "request"}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = list(ast.walk(tree))
    aliases = {"aiohttp"} | {
        alias.asname or alias.name
        for node in nodes
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "aiohttp"
    }
    found: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _client(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [
                f"{node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if (node.module, a.name) in _FROM
                or _client(node.module)
                or (node.module == "aiohttp" and a.name in _AIOHTTP_NAMES)
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in _AIOHTTP_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def _client(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in _MODULES)


def _shipped() -> list[Path]:
    return sorted(p for folder in SHIPPED for p in (ROOT / folder).rglob("*.py"))


def _allowed(path: Path) -> bool:
    return path in (*ALLOWED, *TO_OWN_SERVER, *CLIENTS) or any(
        path.is_relative_to(folder) for folder in ALLOWED_UNDER
    )


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_outbound_http_outside_the_guarded_sender(path: Path) -> None:
    if _allowed(path):
        return
    assert _violations(path) == [], f"{path.relative_to(ROOT)}: send through WebhookSender"


def test_the_sender_is_what_the_scan_sees() -> None:
    """A floor: the allowed module does what the scan looks for, so the scan still works."""
    (sender,) = ALLOWED
    assert any("aiohttp.ClientSession" in v for v in _violations(sender))
    assert any("aiohttp.TCPConnector" in v for v in _violations(sender))
    assert any("aiohttp.ClientSession" in v for v in _violations(CLIENTS[0]))


@pytest.mark.parametrize(
    "source",
    [
        "import aiohttp\nasync def f():\n    async with aiohttp.ClientSession() as s: ...\n",
        "import aiohttp as web_client\nconnector = web_client.TCPConnector()\n",
        "from aiohttp import ClientSession\n",
        "import aiohttp\nasync def f():\n    await aiohttp.request('GET', 'http://x')\n",
        "import urllib.request\n",
        "from urllib import request\n",
        "from urllib.request import urlopen\n",
        "import http.client\n",
        "from http.client import HTTPConnection\n",
        "import httpx\n",
    ],
    ids=[
        "session",
        "aliased-connector",
        "from-import",
        "aiohttp-request",
        "urllib",
        "from-urllib",
        "urlopen",
        "http-client",
        "from-http-client",
        "httpx",
    ],
)
def test_a_planted_way_out_is_found(tmp_path: Path, source: str) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(source)
    assert _violations(planted) != []


def test_serving_http_is_not_sending_it(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("from aiohttp import web\nimport http\nstatus = http.HTTPStatus.OK\n")
    assert _violations(planted) == []
