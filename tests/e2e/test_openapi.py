"""The published OpenAPI 3.1 document, and real responses checked against it.

The document is read from ``GET /openapi.json`` like a client generator would;
the responses of a scripted scenario over real HTTP must conform to the schema
the document declares for their route and status. The validator below covers
the JSON Schema subset the shapes emit and refuses any keyword it does not
know, so a schema it cannot check fails loudly instead of passing silently.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest

from slotward.api.http.routes import Route
from slotward.api.http.table import ROUTES
from slotward.engine.tools import CREATE_HOLD
from tests.e2e.conftest import Answer, Server

# -- a small JSON Schema validator -------------------------------------------------------

_ANNOTATIONS = {"description", "examples", "title"}
_KNOWN = _ANNOTATIONS | {
    "$ref",
    "type",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "anyOf",
}
_JSON_TYPES = {"string", "integer", "number", "boolean", "object", "array", "null"}


def _is_type(value: object, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value)
        )
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    raise AssertionError(f"unknown JSON type {name!r}")


def resolve(doc: dict[str, Any], ref: str) -> dict[str, Any]:
    prefix = "#/components/schemas/"
    assert ref.startswith(prefix), f"$ref outside components/schemas: {ref}"
    name = ref.removeprefix(prefix)
    schemas = doc["components"]["schemas"]
    assert name in schemas, f"$ref to a missing schema: {ref}"
    found: dict[str, Any] = schemas[name]
    return found


def errors(
    doc: dict[str, Any], schema: dict[str, Any], value: object, path: str = "$"
) -> list[str]:
    """Every way ``value`` breaks ``schema`` (empty when it conforms)."""
    unknown = set(schema) - _KNOWN
    assert not unknown, f"the validator does not know {sorted(unknown)} (at {path})"
    if "$ref" in schema:
        return errors(doc, resolve(doc, schema["$ref"]), value, path)
    found: list[str] = []
    if "anyOf" in schema and all(errors(doc, o, value, path) for o in schema["anyOf"]):
        found.append(f"{path}: matches none of anyOf")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        assert set(types) <= _JSON_TYPES, types
        if not any(_is_type(value, t) for t in types):
            return [*found, f"{path}: {value!r} is not of type {types}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if _is_type(value, "number"):
        assert isinstance(value, int | float)
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            found.append(f"{path}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            found.append(f"{path}: longer than {schema['maxLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(f"{path}: does not match /{schema['pattern']}/")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            found.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(f"{path}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                found += errors(doc, schema["items"], item, f"{path}[{i}]")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                found.append(f"{path}: missing required {name!r}")
        properties = schema.get("properties", {})
        for name, member in value.items():
            if name in properties:
                found += errors(doc, properties[name], member, f"{path}.{name}")
            elif schema.get("additionalProperties", True) is False:
                found.append(f"{path}: undeclared member {name!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                found += errors(doc, schema["additionalProperties"], member, f"{path}.{name}")
    return found


def refs(node: object) -> Iterator[str]:
    """Every ``$ref`` anywhere in ``node``."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$ref"), str):
                yield item["$ref"]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


# -- the validator checks what it claims to check -----------------------------------------

_TOY = {
    "openapi": "3.1.0",
    "components": {
        "schemas": {
            "Slot": {
                "type": "object",
                "properties": {
                    "start": {"type": "string", "minLength": 1},
                    "n": {"type": ["integer", "null"], "minimum": 0, "maximum": 3},
                    "kind": {"type": "string", "enum": ["a", "b"]},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                    "next": {"anyOf": [{"$ref": "#/components/schemas/Slot"}, {"type": "null"}]},
                },
                "required": ["start"],
                "additionalProperties": False,
            }
        }
    },
}
_SLOT = {"$ref": "#/components/schemas/Slot"}


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ({"start": "x"}, True),
        ({"start": "x", "n": None, "kind": "a", "tags": ["t"], "next": {"start": "y"}}, True),
        ({"start": "x", "next": None}, True),
        ({}, False),
        ([], False),
        ({"start": ""}, False),
        ({"start": "x", "n": 4}, False),
        ({"start": "x", "n": -1}, False),
        ({"start": "x", "n": 1.5}, False),
        ({"start": "x", "n": True}, False),
        ({"start": "x", "kind": "c"}, False),
        ({"start": "x", "tags": ["a", "b", "c"]}, False),
        ({"start": "x", "tags": [1]}, False),
        ({"start": "x", "next": {}}, False),
        ({"start": "x", "next": {"start": "y", "extra": 1}}, False),
        ({"start": "x", "extra": 1}, False),
    ],
)
def test_the_validator_accepts_and_refuses_as_json_schema_does(value: object, ok: bool) -> None:
    assert (errors(_TOY, _SLOT, value) == []) is ok


