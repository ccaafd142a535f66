"""What handlers share, as typed application state."""

from __future__ import annotations

from aiohttp import web

from slotward.api.bootstrap import Services

__all__ = ["SERVICES"]

SERVICES = web.AppKey("services", Services)
