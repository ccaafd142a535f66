"""The access log over real HTTP, and through the real `slotward serve`.

One JSON line per request, with the route template, status, outcome, key,
workflow, agent and tenant; never an API key or a body.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from slotward.api.config import Config
from slotward.api.logs import configure_logging
from tests.e2e.conftest import Server
from tests.e2e.served import slotward_serve
from tests.e2e.test_cli import SLOTWARD, _call, _free_port

MARKERS = ("title-marker-zeta", "thought-marker-zeta", "description-marker-zeta")


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]  # every line is JSON


def _access(stream: io.StringIO) -> list[dict[str, Any]]:
    return [d for d in _lines(stream) if d["logger"] == "slotward.access"]


def _body(workflow: str, start: str = "2030-10-14T14:00:00Z") -> dict[str, Any]:
    return {"workflow_id": workflow, "attendees": ["alex@example.com"], "start": start,
            "duration_minutes": 30, "title": MARKERS[0], "agent_thought": MARKERS[1],
            "description": MARKERS[2]}  # fmt: skip


async def test_one_json_access_line_per_request_with_its_outcome(
    server: Server, log_stream: io.StringIO
) -> None:
    a = await server.key(tenant="acme", agent="agent-a")
    b = await server.key(tenant="acme", agent="agent-b")
    first = await a.create(_body("wf-log-a"))
    again = await a.create(_body("wf-log-a"))
    lost = await b.create(_body("wf-log-b", "2030-10-14T14:15:00Z"))
    assert (first.status, again.status, lost.status) == (201, 201, 409)
    commit = await a.commit(first.json["id"], first.json["token"])
    assert commit.status == 200
    read = await a.get(f"/v1/holds/{first.json['id']}")
    assert read.status == 200

    created, replayed, refused, committed, got = _access(log_stream)
    assert {k: created[k] for k in ("level", "method", "route", "status", "outcome")} == {
        "level": "INFO", "method": "POST", "route": "/v1/holds", "status": 201, "outcome": "fresh",
    }  # fmt: skip
    assert created["msg"] == "POST /v1/holds 201"
    assert created["key"] == first.key
    assert (created["workflow"], created["agent"], created["tenant"]) == (
        "wf-log-a", "agent-a", "acme",
    )  # fmt: skip
    assert created["hold"] == first.json["id"]
    assert isinstance(created["duration_ms"], float)
    assert created["duration_ms"] >= 0
    assert created["ts"].endswith("Z")
    assert (replayed["outcome"], replayed["key"], replayed["status"]) == (
        "replayed",
        first.key,
        201,
    )
    assert (refused["outcome"], refused["status"], refused["agent"]) == (
        "slot_conflict", 409, "agent-b",
    )  # fmt: skip
    assert refused["key"] == lost.key  # the key answered, though nothing was stored for it
    assert committed["route"] == "/v1/holds/{hold_id}/commit"
    assert (committed["outcome"], committed["key"]) == ("fresh", commit.key)
    assert got["route"] == "/v1/holds/{hold_id}"
    assert "outcome" not in got  # reads have no idempotency outcome
    assert got["agent"] == "agent-a"

    output = log_stream.getvalue()
    for secret in (str(a.secret), str(b.secret), *MARKERS):
        assert secret not in output
    assert "Bearer" not in output
    assert "Authorization" not in output


async def test_refused_keys_are_logged_without_the_key(
    server: Server, log_stream: io.StringIO
) -> None:
    bogus = "sw_this-is-not-a-real-key-zeta"
    answer = await server.anonymous().create(
        _body("wf-x"), headers={"Authorization": f"Bearer {bogus}"}
    )
    assert answer.status == 401
    missing = await server.anonymous().get("/v1/holds/hold_nope?attendee=alex@example.com")
    assert missing.status == 401
    unknown = await server.anonymous().get("/not/a/route")
    assert unknown.status == 404
    bad_key, no_key, no_route = _access(log_stream)
    assert (bad_key["outcome"], bad_key["status"]) == ("invalid_api_key", 401)
    assert "agent" not in bad_key
    assert "tenant" not in bad_key
    assert (no_key["outcome"], no_key["route"]) == ("missing_api_key", "/v1/holds/{hold_id}")
    assert (no_route["route"], no_route["status"], no_route["outcome"]) == (
        "unmatched", 404, "http_error",
    )  # fmt: skip
    output = log_stream.getvalue()
    assert bogus not in output
    assert "alex@example.com" not in output  # no raw path, so no query string
    assert "/not/a/route" not in output
    assert not any(marker in output for marker in MARKERS)


async def test_text_format_writes_one_readable_line(server: Server) -> None:
    root, own = logging.getLogger(), logging.getLogger("slotward")
    handlers, level, own_level = list(root.handlers), root.level, own.level
    stream = io.StringIO()
    try:
        configure_logging(Config(log_format="text", log_level="INFO"), stream)
        agent = await server.key(agent="agent-text")
        made = await agent.create(_body("wf-text"))
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        own.setLevel(own_level)
    [line] = stream.getvalue().splitlines()
    assert " INFO slotward.access POST /v1/holds 201 " in line
    assert f"key={made.key}" in line
    assert "outcome=fresh" in line
    assert "agent=agent-text" in line
    assert str(agent.secret) not in line


def test_serve_writes_json_access_lines_to_stderr_and_no_default_access_log(
    tmp_path: Path,
) -> None:
    env = {"SLOTWARD_LOG_FORMAT": "json", "SLOTWARD_LOG_LEVEL": "INFO"}
    with slotward_serve(tmp_path, env, demo_key=True) as served:
        secret, base = str(served.secret), served.base
        status, _, _ = _call(f"{base}/v1/holds", _body("wf-cli", "2099-10-14T14:00:00Z"), secret)
        assert status == 201
        urllib.request.urlopen(f"{base}/healthz", timeout=10).close()
    text = served.log()
    lines = [json.loads(line) for line in text.splitlines()]
    access = [
        (d["method"], d["route"], d["status"]) for d in lines if d["logger"] == "slotward.access"
    ]
    assert access == [("POST", "/v1/holds", 201), ("GET", "/healthz", 200)]
    created = next(d for d in lines if d.get("route") == "/v1/holds")
    assert (created["agent"], created["tenant"], created["outcome"]) == (
        "demo-agent",
        "demo",
        "fresh",
    )
    assert secret not in text
    assert "HTTP/1.1" not in text  # aiohttp's own access line is off
    assert not any(marker in text for marker in MARKERS)


@pytest.mark.parametrize(
    ("name", "value"), [("SLOTWARD_LOG_FORMAT", "xml"), ("SLOTWARD_LOG_LEVEL", "chatty")]
)
def test_serve_refuses_unknown_log_settings(tmp_path: Path, name: str, value: str) -> None:
    done = subprocess.run(
        [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", "serve",
         "--port", str(_free_port())],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, name: value},
    )  # fmt: skip
    assert done.returncode == 2
    assert "invalid_config" in done.stderr
    assert name in done.stderr
    assert done.stdout == ""  # refused before anything was served