def test_the_validator_refuses_keywords_it_cannot_check() -> None:
    with pytest.raises(AssertionError, match="does not know"):
        errors(_TOY, {"type": "string", "format": "date-time"}, "x")
    with pytest.raises(AssertionError, match="missing schema"):
        errors(_TOY, {"$ref": "#/components/schemas/Nope"}, "x")


# -- the document ------------------------------------------------------------------------------


@pytest.fixture
async def spec(server: Server) -> dict[str, Any]:
    answer = await server.anonymous().get("/openapi.json")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("application/json")
    doc: dict[str, Any] = answer.json
    return doc


def _route_id(route: Route) -> str:
    return f"{route.method} {route.path}"


async def test_the_document_is_openapi_3_1(spec: dict[str, Any]) -> None:
    assert spec["openapi"] == "3.1.0"
    assert spec["info"]["title"] == "slotward"
    assert isinstance(spec["info"]["version"], str)
    assert spec["info"]["version"]
    assert isinstance(spec["paths"], dict)
    assert spec["paths"]
    assert isinstance(spec["components"]["schemas"], dict)
    schemes = spec["components"]["securitySchemes"]
    assert schemes["apiKey"] == {"type": "http", "scheme": "bearer"}
    ids = [op["operationId"] for item in spec["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids)), "operationIds must be unique"


@pytest.mark.parametrize("route", ROUTES, ids=_route_id)
async def test_every_route_is_documented(spec: dict[str, Any], route: Route) -> None:
    assert route.path in spec["paths"], route.path
    op = spec["paths"][route.path].get(route.method.lower())
    assert op is not None, f"{route.method} is not documented for {route.path}"
    assert op["operationId"] == route.operation_id
    assert op["responses"], "no responses declared"
    for status in route.responses:
        assert str(status) in op["responses"]
    for status in op["responses"]:
        assert status == "default" or re.fullmatch(r"[1-5][0-9][0-9]", status), status
    declared = {(p["name"], p["in"]) for p in op.get("parameters", [])}
    for name in re.findall(r"\{([^}]+)\}", route.path):
        assert (name, "path") in declared, f"path parameter {name} is not declared"
        param = next(p for p in op["parameters"] if p["name"] == name)
        assert param["required"] is True
    if route.request is not None:
        body = op["requestBody"]["content"]["application/json"]["schema"]
        shapes = route.request if isinstance(route.request, tuple) else (route.request,)
        refs = [{"$ref": f"#/components/schemas/{shape.name}"} for shape in shapes]
        assert body == (refs[0] if len(refs) == 1 else {"anyOf": refs})
    if route.mutating:
        assert (("Idempotency-Key", "header") in declared) == route.client_key
        for status, response in op["responses"].items():
            if status.startswith("2") and not (route.sometimes_read_only and status == "200"):
                headers = response["headers"]
                assert headers["Idempotency-Key"]["required"] is True, status
                assert headers["Idempotent-Replayed"]["required"] is True, status
    assert op["security"] == ([{"apiKey": []}] if route.auth else [])


async def test_the_paths_are_exactly_the_route_table(spec: dict[str, Any]) -> None:
    documented = {(path, m.upper()) for path, item in spec["paths"].items() for m in item}
    assert documented == {(r.path, r.method) for r in ROUTES}


async def test_every_ref_resolves(spec: dict[str, Any]) -> None:
    found = list(refs(spec))
    assert found, "the document has no $ref at all"
    for ref in found:
        resolve(spec, ref)
    for name, schema in spec["components"]["schemas"].items():
        assert schema.get("type") == "object", name


async def test_every_schema_uses_only_the_checked_subset(spec: dict[str, Any]) -> None:
    """Run the validator over every component against an empty object: any
    keyword outside its subset would raise."""
    for name in spec["components"]["schemas"]:
        errors(spec, {"$ref": f"#/components/schemas/{name}"}, {})


# -- real responses conform ----------------------------------------------------------------


def conform(spec: dict[str, Any], method: str, path: str, answer: Answer) -> dict[str, Any]:
    """Check ``answer`` against the schema ``spec`` declares; return its JSON."""
    op = spec["paths"][path][method.lower()]
    status = str(answer.status)
    assert status in op["responses"] or answer.status >= 400, (
        f"{method} {path} answered {status}, which is not documented"
    )
    entry = op["responses"].get(status, op["responses"]["default"])
    media = "application/json" if answer.status < 400 else "application/problem+json"
    assert answer.headers["Content-Type"].startswith(media)
    content = entry.get("content")
    assert content is not None, f"{method} {path} {status} declares no body schema"
    schema = content[media]["schema"]
    value = answer.json
    problems = errors(spec, schema, value)
    assert problems == [], problems
    if answer.status >= 400:
        assert errors(spec, {"$ref": "#/components/schemas/Problem"}, value) == []
    for name, header in entry.get("headers", {}).items():
        if header.get("required"):
            assert name in answer.headers, f"{method} {path} {status} lacks {name}"
    found: dict[str, Any] = value
    return found


async def test_a_scripted_scenario_conforms_to_the_document(
    server: Server, spec: dict[str, Any]
) -> None:
    alice = await server.key(agent="alice", priority=50)
    bob = await server.key(agent="bob", priority=50)
    admin = await server.key(agent="ops", role="admin")
    body = {
        "workflow_id": "wf-1",
        "step": 0,
        "attendees": ["Alex <alex@example.com>", "sam@example.com"],
        "start": "2030-10-14T14:00:00Z",
        "duration_minutes": 30,
        "title": "Sync",
        "description": None,
    }

    created = await alice.create(body)
    assert created.status == 201
    hold = conform(spec, "POST", "/v1/holds", created)
    assert hold["status"] == "held"
    assert hold["description"] is None

    clash = await bob.create({**body, "workflow_id": "wf-2"})
    assert clash.status == 409
    conflict = conform(spec, "POST", "/v1/holds", clash)
    assert conflict["code"] == "slot_conflict"
    assert conflict["conflicts"]
    assert conflict["alternatives"]

    replay = await alice.create(body)
    assert replay.status == 201
    assert replay.replayed
    conform(spec, "POST", "/v1/holds", replay)

    read = await bob.get(f"/v1/holds/{hold['id']}")
    assert read.status == 200
    conform(spec, "GET", "/v1/holds/{hold_id}", read)

    committed = await alice.commit(hold["id"], hold["token"])
    assert committed.status == 200
    assert conform(spec, "POST", "/v1/holds/{hold_id}/commit", committed)["committed_at"]

    later = await alice.create({**body, "workflow_id": "wf-3", "start": "2030-10-15T09:00:00Z"})
    assert later.status == 201
    released = await admin.release(later.json["id"])
    assert released.status == 200
    conform(spec, "POST", "/v1/holds/{hold_id}/release", released)

    listed = await alice.get("/v1/holds?limit=1")
    assert listed.status == 200
    page = conform(spec, "GET", "/v1/holds", listed)
    assert len(page["items"]) == 1
    assert page["next_cursor"] is not None
    rest = await alice.get(f"/v1/holds?limit=1&cursor={page['next_cursor']}")
    assert conform(spec, "GET", "/v1/holds", rest)["next_cursor"] is None

    free = await alice.get(
        "/v1/availability?attendees=alex@example.com,sam@example.com"
        "&from=2030-10-14T09:00:00Z&to=2030-10-14T17:00:00Z&duration_minutes=30"
    )
    assert free.status == 200
    assert conform(spec, "GET", "/v1/availability", free)["busy"]

    via_tool = await bob.post(
        "/v1/tool-calls",
        {
            "workflow_id": "wf-9",
            "tool": "create_calendar_hold",
            "arguments": {
                "attendees": ["kim@example.com"],
                "start_time": "2030-10-16T10:00:00Z",
                "end_time": "2030-10-16T10:45:00Z",
            },
        },
    )
    assert via_tool.status == 201
    conform(spec, "POST", "/v1/tool-calls", via_tool)
    slots = await bob.post(
        "/v1/tool-calls",
        {
            "tool": "find_free_slots",
            "arguments": {
                "attendees": ["alex@example.com"],
                "from": "2030-10-14T09:00:00Z",
                "to": "2030-10-14T18:00:00Z",
                "duration_minutes": 30,
            },
        },
    )
    assert slots.status == 200
    assert conform(spec, "POST", "/v1/tool-calls", slots)["slots"]

    directory = await admin.post(
        "/v1/attendees", {"id": "alexandra", "emails": ["alexandra@example.com"]}
    )
    assert directory.status == 200
    conform(spec, "POST", "/v1/attendees", directory)

    audit = await alice.get("/v1/audit")
    assert audit.status == 200
    entries = conform(spec, "GET", "/v1/audit", audit)["items"]
    assert {e["outcome"] for e in entries} >= {"fresh", "conflict"}

    verify = await alice.get("/v1/audit/verify")
    assert verify.status == 200
    assert conform(spec, "GET", "/v1/audit/verify", verify)["ok"] is True

    health = await server.anonymous().get("/healthz")
    conform(spec, "GET", "/healthz", health)


async def test_the_ledger_conforms_to_the_document(server: Server, spec: dict[str, Any]) -> None:
    agent = await server.key()
    body = {"workflow_id": "wf-1", "tool": "send_email", "arguments": {"to": ["a@example.com"]}}
    acquired = await agent.post("/v1/executions", body)
    assert acquired.status == 201
    lease = conform(spec, "POST", "/v1/executions", acquired)
    path = f"/v1/executions/{lease['key']}"
    busy = await agent.post("/v1/executions", body)
    assert busy.status == 409
    conform(spec, "POST", "/v1/executions", busy)
    executing = await agent.get(path)
    assert conform(spec, "GET", "/v1/executions/{key}", executing)["state"] == "executing"

    result = {"lease_token": lease["lease_token"], "outcome": "succeeded", "result": {"id": 1}}
    done = await agent.post(path + "/complete", result)
    assert done.status == 200
    conform(spec, "POST", "/v1/executions/{key}/complete", done)
    replay = await agent.post("/v1/executions", body)
    assert replay.status == 200
    conform(spec, "POST", "/v1/executions", replay)
    stale = await agent.post(path + "/complete", {**result, "lease_token": "lease_x"})
    assert stale.status == 409
    conform(spec, "POST", "/v1/executions/{key}/complete", stale)
    read = await agent.get(path)
    assert conform(spec, "GET", "/v1/executions/{key}", read)["result"] == {"id": 1}
    view = await agent.get("/v1/workflows/wf-1")
    assert view.status == 200
    assert conform(spec, "GET", "/v1/workflows/{workflow_id}", view)["executions"]


async def test_error_responses_conform_to_the_problem_schema(
    server: Server, spec: dict[str, Any]
) -> None:
    """A documented error status carries the problem+json body it really has."""
    alice = await server.key(agent="alice")
    bob = await server.key(agent="bob")
    reviewer = await server.key(agent="rev", role="reviewer")
    body = {
        "workflow_id": "wf-1",
        "attendees": ["alex@example.com"],
        "start": "2030-10-14T14:00:00Z",
        "duration_minutes": 30,
    }
    hold = (await alice.create(body)).json

    missing = await alice.get("/v1/holds/hold_nope")
    assert missing.status == 404
    conform(spec, "GET", "/v1/holds/{hold_id}", missing)
    invalid = await alice.create({**body, "step": "3"})
    assert invalid.status == 422
    conform(spec, "POST", "/v1/holds", invalid)
    anonymous = await server.anonymous().get("/v1/audit")
    assert anonymous.status == 401
    conform(spec, "GET", "/v1/audit", anonymous)
    forbidden = await reviewer.create(body)
    assert forbidden.status == 403
    conform(spec, "POST", "/v1/holds", forbidden)
    not_owner = await bob.commit(hold["id"], hold["token"])
    assert not_owner.status == 403
    conform(spec, "POST", "/v1/holds/{hold_id}/commit", not_owner)
    gone = await alice.release("hold_nope")
    assert gone.status == 404
    conform(spec, "POST", "/v1/holds/{hold_id}/release", gone)


def _envelope_errors(spec: dict[str, Any], body: object) -> list[str]:
    op = spec["paths"]["/v1/tool-calls"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    return errors(spec, schema, body)


async def test_the_agents_envelopes_and_answers_conform_to_the_document(
    server: Server, spec: dict[str, Any]
) -> None:
    agent = await server.key()
    args = {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z",
            "duration_minutes": 30}  # fmt: skip
    call = {"id": "call_1", "type": "function",
            "function": {"name": CREATE_HOLD.name, "arguments": json.dumps(args)}}  # fmt: skip
    use = {"type": "tool_use", "id": "toolu_1", "name": CREATE_HOLD.name, "input": args}
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_2",
        "name": CREATE_HOLD.name,
        "arguments": json.dumps(args),
        "status": "completed",
    }
    bodies = [
        {"workflow_id": "wf-1", **call},
        {"workflow_id": "wf-1", "step": None, **use},
        {"workflow_id": "wf-1", "role": "assistant", "content": None, "tool_calls": [call]},
        {"workflow_id": "wf-1", "role": "assistant",
         "content": [{"type": "text", "text": "booking"}, use]},
        {"workflow_id": "wf-1", **item},
        {"workflow_id": "wf-1", "output": [{"type": "reasoning", "summary": []}, item]},
    ]  # fmt: skip
    for body in bodies:
        assert _envelope_errors(spec, body) == [], body
    # A vendor's member beside the call is ignored (docs/agents.md); the function is strict.
    assert _envelope_errors(spec, {**call, "extra": 1}) == []
    loose = {"name": CREATE_HOLD.name, "arguments": "{}", "extra": 1}
    assert _envelope_errors(spec, {**call, "function": loose}) != []
    assert _envelope_errors(spec, {"type": "function", "function": {"name": "x"}}) != []
    single = await agent.post("/v1/tool-calls", bodies[0])
    assert single.status == 201
    conform(spec, "POST", "/v1/tool-calls", single)
    for query, body in (("", bodies[2]), ("?reply=openai", bodies[0]),
                        ("?reply=openai", bodies[2]), ("?reply=anthropic", bodies[3]),
                        ("?reply=openai", bodies[4]), ("?reply=openai", bodies[5])):  # fmt: skip
        answer = await agent.post("/v1/tool-calls" + query, body)
        assert answer.status == 200, answer.body[:300]
        conform(spec, "POST", "/v1/tool-calls", answer)
    for fmt in ("", "?format=openai", "?format=anthropic", "?format=mcp"):
        listed = await agent.get("/v1/tools" + fmt)
        assert listed.status == 200
        conform(spec, "GET", "/v1/tools", listed)
    bad = await agent.get("/v1/tools?format=gemini")
    assert bad.status == 422
    conform(spec, "GET", "/v1/tools", bad)
