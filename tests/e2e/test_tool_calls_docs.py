"""GET /v1/tools in its three formats, and docs/agents.md's commands run for real.

The schemas are checked as JSON Schema (with the ``jsonschema`` package where
the environment has it, else by their structure). Every curl command of
docs/agents.md is sent, in order, to a fresh `slotward serve`; its answer must be the
status the document shows, and each tool call in it must be valid by the
published schema exactly when the server accepted its arguments.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from slotward.api.tool_formats import mcp_tool_document
from slotward.engine.tools import TOOLS
from tests.e2e.conftest import Answer, Client, Server
from tests.e2e.served import slotward_serve

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
_jsonschema: Any = (
    importlib.import_module("jsonschema") if importlib.util.find_spec("jsonschema") else None
)


def check_schema(schema: dict[str, Any]) -> None:
    """A valid JSON Schema (2020-12) of the kind OpenAI and Anthropic take."""
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema.get("required", [])) <= set(schema["properties"])
    assert "$ref" not in json.dumps(schema)
    assert not {"anyOf", "oneOf", "allOf"} & set(schema)
    if _jsonschema is not None:
        _jsonschema.Draft202012Validator.check_schema(schema)


def valid(schema: dict[str, Any], value: object) -> bool:
    if _jsonschema is not None:
        return bool(_jsonschema.Draft202012Validator(schema).is_valid(value))
    # Without the package: the members a model must give and may give.
    return (
        isinstance(value, dict)
        and set(schema.get("required", [])) <= set(value)
        and set(value) <= set(schema["properties"])
    )


async def test_the_tools_come_in_three_formats(server: Server) -> None:
    agent = await server.key()
    default = await agent.get("/v1/tools")
    openai = await agent.get("/v1/tools?format=openai")
    assert default.status == openai.status == 200
    assert default.json == openai.json
    anthropic = (await agent.get("/v1/tools?format=anthropic")).json
    mcp = (await agent.get("/v1/tools?format=mcp")).json
    names = [t.name for t in TOOLS]
    assert [t["function"]["name"] for t in openai.json] == names
    assert [t["name"] for t in anthropic] == [t["name"] for t in mcp] == names
    for o, a, m, tool in zip(openai.json, anthropic, mcp, TOOLS, strict=True):
        assert set(o) == {"type", "function"}
        assert o["type"] == "function"
        assert set(o["function"]) == {"name", "description", "parameters"}
        assert set(a) == {"name", "description", "input_schema"}
        # ?format=mcp is exactly what `slotward mcp` announces in tools/list: the
        # output schema too, and a keyed tool's workflow members in its inputSchema.
        assert m == mcp_tool_document(tool)
        assert set(m) == {"name", "description", "inputSchema", "outputSchema", "annotations"}
        assert o["function"]["parameters"] == a["input_schema"]
        model_args = set(a["input_schema"]["properties"])
        session = {"workflow_id", "step"} if tool.needs_workflow else set()
        assert set(m["inputSchema"]["properties"]) == model_args | session
        assert {k: v for k, v in m["inputSchema"].items() if k != "properties"} == {
            k: v for k, v in a["input_schema"].items() if k != "properties"
        }
        assert o["function"]["description"] == a["description"] == tool.description
        assert m["annotations"] == tool.annotations()
        check_schema(a["input_schema"])
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", a["name"])  # what both APIs take


async def test_a_reviewer_is_shown_the_tools_it_may_call(server: Server) -> None:
    reviewer = await server.key(agent="auditor", role="reviewer")
    shown = (await reviewer.get("/v1/tools?format=mcp")).json
    assert [t["name"] for t in shown] == [t.name for t in TOOLS if t.read_only]
    admin = await server.key(agent="boss", role="admin")
    assert len((await admin.get("/v1/tools")).json) == len(TOOLS)


async def test_the_tools_need_a_key_and_a_known_format(server: Server) -> None:
    assert (await server.anonymous().get("/v1/tools")).status == 401
    agent = await server.key()
    bad = await agent.get("/v1/tools?format=gemini")
    assert bad.status == 422
    assert bad.json["field"] == "format"


# -- docs/agents.md ------------------------------------------------------------------------

_CURL = re.compile(
    r"curl -s(i?) (?:-X (\w+) )?\"?http://127\.0\.0\.1:8080(/v1/[^\s\"]*)\"?(.*?)```", re.DOTALL
)
_BODY = re.compile(r"-d '([^']*)'")
_STATUS = re.compile(r"```\n+```\n+HTTP/1\.1 (\d{3})")


@dataclass(frozen=True)
class Example:
    method: str
    path: str
    body: Any
    status: int | None  # the status the document shows, where it shows one


def examples(text: str) -> list[Example]:
    found = []
    for match in _CURL.finditer(text):
        shown, method, path, rest = match.groups()
        body = _BODY.search(rest)
        after = _STATUS.match(text, match.end() - 3)
        found.append(Example(
            method or ("POST" if body else "GET"), path,
            json.loads(body.group(1)) if body else None,
            int(after.group(1)) if shown and after else None,
        ))  # fmt: skip
    return found


def test_the_document_shows_its_commands() -> None:
    found = examples(DOC.read_text())
    assert len(found) == 8
    assert [e.status for e in found if e.status is not None] == [201, 201, 422]
    assert all(e.method == "POST" for e in found[1:])


def calls_of(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """(tool name, arguments) of each tool call in an example's body."""
    if "tool_calls" in body:
        return [(c["function"]["name"], c["function"]["arguments"]) for c in body["tool_calls"]]
    if isinstance(body.get("content"), list):
        return [(b["name"], b["input"]) for b in body["content"] if b["type"] == "tool_use"]
    if "output" in body:
        return [(i["name"], i["arguments"]) for i in body["output"] if i["type"] == "function_call"]
    if body.get("type") == "function_call":
        return [(body["name"], body["arguments"])]
    if body.get("type") == "function":
        return [(body["function"]["name"], body["function"]["arguments"])]
    return [(body["name"], body["input"])]


