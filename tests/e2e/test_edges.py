"""What any bytes get: never a secret in a log line or an answer, never a 500.

Requests aiohttp's HTTP parser refuses used to be logged at ERROR with the
refused header's text (a bearer key with a stray CR in it, say) and answered
``text/plain`` echoing it; a bearer secret past ASCII and a "gzip" body that is
not gzip were 500s with a traceback. Every answer named the Python and aiohttp
versions in ``Server``.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path

import pytest

from slotward.api.config import Config
from slotward.api.logs import configure_logging
from tests.e2e.conftest import HOLD_BODY, Server
from tests.e2e.rawhttp import BOUND, Raw, connect, exchange, parse, request_bytes
from tests.e2e.served import slotward_serve

PROBLEM = "application/problem+json"


def malformed(key: str) -> dict[str, bytes]:
    """Requests the HTTP parser refuses, each carrying the bearer ``key``."""
    bearer = b"Authorization: Bearer " + key.encode()

    def get(*lines: bytes) -> bytes:
        return b"\r\n".join([b"GET /v1/holds HTTP/1.1", b"Host: x", *lines]) + b"\r\n\r\n"

    return {
        "cr_without_lf": get(bearer + b"\rX-Next: y"),
        "key_file_with_crlf": get(bearer + b"\r\r"),
        "nul_after_key": get(bearer + b"\x00"),
        "ctl_after_key": get(bearer + b"\x01"),
        "esc_after_key": get(bearer + b"\x1b[2J"),
        "del_after_key": get(bearer + b"\x7f"),
        "header_over_8k": get(bearer + b"A" * 9000),
        "bare_lf_lines": get(bearer).replace(b"\r\n", b"\n"),
        "space_before_colon": get(b"Authorization : Bearer " + key.encode()),
        "obs_fold": get(b"Authorization: Bearer", b" " + key.encode()),
        "key_in_header_name": get(key.encode() + b"\x00: x", bearer),
        "key_in_target": b"GET /v1/" + key.encode() + b"\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
        "too_many_headers": get(bearer, *[b"X-%d: y" % i for i in range(200)]),
        "bad_content_length": get(bearer, b"Content-Length: 1" + key.encode()),
        "two_content_lengths": get(bearer, b"Content-Length: 1", b"Content-Length: 2"),
        "bad_chunk": b"POST /v1/holds HTTP/1.1\r\nHost: x\r\n" + bearer
        + b"\r\nTransfer-Encoding: chunked\r\n\r\nzz" + key.encode() + b"\r\n",
        "bad_http_version": b"GET /v1/holds HTTP/" + key.encode() + b"\r\n" + bearer + b"\r\n\r\n",
    }  # fmt: skip


def _assert_problem(raw: Raw, status: int, code: str) -> None:
    assert (raw.status, raw.headers["content-type"]) == (status, PROBLEM), raw.wire[:300]
    assert raw.json["code"] == code
    assert raw.headers["server"] == "slotward"


def _assert_clean_log(text: str, secret: str) -> None:
    assert secret not in text
    assert "Traceback" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert not [d for d in lines if d["level"] in ("ERROR", "CRITICAL")], text


async def test_parser_refusals_are_problems_that_echo_and_log_nothing(
    server: Server, log_stream: io.StringIO
) -> None:
    client = await server.key()
    secret = str(client.secret)
    hidden = secret.split(".")[1]  # the part that makes it a secret
    for name, data in malformed(secret).items():
        raw = parse(await exchange(server.base, data))
        _assert_problem(raw, 400, "malformed_request")
        assert raw.headers["connection"] == "close", name
        assert hidden not in raw.wire.decode("latin-1"), name
        assert "aiohttp" not in raw.wire.decode("latin-1"), name
    text = log_stream.getvalue()
    _assert_clean_log(text, hidden)
    refusals = [json.loads(line) for line in text.splitlines()]
    assert {(d["logger"], d["outcome"]) for d in refusals if d["msg"].startswith("refused")} == {
        ("slotward.edge", "malformed_request")
    }


async def test_a_bearer_secret_past_ascii_is_an_invalid_key_not_a_500(
    server: Server, log_stream: io.StringIO
) -> None:
    client = await server.key()
    for secret in (
        b"\xff\xfe",
        b"sw_key_1.\xc3\xa9t\xc3\xa9",
        str(client.secret).encode() + b"\xff",
    ):
        data = request_bytes("GET", "/v1/holds?attendee=a@example.com",
                             [(b"Authorization", b"Bearer " + secret)])  # fmt: skip
        raw = parse(await exchange(server.base, data))
        _assert_problem(raw, 401, "invalid_api_key")
        assert raw.headers["www-authenticate"].startswith("Bearer ")
    _assert_clean_log(log_stream.getvalue(), str(client.secret))


async def test_every_401_names_the_bearer_scheme(server: Server) -> None:
    missing = await server.anonymous().get("/v1/holds?attendee=a@example.com")
    wrong = await server.anonymous().get(
        "/v1/holds?attendee=a@example.com", headers={"Authorization": "Bearer sw_key_1.nope"}
    )
    assert (missing.status, wrong.status) == (401, 401)
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="slotward"'
    assert wrong.headers["WWW-Authenticate"] == 'Bearer realm="slotward", error="invalid_token"'


async def test_a_gzip_body_that_is_not_gzip_is_a_400(
    server: Server, log_stream: io.StringIO
) -> None:
    client = await server.key()
    body = json.dumps({**HOLD_BODY, "workflow_id": "wf-gzip"}).encode()
    answer = await client.create({}, raw=body, headers={"Content-Encoding": "gzip"})
    assert (answer.status, answer.headers["Content-Type"]) == (400, PROBLEM)
    assert answer.json["code"] == "undecodable_body"
    assert server.counts()["holds"] == 0
    _assert_clean_log(log_stream.getvalue(), str(client.secret))


# Each request header the service or aiohttp reads, and one nobody does.
HEADERS = (b"Authorization", b"Content-Type", b"Content-Encoding", b"Content-Length",
           b"Idempotency-Key", b"Host", b"Transfer-Encoding", b"Accept", b"Accept-Encoding",
           b"Connection", b"Expect", b"Cookie", b"X-Custom")  # fmt: skip
# Headers whose value the service reads: hostile bytes there are a 4xx, never
# served (the others, such as Accept or X-Custom, may be ignored and served).
REFUSED = (b"Authorization", b"Content-Encoding", b"Content-Length", b"Idempotency-Key",
           b"Transfer-Encoding", b"Expect")  # fmt: skip
HOSTILE = {
    "high_bytes": bytes(range(0x80, 0x100)),
    "invalid_utf8": b"\xff\xfe\xc3",
    "utf8_line_separator": "a\u2028b\u0085c".encode(),
    "nul": b"a\x00b",
    "ctl": b"a\x01\x1b[31mb",
    "del": b"a\x7fb",
    "cr": b"a\rb",
    "tab_only": b"\t",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_any_bytes_in_any_header_get_a_4xx_problem_or_an_answer_never_a_500(
    server: Server, log_stream: io.StringIO, kind: str
) -> None:
    client = await server.key()
    secret = str(client.secret)
    for n, name in enumerate(HEADERS):
        body = json.dumps({**HOLD_BODY, "workflow_id": f"wf-{kind}-{n}"}).encode()
        normal = {b"Authorization": b"Bearer " + secret.encode(),
                  b"Content-Length": str(len(body)).encode()}  # fmt: skip
        normal[name] = HOSTILE[kind]
        data = request_bytes("POST", "/v1/holds", list(normal.items()), body)
        raw = parse(await exchange(server.base, data))
        assert raw.status < 500, (name, raw.wire[:300])
        assert raw.headers["server"] == "slotward"
        if raw.status >= 400:
            assert raw.headers["content-type"] == PROBLEM, (name, raw.wire[:300])
        if name in REFUSED and kind != "tab_only":  # a lone tab is legal whitespace
            assert 400 <= raw.status < 500, (name, raw.wire[:300])
        assert secret not in raw.wire.decode("latin-1")
    _assert_clean_log(log_stream.getvalue(), secret)


async def test_no_answer_names_python_or_aiohttp(server: Server) -> None:
    client = await server.key()
    made = await client.create(dict(HOLD_BODY))
    answers = [made, await client.get("/healthz"), await client.get("/nowhere"),
               await server.anonymous().get("/v1/holds")]  # fmt: skip
    assert [a.status for a in answers] == [201, 200, 404, 401]
    assert {a.headers["Server"] for a in answers} == {"slotward"}
    expect = request_bytes("POST", "/v1/holds", [(b"Expect", b"something-else"),
                                                 (b"Content-Length", b"2")], b"{}")  # fmt: skip
    refused = parse(await exchange(server.base, expect))
    assert (refused.status, refused.headers["server"]) == (417, "slotward")


async def test_text_logs_cannot_be_forged_by_a_logged_value(server: Server) -> None:
    root, own = logging.getLogger(), logging.getLogger("slotward")
    handlers, level, own_level = list(root.handlers), root.level, own.level
    stream = io.StringIO()
    forged = "2030-01-01T00:00:00.000Z INFO slotward.access POST /v1/holds 201 agent=admin"
    try:
        configure_logging(Config(log_format="text", log_level="INFO"), stream)
        agent = await server.key(agent="agent-text")
        for day, breaker in enumerate(("\n", "\r", "\u2028", "\x85", "\x1b[1A\r"), start=10):
            start = f"2030-10-{day}T14:00:00Z"
            made = await agent.create({**HOLD_BODY, "workflow_id": f"wf{breaker}{forged}",
                                       "start": start})  # fmt: skip
            assert made.status == 201
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        own.setLevel(own_level)
    lines = stream.getvalue().splitlines()  # every Unicode line boundary
    assert len(lines) == 5
    assert all(" INFO slotward.access POST /v1/holds 201 " in line for line in lines)
    assert not any(line.startswith("2030-") for line in lines)
    assert 'workflow="wf\\n2030-01-01T00:00:00.000Z INFO slotward.access' in lines[0]


def test_serve_refuses_malformed_requests_without_logging_the_key(tmp_path: Path) -> None:
    """Through the real `slotward serve`, its stderr captured whole."""
    env = {"SLOTWARD_LOG_FORMAT": "json", "SLOTWARD_LOG_LEVEL": "DEBUG",
           "SLOTWARD_HEAD_TIMEOUT": "0.5"}  # fmt: skip
    with slotward_serve(tmp_path, env, demo_key=True) as served:
        secret = str(served.secret)
        answers = _drive(served.base, secret)
    for raw in map(parse, answers[:-1]):
        _assert_problem(raw, 400, "malformed_request")
    assert answers[-1] == b""  # the trickled head: cut off, unanswered
    hidden = secret.split(".")[1]
    assert not [a for a in answers if hidden.encode() in a]
    text = served.log()
    _assert_clean_log(text, hidden)
    assert '"outcome":"malformed_request"' in text
    assert "request head took longer than 0.5 s" in text


def _drive(base: str, secret: str) -> list[bytes]:
    async def run() -> list[bytes]:
        answers = [await exchange(base, data) for data in malformed(secret).values()]
        reader, writer = await connect(base)
        writer.write(b"GET /healthz HTTP/1.1\r\nAuthorization: Bearer " + secret.encode())
        await writer.drain()
        try:  # the rest of the head never comes
            answers.append(await asyncio.wait_for(reader.read(), BOUND))
        finally:
            writer.close()
        return answers

    return asyncio.run(run())
