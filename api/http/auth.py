"""Who is calling: the bearer key of a request, resolved (api/keycache.py).

Keys are created and revoked by the services (api/keys.py, through
api/service.py); this module only reads the ``Authorization`` header.
"""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import web

from slotward.api.http.params import check_query
from slotward.api.keycache import KeyCache
from slotward.api.service import ROLES, require_role
from slotward.engine.errors import Unauthenticated
from slotward.engine.model import Principal, Role

__all__ = ["PRINCIPAL", "authenticate"]

# The caller once its key is resolved, for the access log (never the key itself).
PRINCIPAL = web.RequestKey("slotward.principal", Principal)


async def authenticate(
    request: web.Request, cache: KeyCache, roles: Collection[Role] = ROLES, *, count: bool = True
) -> Principal:
    """The caller of ``request``, or 401, 429 (over its rate) or 403.

    ``count=False`` leaves the rate to the caller, for a request whose cost is
    known only from its body (a batch of tool calls: api/http/tool_handlers.py).
    """
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise Unauthenticated("send 'Authorization: Bearer <api key>'", code="missing_api_key")
    principal = await cache.resolve(secret)
    request[PRINCIPAL] = principal
    if count:
        cache.limiter.admit(principal)  # 429 past the agent's rate
    require_role(principal, roles)
    check_query(request)  # 422 for a query parameter the route does not take
    return principal
