"""The webhook sender against a real aiohttp receiver on 127.0.0.1.

The receiver is a plain aiohttp app (not slotward's), served by aiohttp's
TestServer on a free port; it records what reached it, so "refused" means
never hit, not merely answered with an error.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from slotward.adapters.webhooks.guard import UrlGuard
from slotward.adapters.webhooks.sender import Outcome, WebhookSender
from slotward.engine.clock import FixedClock
from slotward.engine.errors import ValidationFailed

NOW = datetime(2030, 10, 14, 14, 0, tzinfo=UTC)
BODY = b'{"type":"hold.committed","timestamp":"2030-10-14T14:00:00Z","data":{"id":"hold_1"}}'
SIGNATURE = "v1,c2VjcmV0LWxvb2tpbmctc2lnbmF0dXJlLXZhbHVlLTEyMzQ1Ng=="
HEADERS = {
    "webhook-id": "evt_1",
    "webhook-timestamp": str(int(NOW.timestamp())),
    "webhook-signature": SIGNATURE,
}


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    base: str
    port: int
    hits: list[Hit] = field(default_factory=list)

    def paths(self) -> list[str]:
        return [hit.path for hit in self.hits]


def _app(receiver: list[Receiver]) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        receiver[0].hits.append(Hit(request.path, dict(request.headers), body))
        name = request.match_info["name"]
        if name == "ok":
            return web.Response(status=204)
        if name == "created":
            return web.Response(status=201, text="thanks")
        if name == "fail":
            return web.Response(status=500, text="boom")
        if name == "redirect":
            raise web.HTTPFound("/target?token=receiver-secret")
        if name == "gone":
            return web.Response(status=410)
        if name == "busy-seconds":
            return web.Response(status=429, headers={"Retry-After": "30"})
        if name == "busy-date":
            later = format_datetime(NOW + timedelta(seconds=120), usegmt=True)
            return web.Response(status=503, headers={"Retry-After": later})
        if name == "busy-garbage":
            return web.Response(status=429, headers={"Retry-After": "soon"})
        if name == "fail-with-retry-after":
            return web.Response(status=500, headers={"Retry-After": "30"})
        if name == "slow":
            await asyncio.sleep(5)
            return web.Response(status=204)
        if name == "large":
            return web.Response(status=200, body=b"x" * (4 * 1024 * 1024))
        return web.Response(status=404)

    app = web.Application()
    app.router.add_post("/{name}", handle)
    return app


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    holder: list[Receiver] = []
    server = TestServer(_app(holder), host="127.0.0.1", port=0)
    await server.start_server()
    assert server.port is not None
    holder.append(Receiver(f"http://127.0.0.1:{server.port}", server.port))
    try:
        yield holder[0]
    finally:
        await server.close()


@pytest.fixture
async def sender() -> AsyncIterator[WebhookSender]:
    made = WebhookSender(allow_private=True, timeout=2.0, clock=FixedClock(NOW))
    try:
        yield made
    finally:
        await made.close()


def _no_secret_in(outcome: Outcome) -> None:
    assert outcome.error is None or (
        SIGNATURE not in outcome.error and len(outcome.error) <= 300 and "\n" not in outcome.error
    )


async def test_a_2xx_is_delivered_with_the_headers_and_body_as_given(
    receiver: Receiver, sender: WebhookSender
) -> None:
    outcome = await sender.send(f"{receiver.base}/ok", HEADERS, BODY)
    assert outcome == Outcome(204, None, None)
    assert outcome.ok
    assert not outcome.gone
    (hit,) = receiver.hits
    assert hit.body == BODY
    for name, value in HEADERS.items():
        assert hit.headers[name] == value
    assert hit.headers["Content-Type"] == "application/json"
    assert hit.headers["User-Agent"] == "slotward-webhooks"
    created = await sender.send(f"{receiver.base}/created", HEADERS, BODY)
    assert created.ok
    assert created.status == 201


async def test_connections_are_kept_alive_between_sends(
    receiver: Receiver, sender: WebhookSender
) -> None:
    for _ in range(5):
        assert (await sender.send(f"{receiver.base}/ok", HEADERS, BODY)).ok
    assert len(receiver.hits) == 5


async def test_a_500_is_a_failure(receiver: Receiver, sender: WebhookSender) -> None:
    outcome = await sender.send(f"{receiver.base}/fail", HEADERS, BODY)
    assert outcome == Outcome(500, "HTTP 500", None)
    assert not outcome.ok


async def test_a_redirect_is_not_followed(receiver: Receiver, sender: WebhookSender) -> None:
    outcome = await sender.send(f"{receiver.base}/redirect", HEADERS, BODY)
    assert outcome.status == 302
    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith("redirect to '")
    assert outcome.error.endswith("not followed")
    assert "receiver-secret" not in outcome.error  # a Location's query is not logged
    assert receiver.paths() == ["/redirect"]  # the target never hit


async def test_a_410_is_gone(receiver: Receiver, sender: WebhookSender) -> None:
    outcome = await sender.send(f"{receiver.base}/gone", HEADERS, BODY)
    assert outcome.status == 410
    assert outcome.gone
    assert not outcome.ok


@pytest.mark.parametrize(
    ("path", "status", "retry_after"),
    [
        ("busy-seconds", 429, 30.0),
        ("busy-date", 503, 120.0),
        ("busy-garbage", 429, None),
        ("fail-with-retry-after", 500, None),  # kept only on 429 and 503
    ],
)
async def test_retry_after_is_read_on_429_and_503(
    receiver: Receiver, sender: WebhookSender, path: str, status: int, retry_after: float | None
) -> None:
    outcome = await sender.send(f"{receiver.base}/{path}", HEADERS, BODY)
    assert outcome.status == status
    assert outcome.retry_after == retry_after
    assert outcome.error == f"HTTP {status}"


async def test_a_large_response_is_read_only_in_part(
    receiver: Receiver, sender: WebhookSender
) -> None:
    assert (await sender.send(f"{receiver.base}/large", HEADERS, BODY)).ok
    assert (await sender.send(f"{receiver.base}/ok", HEADERS, BODY)).ok  # the pool still works


async def test_a_receiver_slower_than_the_timeout_times_out(receiver: Receiver) -> None:
    # Real network timing is the point here: the sender's own timeout.
    sender = WebhookSender(allow_private=True, timeout=0.5)
    try:
        outcome = await sender.send(f"{receiver.base}/slow", HEADERS, BODY)
    finally:
        await sender.close()
    assert outcome == Outcome(None, "timed out after 0.5 s", None)
    assert receiver.paths() == ["/slow"]


async def test_a_closed_port_is_a_connection_failure(sender: WebhookSender) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = await sender.send(f"http://127.0.0.1:{port}/ok", HEADERS, BODY)
    assert outcome.status is None
    assert outcome.error is not None
    assert outcome.error.startswith("connection failed")
    _no_secret_in(outcome)


async def test_a_tls_failure_is_an_outcome(receiver: Receiver, sender: WebhookSender) -> None:
    outcome = await sender.send(f"https://127.0.0.1:{receiver.port}/ok", HEADERS, BODY)
    assert outcome.status is None
    assert outcome.error is not None
    assert outcome.error.startswith("TLS error: ")
    assert receiver.hits == []


async def test_a_reset_connection_is_an_outcome(sender: WebhookSender) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(10)
        writer.transport.abort()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        outcome = await sender.send(f"http://127.0.0.1:{port}/ok", HEADERS, BODY)
    finally:
        server.close()
        await server.wait_closed()
    assert outcome == Outcome(None, "the receiver closed the connection without an answer", None)


async def test_an_invalid_url_is_an_outcome_not_an_exception(sender: WebhookSender) -> None:
    outcome = await sender.send("http://user:pw@hooks.example/", HEADERS, BODY)
    assert outcome.status is None
    assert outcome.error is not None
    assert outcome.error.startswith("invalid_url: ")
    assert "pw" not in outcome.error.split(": ", 1)[1].replace("'user:pass@'", "")


# -- SSRF ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "１２７.０.０.１"],
    ids=["ip", "name", "mapped", "fullwidth"],
)
async def test_loopback_is_refused_with_the_setting_off_and_never_hit(
    receiver: Receiver, host: str
) -> None:
    sender = WebhookSender(allow_private=False, timeout=2.0)
    try:
        outcome = await sender.send(f"http://{host}:{receiver.port}/ok", HEADERS, BODY)
    finally:
        await sender.close()
    assert outcome.status is None
    assert outcome.error is not None
    assert outcome.error.startswith("url_not_allowed: ")
    assert "loopback" in outcome.error
    assert "SLOTWARD_ALLOW_PRIVATE_URLS=true" in outcome.error
    assert receiver.hits == []


async def test_localhost_is_reached_with_the_setting_on(
    receiver: Receiver, sender: WebhookSender
) -> None:
    assert (await sender.send(f"http://localhost:{receiver.port}/ok", HEADERS, BODY)).ok
    assert receiver.paths() == ["/ok"]


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://0.0.0.0:80/"]
)
async def test_link_local_and_unspecified_are_refused_even_with_the_setting_on(
    sender: WebhookSender, url: str
) -> None:
    outcome = await sender.send(url, HEADERS, BODY)
    assert outcome.status is None
    assert outcome.error is not None
    assert outcome.error.startswith("url_not_allowed: ")
    assert "SLOTWARD_ALLOW_PRIVATE_URLS" not in outcome.error  # the setting would not help


async def test_a_public_looking_name_that_resolves_private_is_refused(receiver: Receiver) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "10.0.0.7"] if host == "hooks.example.com" else []

    sender = WebhookSender(allow_private=False, timeout=2.0, resolve=resolve)
    try:
        outcome = await sender.send("http://hooks.example.com/ok", HEADERS, BODY)
        unknown = await sender.send("http://nowhere.example/ok", HEADERS, BODY)
    finally:
        await sender.close()
    assert outcome.error is not None
    assert outcome.error.startswith(
        "url_not_allowed: host 'hooks.example.com' resolves to 10.0.0.7"
    )
    assert unknown.error == "url_not_allowed: host 'nowhere.example' does not resolve"


async def test_the_address_connected_to_is_the_address_resolved(receiver: Receiver) -> None:
    """The guard is the connection's resolver: the name reaches the receiver through it."""
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["127.0.0.1"]

    sender = WebhookSender(allow_private=True, timeout=2.0, resolve=resolve)
    try:
        outcome = await sender.send(f"http://receiver.example:{receiver.port}/ok", HEADERS, BODY)
    finally:
        await sender.close()
    assert outcome.ok
    assert asked == [("receiver.example", receiver.port)]
    assert receiver.hits[0].headers["Host"] == f"receiver.example:{receiver.port}"


