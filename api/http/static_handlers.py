"""GET /dashboard and GET /dashboard/{name}: the dashboard's page and its files.

The files are api/web's, read once when the app is built into an allow-list
by name: a request names a file of that list or gets 404, so no path a
client sends ever reaches the file system (no traversal, no listing). They
hold no data and need no key; every call the page makes is authenticated.

Every answer carries a strict Content-Security-Policy (scripts, styles and
connections to this origin only, no framing, no inline script), ``nosniff``,
``no-referrer`` and ``no-store`` (a new version is never hidden by a cache).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

from aiohttp import web

__all__ = ["SECURITY_HEADERS", "WEB_FILES", "WEB_NAME", "WEB_TYPES", "WebFile", "dashboard_file",
           "dashboard_index", "load_web_files"]  # fmt: skip

# What a file's suffix serves as; a file of any other suffix is not served.
WEB_TYPES: Mapping[str, str] = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
}
_TEXT = frozenset({".html", ".js", ".css", ".svg"})
# A file's name: a letter or digit first (no dot file, no "..").
WEB_NAME = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
_NAME = re.compile(WEB_NAME)
INDEX = "index.html"
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class WebFile:
    body: bytes
    content_type: str


WEB_FILES = web.AppKey("slotward.web_files", dict[str, WebFile])


def load_web_files(folder: Traversable | None = None) -> dict[str, WebFile]:
    """The servable files of ``folder`` (api/web), by name: the allow-list."""
    folder = folder if folder is not None else files("slotward.api") / "web"
    if not folder.is_dir():
        return {}
    found: dict[str, WebFile] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and _NAME.fullmatch(entry.name) and suffix in WEB_TYPES:
            kind = WEB_TYPES[suffix] + ("; charset=utf-8" if suffix in _TEXT else "")
            found[entry.name] = WebFile(entry.read_bytes(), kind)
    return found


async def dashboard_index(request: web.Request) -> web.Response:
    return _serve(request, INDEX)


async def dashboard_file(request: web.Request) -> web.Response:
    return _serve(request, request.match_info["name"])


def _serve(request: web.Request, name: str) -> web.Response:
    found = request.app[WEB_FILES].get(name)
    if found is None:
        raise web.HTTPNotFound()  # answered as route_not_found, as any unknown path
    return web.Response(
        body=found.body, headers={"Content-Type": found.content_type, **SECURITY_HEADERS}
    )