def accepted(example: Example, answer: Answer) -> list[bool]:
    """Per call: did the server take its arguments (a taken slot counts: they were fine)?"""

    def ok(status: int, code: object) -> bool:
        return status < 400 or code == "slot_conflict"

    doc = answer.json
    if "reply=openai" in example.path:
        listed = doc if isinstance(doc, list) else [doc]
        shown = [json.loads(m["content"] if "content" in m else m["output"]) for m in listed]
        return [not _problem(c) or c["code"] == "slot_conflict" for c in shown]
    if "reply=anthropic" in example.path:
        shown = [json.loads(b["content"]) for b in doc["content"]]
        return [not _problem(c) or c["code"] == "slot_conflict" for c in shown]
    if "results" in doc:
        return [ok(r["status"], r.get("problem", {}).get("code")) for r in doc["results"]]
    return [ok(answer.status, doc.get("code"))]


def _problem(doc: dict[str, Any]) -> bool:
    return str(doc.get("type", "")).startswith("urn:slotward:problem:")


def test_the_documents_commands_answer_as_it_shows(tmp_path: Path) -> None:
    """As the document says it ran them: against `slotward serve --demo-key`."""
    with slotward_serve(tmp_path, {}, demo_key=True) as served:
        assert served.secret is not None
        checked = asyncio.run(_run_the_document(served.base, served.secret))
    assert checked == 10
    assert served.secret.split(".")[1] not in served.log()  # no key in any log line


async def _run_the_document(base: str, secret: str) -> int:
    async with aiohttp.ClientSession() as session:
        agent = Client(session, base, secret)
        listed = (await agent.get("/v1/tools?format=anthropic")).json
        schemas = {t["name"]: t["input_schema"] for t in listed}
        checked = 0
        for example in examples(DOC.read_text()):
            answer = await agent.request(example.method, example.path, example.body)
            assert answer.status < 500
            if example.status is not None:
                assert answer.status == example.status, (example.path, answer.body[:300])
            if example.body is None:
                continue
            for (name, arguments), took in zip(
                calls_of(example.body), accepted(example, answer), strict=True
            ):
                if isinstance(arguments, str):
                    try:
                        arguments = json.loads(arguments, object_pairs_hook=_unique)
                    except ValueError:
                        arguments = None
                fits = name in schemas and valid(schemas[name], arguments)
                assert fits == took, (name, arguments, answer.body[:300])
                checked += 1
    return checked


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


async def test_the_openapi_document_declares_a_replys_headers(server: Server) -> None:
    """A single call's ?reply is a 200 whatever the call answered: the headers that
    say what it did are declared on that 200."""
    agent = await server.key()
    spec = (await server.anonymous().get("/openapi.json")).json
    declared = spec["paths"]["/v1/tool-calls"]["post"]["responses"]["200"]["headers"]
    call = {"workflow_id": "wf-1", "id": "c", "type": "function",
            "function": {"name": TOOLS[0].name, "arguments": json.dumps(
                {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z",
                 "duration_minutes": 30})}}  # fmt: skip
    answer = await agent.post("/v1/tool-calls?reply=openai", call)
    said = {"Slotward-Tool-Status", "Idempotency-Key", "Idempotent-Replayed"}
    assert said <= set(answer.headers)
    assert said | {"Retry-After", "Slotward-Hold-Status"} <= set(declared)
