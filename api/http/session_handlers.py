"""POST, GET and DELETE /v1/session: the dashboard's sign-in cookie (api/sessions.py).

The cookie is ``HttpOnly; SameSite=Strict; Path=/`` with the session's
lifetime as ``Max-Age``, and ``Secure`` when the request came over https
(directly, or through a proxy that says so in ``X-Forwarded-Proto``: a client
claiming https falsely only keeps its own cookie from plain http).
"""

from __future__ import annotations

from aiohttp import web

from slotward.api.http import dashboard_schemas as d
from slotward.api.http.auth import session_token
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import read_json
from slotward.api.http.responses import json_response
from slotward.api.sessions import CSRF_HEADER, SESSION_COOKIE, check_fetch_site
from slotward.engine.errors import Unauthenticated

__all__ = ["read_session", "sign_in", "sign_out"]


async def sign_in(request: web.Request) -> web.Response:
    """201 with the session's document, and the cookie."""
    svc = request.app[SERVICES]
    check_fetch_site(request.headers.get("Sec-Fetch-Site"))
    fields = d.SESSION_SIGN_IN.validate(await read_json(request))
    signed_in = await svc.sessions.sign_in(fields["key"])
    response = json_response(signed_in.document(), status=201)
    response.set_cookie(
        SESSION_COOKIE, signed_in.token, max_age=int(svc.sessions.lifetime.total_seconds()),
        path="/", secure=_over_https(request), httponly=True, samesite="Strict",
    )  # fmt: skip
    return response


async def read_session(request: web.Request) -> web.Response:
    """The session's document again (a reloaded page gets its CSRF token back)."""
    svc = request.app[SERVICES]
    token = session_token(request)
    if token is None:
        raise Unauthenticated("no dashboard session: sign in first", code="invalid_session")
    signed_in = await svc.sessions.resolve(token)
    return json_response(signed_in.document())


async def sign_out(request: web.Request) -> web.Response:
    """204, the session deleted and the cookie cleared."""
    svc = request.app[SERVICES]
    await svc.sessions.sign_out(session_token(request), request.headers.get(CSRF_HEADER))
    response = web.Response(status=204)
    response.del_cookie(
        SESSION_COOKIE, path="/", secure=_over_https(request), httponly=True, samesite="Strict"
    )
    return response


def _over_https(request: web.Request) -> bool:
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"
