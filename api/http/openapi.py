"""The OpenAPI 3.1 document, generated from the route table and the shapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slotward import __version__
from slotward.api.http.routes import Route
from slotward.api.http.schemas import PROBLEM
from slotward.engine.rules.shapes import Field, Shape, collect_components

__all__ = ["build_openapi"]

_JSON = ("application/json",)
_IDEMPOTENCY_HEADERS = {
    "Idempotency-Key": {
        "description": "The key this call was recorded under (derived or the client's)",
        "schema": {"type": "string"},
    },
    "Idempotent-Replayed": {
        "description": "true when this is the stored first answer",
        "schema": {"type": "string", "enum": ["true", "false"]},
    },
}

# A single tool call answered with ?reply is a 200 whatever the call answered:
# these say what it did (docs/agents.md). Keyed by the route's operationId.
_REPLY_HEADERS = {
    "Slotward-Tool-Status": {
        "description": "With ?reply on a single call: the status the call itself answered "
        "(201, 409, ...)",
        "schema": {"type": "string", "pattern": "^[1-5][0-9]{2}$"},
    },
    "Retry-After": {
        "description": "With ?reply on a single call: the seconds to wait before calling again, "
        "where the call had one",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    "Slotward-Hold-Status": {
        "description": "A replayed commit or release: the hold's status now",
        "schema": {"type": "string"},
    },
}
_EXTRA_HEADERS: dict[str, dict[int, dict[str, Any]]] = {"toolCall": {200: _REPLY_HEADERS}}


def _ref(shape: Shape) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{shape.name}"}


def _schema(declared: Shape | Field | tuple[Shape | Field, ...]) -> dict[str, Any]:
    """A shape by reference, a field inline, a tuple as "any of these"."""
    if isinstance(declared, tuple):
        return {"anyOf": [_schema(one) for one in declared]}
    return _ref(declared) if isinstance(declared, Shape) else declared.json_schema()


def _shapes_of(declared: Shape | Field | tuple[Shape | Field, ...] | None) -> list[Shape]:
    """The shapes ``declared`` names (a field's items too), for the components."""
    if declared is None:
        return []
    if isinstance(declared, tuple):
        return [shape for one in declared for shape in _shapes_of(one)]
    if isinstance(declared, Shape):
        return [declared]
    nested = [s for s in (declared.shape, declared.items) if isinstance(s, Shape)]
    return nested + (_shapes_of(declared.items) if isinstance(declared.items, Field) else [])


def _responses(route: Route) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for status, shape in sorted(route.responses.items()):
        media = route.media if status < 400 else ("application/problem+json",)
        entry: dict[str, Any] = {"description": f"{status}"}
        if shape is None and status >= 400:
            shape = PROBLEM
        if shape is not None:
            entry["content"] = {m: {"schema": _schema(shape)} for m in media}
        elif status < 300 and status != 204 and route.media != _JSON:
            entry["content"] = {m: {"schema": {"type": "string"}} for m in media}  # not JSON
        if route.mutating and (status < 300 or status == 409):
            required = not (route.sometimes_read_only and status == 200)
            entry["headers"] = {
                name: {**header, "required": required}
                for name, header in _IDEMPOTENCY_HEADERS.items()
            }
        extra = _EXTRA_HEADERS.get(route.operation_id, {}).get(status, {})
        if extra:
            headers = entry.setdefault("headers", {})
            headers.update({name: {**header, "required": False} for name, header in extra.items()})
        out[str(status)] = entry
    out["default"] = {
        "description": "problem+json",
        "content": {"application/problem+json": {"schema": _ref(PROBLEM)}},
    }
    return out


def _operation(route: Route) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
        "responses": _responses(route),
    }
    params = [
        {
            "name": p.name,
            "in": p.where,
            "required": p.required or p.where == "path",
            "description": p.description,
            "schema": p.schema.json_schema() if p.schema else {"type": "string"},
        }
        for p in route.params
    ]
    if route.mutating and route.client_key:
        params.append(
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": "Your own key (1-255 printable ASCII) instead of the derived one",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            }
        )
    if params:
        op["parameters"] = params
    if route.request is not None:
        op["requestBody"] = {
            "required": not route.body_optional,
            "content": {"application/json": {"schema": _schema(route.request)}},
        }
    op["security"] = [{"apiKey": []}] if route.auth else []
    return op


def build_openapi(routes: Sequence[Route]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    shapes: list[Shape] = [PROBLEM]
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
        shapes.extend(_shapes_of(route.request))
        for declared in route.responses.values():
            shapes.extend(_shapes_of(declared))
    return {
        "openapi": "3.1.0",
        "info": {"title": "slotward", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": collect_components(shapes),
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
    }
