"""The dashboard's files over real HTTP: the page and each file of api/web by name,
with their security headers, and nothing else (no traversal, no listing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slotward.api.http.static_handlers import SECURITY_HEADERS, WEB_TYPES, load_web_files
from tests.e2e.conftest import Server

WEB = Path(__file__).resolve().parents[2] / "api" / "web"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def _served(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEB_TYPES)


def _check_headers(headers: dict[str, str]) -> None:
    assert headers["Content-Security-Policy"] == CSP
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["Cache-Control"] == "no-store"
    assert dict(SECURITY_HEADERS) == {k: headers[k] for k in SECURITY_HEADERS}


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_the_page_and_every_file_are_served_with_their_type_and_headers(
    server: Server,
) -> None:
    anonymous = server.anonymous()
    page = await anonymous.get("/dashboard")
    assert page.status == 200
    assert page.body == (WEB / "index.html").read_bytes()
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    _check_headers(page.headers)
    files = _served(WEB)
    assert files, "api/web has no file to serve"
    for path in files:
        answer = await anonymous.get(f"/dashboard/{path.name}")
        assert answer.status == 200, path.name
        assert answer.body == path.read_bytes()
        assert answer.headers["Content-Type"].split(";")[0] == WEB_TYPES[path.suffix]
        _check_headers(answer.headers)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/", "/dashboard/nope.js", "/dashboard/INDEX.HTML", "/dashboard/..",
        "/dashboard/%2e%2e%2fpyproject.toml", "/dashboard/..%2f..%2fpyproject.toml",
        "/dashboard/%2Fetc%2Fpasswd", "/dashboard/web", "/dashboard/index.html%00",
        "/dashboard/__init__.py", "/dashboard/.hidden", "/dashboard/a/b", "/dashboard//etc/passwd",
    ],
)  # fmt: skip
async def test_anything_but_a_listed_file_is_a_404_problem(server: Server, path: str) -> None:
    async with server.session.get(server.base + path, allow_redirects=False) as resp:
        body = await resp.read()
    assert resp.status in (404, 422), (path, resp.status)  # a NUL is refused as input
    assert resp.headers["Content-Type"].startswith("application/problem+json"), path
    assert b"[tool.setuptools" not in body
    assert b"root:" not in body


def test_the_allow_list_takes_only_plain_files_of_known_types(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<p>hi</p>")
    (tmp_path / "app.js").write_text("1")
    (tmp_path / "notes.txt").write_text("secret")  # an unknown type
    (tmp_path / ".env").write_text("KEY=1")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.js").write_text("2")
    found = load_web_files(tmp_path)
    assert sorted(found) == ["app.js", "index.html"]
    assert found["index.html"].content_type == "text/html; charset=utf-8"
    assert found["app.js"].body == b"1"
    assert load_web_files(tmp_path / "missing") == {}
