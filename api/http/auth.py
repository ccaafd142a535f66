"""Who is calling: the bearer key of a request, or its dashboard session, resolved.

A request with an ``Authorization`` header is judged by it alone (api/keycache.py).
One without it but with the dashboard's cookie is the session's
(api/sessions.py): its key's principal, and for any method but GET and HEAD
only with the session's ``X-CSRF-Token``. Keys are created and revoked by the
services (api/keys.py, through api/service.py); this module only reads headers.
"""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import web

from slotward.api.http.context import SERVICES
from slotward.api.http.params import check_query
from slotward.api.keycache import KeyCache
from slotward.api.service import ROLES, require_role
from slotward.api.sessions import CSRF_HEADER, SESSION_COOKIE, check_csrf
from slotward.engine.errors import Unauthenticated
from slotward.engine.model import Principal, Role

__all__ = ["PRINCIPAL", "SAFE_METHODS", "admit", "authenticate", "key_caller", "session_token"]

# The caller once its key is resolved, for the access log (never the key itself).
PRINCIPAL = web.RequestKey("slotward.principal", Principal)
# Methods that change nothing: a session's call needs no CSRF token for them.
SAFE_METHODS = frozenset({"GET", "HEAD"})


async def authenticate(
    request: web.Request, cache: KeyCache, roles: Collection[Role] = ROLES, *, count: bool = True
) -> Principal:
    """The caller of ``request``, or 401, 403 (its role; a session's change without
    its CSRF token) or 429 (over its rate).

    ``count=False`` leaves the rate to the caller, for a request whose cost is
    known only from its body (a batch of tool calls: api/http/tool_handlers.py).
    """
    header = request.headers.get("Authorization")
    token = None if header is not None else session_token(request)  # a key sent is the caller
    if token is not None:
        principal = (await request.app[SERVICES].sessions.resolve(token)).principal
        request[PRINCIPAL] = principal
        if request.method not in SAFE_METHODS:
            check_csrf(token, request.headers.get(CSRF_HEADER))
    else:
        principal = await _key_principal(header or "", cache)
        request[PRINCIPAL] = principal
    admit(principal, cache, roles, count=count)
    check_query(request)  # 422 for a query parameter the route does not take
    return principal


async def key_caller(header: str, cache: KeyCache) -> Principal:
    """The caller of a request sent with ``Authorization: header`` (401 if none is), as
    :func:`authenticate` reads it; :func:`admit` judges it then (the front's requests:
    api/http/front.py, which logs the caller even when it is refused)."""
    return await _key_principal(header, cache)


def admit(
    principal: Principal, cache: KeyCache, roles: Collection[Role], *, count: bool = True
) -> None:
    """429 past ``principal``'s rate (if ``count``), 403 without one of ``roles``."""
    if count:
        cache.limiter.admit(principal)  # 429 past the agent's rate
    require_role(principal, roles)


def session_token(request: web.Request) -> str | None:
    """The dashboard cookie's value, if the request carries one."""
    return request.cookies.get(SESSION_COOKIE)


async def _key_principal(header: str, cache: KeyCache) -> Principal:
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise Unauthenticated("send 'Authorization: Bearer <api key>'", code="missing_api_key")
    return await cache.resolve(secret)
