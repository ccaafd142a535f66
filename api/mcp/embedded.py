"""Tool calls run in this process, on the store ``--db`` names.

The same path the HTTP server takes, without HTTP: the key resolved through the
services' key cache and rate limiter (as api/http/auth.py does), the envelope
validated by the shape ``POST /v1/tool-calls`` validates with, then
``service.call_tool``. The server's background work runs here too (the expiry
sweeper, the outbox relay, the calendar writer and sync): it is the HTTP app's
own lifetime (api/http/app.py), started without binding any socket, so the two
cannot drift apart.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from slotward.api import service
from slotward.api.bootstrap import Services, bootstrap
from slotward.api.cli.serving import STOP_SECONDS
from slotward.api.config import Config
from slotward.api.http import schemas
from slotward.api.http.app import build_app
from slotward.api.http.edges import build_runner
from slotward.api.mcp.results import NO_KEY, Answer, problem_answer
from slotward.engine.errors import SlotwardError, Unauthenticated
from slotward.engine.model import Principal, Reply

__all__ = ["Embedded", "identify", "open_embedded"]

log = logging.getLogger("slotward.mcp")


async def identify(svc: Services, secret: str | None) -> Principal:
    """The caller a key names, or the 401 or 429 the HTTP API would answer."""
    if not secret:
        raise Unauthenticated(NO_KEY, code="missing_api_key")
    principal = await svc.keys.resolve(secret)
    svc.keys.limiter.admit(principal)
    return principal


class Embedded:
    """Runs tool calls on this process's services."""

    def __init__(self, services: Services) -> None:
        self._svc = services

    async def call(self, envelope: Mapping[str, Any], key: str | None) -> Answer:
        try:
            principal = await identify(self._svc, key)
            checked = schemas.TOOL_CALL.validate(envelope, ignore=self._svc.policy.thought_fields)
            answer = await service.call_tool(self._svc, principal, checked, None)
        except SlotwardError as error:
            return problem_answer(error)
        except Exception:  # a bug: logged here, never shown to the model
            log.exception("tool call failed")
            return problem_answer(SlotwardError("an unexpected error occurred", retryable=True))
        if isinstance(answer, Reply):
            return Answer(json.loads(answer.body), replayed=answer.replayed,
                          idempotency_key=answer.key)  # fmt: skip
        return Answer(answer)


@asynccontextmanager
async def open_embedded(config: Config, key: str | None) -> AsyncIterator[Embedded]:
    """The services on ``config``'s store with the server's background work running.

    ``key``, when given (``--key``), is checked at once: a wrong one stops the
    start instead of failing every call.
    """
    services = await bootstrap(config)
    runner = build_runner(build_app(services, config), config, shutdown_timeout=STOP_SECONDS)
    await runner.setup()  # the app's lifetime starts; no site: nothing listens
    try:
        if key is not None:
            await identify(services, key)
        yield Embedded(services)
    finally:
        await runner.cleanup()  # stops the background work and closes the store
