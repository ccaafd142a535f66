"""Dashboard sessions: a person signs in with a reviewer or admin key and gets a cookie.

Why a cookie and not the key in ``sessionStorage`` (docs/dashboard.md): the
cookie is ``HttpOnly``, so a script injected into the page cannot read it,
whereas a key in storage is one line of script away from being sent anywhere.
The cookie is ``SameSite=Strict``, so another site's page cannot make the
browser send it; and every change (any method but GET and HEAD) must also
carry ``X-CSRF-Token``, a value derived from the cookie's token that only the
page, told it at sign-in, knows.

- The token is 256 random bits; only its SHA-256 is stored (a copy of the
  database opens no session), and the CSRF token is the SHA-256 of
  ``"csrf:" + token``: recomputed from the cookie, nothing more to store.
- The session stands for its key, read again by id with the session itself
  in one read on every request: a revoked key, a sign-out or an expiry ends
  it at once, in every process.
- The token appears in no log line, no answer (but the sign-in's
  ``Set-Cookie``) and no URL.

No aiohttp here: api/http/auth.py reads the cookie and the header,
api/http/session_handlers.py sets the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

from slotward.api.keycache import KeyCache
from slotward.api.keyhash import split_key
from slotward.engine.approvals import Session
from slotward.engine.errors import Forbidden, Unauthenticated
from slotward.engine.model import Principal, Role
from slotward.engine.ports import Clock, Store
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.sessions import close_session, open_session, session_principal

__all__ = [
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "SESSION_LIFETIME",
    "SIGN_IN_ROLES",
    "DashboardSessions",
    "SignedIn",
    "check_csrf",
    "check_fetch_site",
    "csrf_token",
    "token_hash",
]

SESSION_COOKIE = "slotward_session"
CSRF_HEADER = "X-CSRF-Token"
SESSION_LIFETIME = timedelta(hours=12)
SIGN_IN_ROLES: tuple[Role, ...] = ("reviewer", "admin")

# What secrets.token_urlsafe(32) makes: a cookie of any other form is refused
# before any hashing or read.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
# Sec-Fetch-Site values of a request the page itself made (or a person typed).
_OWN_SITE = ("same-origin", "none")


def token_hash(token: str) -> str:
    """What the store keeps of a session's token."""
    return hashlib.sha256(token.encode()).hexdigest()


def csrf_token(token: str) -> str:
    """The CSRF token of the session whose cookie holds ``token``."""
    return hashlib.sha256(f"csrf:{token}".encode()).hexdigest()


def check_csrf(token: str, presented: str | None) -> None:
    """403 ``csrf_failed`` unless ``presented`` is the session's CSRF token."""
    expected = csrf_token(token).encode()
    given = presented.encode() if presented is not None and presented.isascii() else b""
    if not hmac.compare_digest(expected, given):
        raise Forbidden(
            f"a change made with a dashboard session needs its {CSRF_HEADER} header "
            "(answered by POST and GET /v1/session)",
            code="csrf_failed",
        )


def check_fetch_site(fetch_site: str | None) -> None:
    """403 ``csrf_failed`` for a sign-in another site's page made the browser send.

    A browser says where a request comes from (``Sec-Fetch-Site``); another
    site signing a visitor in under the attacker's key (login CSRF) is
    refused. Clients that are not browsers send no such header.
    """
    if fetch_site is not None and fetch_site not in _OWN_SITE:
        raise Forbidden("a sign-in must come from the dashboard's own page", code="csrf_failed")


@dataclass(frozen=True)
class SignedIn:
    """A live session: its cookie's token, the key's principal and the stored row."""

    token: str = field(repr=False)  # the cookie's value: never logged, never in a body
    principal: Principal
    session: Session

    def document(self) -> dict[str, Any]:
        """What POST and GET /v1/session answer (the token itself is only in the cookie)."""
        return {
            "tenant": self.principal.tenant,
            "agent_id": self.principal.agent_id,
            "role": self.principal.role,
            "csrf_token": csrf_token(self.token),
            "expires_at": format_instant(self.session.expires_at),
        }


class DashboardSessions:
    """Signs people in and out, and says who a session's cookie stands for."""

    def __init__(
        self, store: Store, keys: KeyCache, clock: Clock, lifetime: timedelta = SESSION_LIFETIME
    ) -> None:
        self._store = store
        self._keys = keys
        self._clock = clock
        self.lifetime = lifetime

    async def sign_in(self, secret: str) -> SignedIn:
        """A new session for the reviewer or admin key ``secret``.

        401 ``invalid_api_key`` for a key that is unknown, revoked or made
        before key ids (a session names its key by id); 403 ``role_forbidden``
        for an agent's key; 429 past the key's rate.
        """
        principal = await self._keys.resolve(secret)
        key_id = split_key(secret)
        if key_id is None:
            raise Unauthenticated(
                "a key made before key ids cannot sign in to the dashboard: create a new one",
                code="invalid_api_key",
            )
        self._keys.limiter.admit(principal)
        if principal.role not in SIGN_IN_ROLES:
            raise Forbidden(
                f"the {principal.role} role may not sign in to the dashboard "
                f"(needs {' or '.join(SIGN_IN_ROLES)})",
                code="role_forbidden",
            )
        token = secrets.token_urlsafe(32)
        session = await self._store.write(
            partial(
                open_session, token_hash=token_hash(token), key_id=key_id,
                tenant=principal.tenant, clock=self._clock, lifetime=self.lifetime,
            )
        )  # fmt: skip
        return SignedIn(token, principal, session)

    async def resolve(self, token: str) -> SignedIn:
        """The live session whose cookie holds ``token``, or 401 ``invalid_session``."""
        found = None
        if _TOKEN.fullmatch(token):
            found = await self._store.read(
                partial(session_principal, token_hash=token_hash(token), clock=self._clock)
            )
        if found is None or found[1].role not in SIGN_IN_ROLES:
            raise Unauthenticated(
                "no dashboard session: it expired, was signed out or its key was revoked; "
                "sign in again (POST /v1/session)",
                code="invalid_session",
            )
        session, principal = found
        return SignedIn(token, principal, session)

    async def sign_out(self, token: str | None, csrf: str | None) -> None:
        """End the session of ``token``; a live one only with its CSRF token.

        A cookie that names no live session (expired, signed out, its key
        revoked, or none at all) has nothing to protect: its row, if any, is
        deleted and the sign-out succeeds, so the page's button always works.
        """
        if token is None or not _TOKEN.fullmatch(token):
            return
        try:
            await self.resolve(token)
        except Unauthenticated:
            pass
        else:
            check_csrf(token, csrf)
        await self._store.write(partial(close_session, token_hash=token_hash(token)))
