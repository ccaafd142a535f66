"""A person at the dashboard, for the end-to-end tests: signed in with a key, then
calling the API with the session cookie (and the CSRF token for changes) only.

The cookie is kept here by hand: aiohttp's cookie jar takes none from an IP
address such as the test server's 127.0.0.1, and a test wants to see the
``Set-Cookie`` it got anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

from slotward.api.sessions import CSRF_HEADER, SESSION_COOKIE
from slotward.engine.model import Role
from tests.e2e.conftest import Answer, Client, Server

__all__ = ["Browser", "cookie_of", "sign_in"]


def cookie_of(answer: Answer) -> str:
    """The session token a ``Set-Cookie`` of ``answer`` carries."""
    jar: SimpleCookie = SimpleCookie()
    jar.load(answer.headers["Set-Cookie"])
    return jar[SESSION_COOKIE].value


@dataclass
class Browser:
    """The dashboard's page: its cookie and the CSRF token sign-in told it."""

    client: Client  # anonymous: no Authorization header is ever sent
    token: str
    csrf: str
    key: str  # the key it signed in with (for tests that revoke it or grep for it)

    def headers(self, method: str = "GET", csrf: str | None = None) -> dict[str, str]:
        headers = {"Cookie": f"{SESSION_COOKIE}={self.token}"}
        if method not in ("GET", "HEAD"):
            headers[CSRF_HEADER] = self.csrf if csrf is None else csrf
        return headers

    async def request(
        self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None
    ) -> Answer:
        sent = {**self.headers(method), **(headers or {})}
        return await self.client.request(method, path, body, headers=sent)

    async def get(self, path: str) -> Answer:
        return await self.request("GET", path)


async def sign_in(
    server: Server, role: Role = "reviewer", agent: str = "person", tenant: str = "acme"
) -> Browser:
    """A key of ``role`` made, and a session opened with it."""
    key = await server.key(tenant=tenant, agent=agent, role=role)
    assert key.secret is not None
    anonymous = server.anonymous()
    answer = await anonymous.post("/v1/session", {"key": key.secret})
    assert answer.status == 201, answer.body[:300]
    return Browser(anonymous, cookie_of(answer), answer.json["csrf_token"], key.secret)
