"""The route table: one declaration per operation serves routing and OpenAPI."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from slotward.engine.rules.shapes import Field, Shape

__all__ = ["Handler", "Param", "Route"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Param:
    """A query or path parameter (always a string on the wire)."""

    name: str
    where: str = "query"
    required: bool = False
    description: str = ""
    schema: Field | None = None
    repeatable: bool = False  # a list may be given as name=a&name=b; others only once


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    operation_id: str
    summary: str
    # A tuple means "one of these shapes" (a tool call takes several envelopes
    # and answers as its tool does); a Field, a document that is not an object
    # (an array of messages).
    request: Shape | tuple[Shape, ...] | None = None
    responses: dict[int, Shape | Field | tuple[Shape | Field, ...] | None] = field(
        default_factory=dict
    )
    params: tuple[Param, ...] = ()
    auth: bool = True
    mutating: bool = False
    # Whether a client may send its own Idempotency-Key (a completion is keyed
    # by its path and fenced by its lease token: it takes none).
    client_key: bool = True
    # True where some calls only read (find_free_slots through /v1/tool-calls):
    # their answers carry no idempotency headers.
    sometimes_read_only: bool = False
    # True where the handler takes an absent body as ``{}`` (release).
    body_optional: bool = False
    tag: str = "holds"
    # The media types of its successful answers: JSON, or what a route that is
    # no JSON API serves (the dashboard's files, a stream of server-sent events).
    media: tuple[str, ...] = ("application/json",)

    @property
    def streams(self) -> bool:
        """Whether its answer stays open, sending events as they come."""
        return "text/event-stream" in self.media