async def test_a_name_that_rebinds_to_a_refused_address_is_refused(receiver: Receiver) -> None:
    answers = [["127.0.0.1"], ["169.254.169.254"]]

    async def resolve(host: str, port: int) -> list[str]:
        return answers.pop(0)

    sender = WebhookSender(allow_private=True, timeout=2.0, resolve=resolve)
    url = f"http://rebind.example:{receiver.port}/ok"
    try:
        first = await sender.send(url, HEADERS, BODY)
        await sender.close()  # a new pool: no DNS cache carries the first answer over
        second = await sender.send(url, HEADERS, BODY)
    finally:
        await sender.close()
    assert first.ok
    assert second.error is not None
    assert second.error.startswith("url_not_allowed: host 'rebind.example' resolves to 169.254")
    assert receiver.paths() == ["/ok"]


# -- the check at subscription time ---------------------------------------------------------


async def test_the_guard_refuses_localhost_with_a_clear_detail() -> None:
    guard = UrlGuard(allow_private=False)  # the system resolver
    with pytest.raises(ValidationFailed) as caught:
        await guard.check("http://localhost:8080/hook")
    assert caught.value.code == "url_not_allowed"
    assert caught.value.detail.startswith("host 'localhost' resolves to ")
    assert "a loopback address; set SLOTWARD_ALLOW_PRIVATE_URLS=true" in caught.value.detail
    assert "127.0.0.1" in await UrlGuard(allow_private=True).check("http://localhost:8080/")


async def test_the_guard_returns_the_checked_addresses_and_resolves_no_literal() -> None:
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "93.184.215.14"]

    guard = UrlGuard(allow_private=False, resolve=resolve)
    assert await guard.check("https://hooks.example.com/x") == [
        "93.184.215.14",
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
    ]
    assert await guard.check("https://198.51.100.0.example/") != []
    assert await guard.check("http://93.184.215.14/") == ["93.184.215.14"]
    assert asked == ["hooks.example.com", "198.51.100.0.example"]


async def test_the_guard_refuses_what_does_not_resolve_and_what_is_no_url() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    guard = UrlGuard(allow_private=True, resolve=resolve)
    with pytest.raises(ValidationFailed) as caught:
        await guard.check("https://nowhere.example/")
    assert (caught.value.code, caught.value.detail) == (
        "url_not_allowed",
        "host 'nowhere.example' does not resolve",
    )
    with pytest.raises(ValidationFailed) as caught:
        await guard.check("https://u:p@nowhere.example/")
    assert caught.value.code == "invalid_url"
