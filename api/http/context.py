"""What handlers share: typed application state, and whether a client has gone."""

from __future__ import annotations

from aiohttp import web

from slotward.api.bootstrap import Services

__all__ = ["SERVICES", "client_gone"]

SERVICES = web.AppKey("services", Services)


def client_gone(request: web.Request) -> bool:
    """Whether ``request``'s client has hung up.

    aiohttp does not cancel a handler whose client left: a handler that waits
    (a long poll, a stream) asks this, and stops.
    """
    transport = request.transport
    return transport is None or transport.is_closing()
