"""Signing in to the dashboard over real HTTP, on SQLite and PostgreSQL.

A reviewer's or admin's key buys an HttpOnly, SameSite=Strict cookie; with
it (and no Authorization header) reads work, and a change works only with
the session's X-CSRF-Token. A sign-out, a revoked key or the session's
expiry (the clock is stepped, never waited for) ends it. The cookie's token
shows up in no log line and no answer.
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest

from slotward.api import service
from slotward.api.sessions import SESSION_COOKIE, csrf_token
from slotward.api.sessions import token_hash as hash_of
from tests.e2e.conftest import HOLD_BODY, Answer, Server
from tests.e2e.signed_in import Browser, cookie_of, sign_in

TWELVE_HOURS = 43200
DIRECTORY = {"id": "room-1", "name": "Room", "emails": ["room1@example.com"]}


def _cookie_parts(answer: Answer) -> set[str]:
    return {part.strip() for part in answer.headers["Set-Cookie"].split(";")}


def _sessions(server: Server) -> int:
    return int(server.sql("SELECT count(*) FROM sessions")[0][0])


@pytest.mark.parametrize("role", ["reviewer", "admin"])
async def test_a_sign_in_sets_an_httponly_strict_cookie_and_answers_the_csrf_token(
    server: Server, role: str
) -> None:
    key = await server.key(agent="ann", role=role)  # type: ignore[arg-type]
    answer = await server.anonymous().post("/v1/session", {"key": key.secret})
    assert answer.status == 201, answer.body[:300]
    token = cookie_of(answer)
    assert _cookie_parts(answer) == {
        f"{SESSION_COOKIE}={token}", "HttpOnly", "SameSite=Strict", "Path=/",
        f"Max-Age={TWELVE_HOURS}",
    }  # fmt: skip
    assert answer.json == {
        "tenant": "acme", "agent_id": "ann", "role": role, "csrf_token": csrf_token(token),
        "expires_at": "2030-10-01T21:00:00Z",
    }  # fmt: skip
    assert token not in answer.body.decode()
    assert server.sql("SELECT token_hash FROM sessions") == [(hash_of(token),)]
    browser = Browser(server.anonymous(), token, answer.json["csrf_token"], str(key.secret))
    again = await browser.get("/v1/session")
    assert (again.status, again.json) == (200, answer.json)  # a reloaded page's token back
    assert "Set-Cookie" not in again.headers


async def test_the_cookie_is_secure_when_the_request_came_over_https(server: Server) -> None:
    key = await server.key(role="admin")
    answer = await server.anonymous().post(
        "/v1/session", {"key": key.secret}, headers={"X-Forwarded-Proto": "https"}
    )
    assert answer.status == 201
    assert "Secure" in _cookie_parts(answer)


async def test_only_a_reviewers_or_admins_good_key_signs_in_and_a_refusal_writes_nothing(
    server: Server,
) -> None:
    agent = await server.key(agent="bot", role="agent")
    reviewer = await server.key(agent="rev", role="reviewer")
    before = server.table_counts()
    anonymous = server.anonymous()
    cases = [
        ({"key": agent.secret}, None, 403, "role_forbidden"),
        ({"key": str(reviewer.secret) + "x"}, None, 401, "invalid_api_key"),
        ({"key": "sw_key_0.not-a-real-secret-at-all"}, None, 401, "invalid_api_key"),
        ({"key": reviewer.secret, "remember": True}, None, 422, "unknown_field"),
        ({}, None, 422, "missing_field"),
        ({"key": reviewer.secret}, {"Sec-Fetch-Site": "cross-site"}, 403, "csrf_failed"),
        ({"key": reviewer.secret}, {"Sec-Fetch-Site": "same-site"}, 403, "csrf_failed"),
    ]
    for body, headers, status, code in cases:
        answer = await anonymous.post("/v1/session", body, headers=headers)
        assert (answer.status, answer.json["code"]) == (status, code), body
        assert "Set-Cookie" not in answer.headers
    assert server.table_counts() == before
    own_page = await anonymous.post(
        "/v1/session", {"key": reviewer.secret}, headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert own_page.status == 201


async def test_the_cookie_reads_and_changes_only_with_its_csrf_token(server: Server) -> None:
    browser = await sign_in(server, role="admin")
    agent = await server.key()
    made = await agent.create(dict(HOLD_BODY))
    for path in ("/v1/holds", f"/v1/holds/{made.json['id']}", "/v1/audit", "/v1/audit/verify",
                 "/v1/workflows", "/v1/timeline?from=2030-10-14T00:00:00Z&to=2030-10-15T00:00:00Z",
                 "/v1/outbox"):  # fmt: skip
        read = await browser.get(path)
        assert read.status == 200, (path, read.body[:300])
    before = server.table_counts()
    for csrf in (None, "", "0" * 64, csrf_token("A" * 43), browser.csrf.upper()):
        headers = {"X-CSRF-Token": csrf} if csrf is not None else {}
        sent = {"Cookie": f"{SESSION_COOKIE}={browser.token}", **headers}
        refused = await browser.client.post("/v1/attendees", DIRECTORY, headers=sent)
        assert (refused.status, refused.json["code"]) == (403, "csrf_failed"), csrf
        release = await browser.client.post(f"/v1/holds/{made.json['id']}/release", headers=sent)
        assert (release.status, release.json["code"]) == (403, "csrf_failed")
    assert server.table_counts() == before  # nothing written for any of them
    done = await browser.request("POST", "/v1/attendees", DIRECTORY)
    assert done.status == 200, done.body[:300]


async def test_a_session_keeps_its_keys_role_and_tenant(server: Server) -> None:
    reviewer = await sign_in(server, role="reviewer")
    refused = await reviewer.request("POST", "/v1/holds", dict(HOLD_BODY))
    assert (refused.status, refused.json["code"]) == (403, "role_forbidden")
    stranger = await server.key(tenant="globex", agent="other")
    theirs = await stranger.create(dict(HOLD_BODY))
    missing = await reviewer.get(f"/v1/holds/{theirs.json['id']}")
    assert (missing.status, missing.json["code"]) == (404, "hold_not_found")


async def test_an_authorization_header_is_judged_by_itself_whatever_the_cookie(
    server: Server,
) -> None:
    browser = await sign_in(server, role="admin")
    agent = await server.key(agent="bot")
    both = {"Cookie": f"{SESSION_COOKIE}={browser.token}"}
    bad = await browser.client.get(
        "/v1/audit", headers={**both, "Authorization": "Bearer sw_key_0.wrong-secret-entirely"}
    )
    assert (bad.status, bad.json["code"]) == (401, "invalid_api_key")
    as_agent = await agent.request("POST", "/v1/attendees", DIRECTORY, headers=both)
    assert (as_agent.status, as_agent.json["code"]) == (403, "role_forbidden")  # the key's role


async def test_a_sign_out_ends_the_session_and_clears_the_cookie(server: Server) -> None:
    browser = await sign_in(server)
    refused = await browser.request("DELETE", "/v1/session", headers={"X-CSRF-Token": "no"})
    assert (refused.status, refused.json["code"]) == (403, "csrf_failed")
    assert (await browser.get("/v1/session")).status == 200
    out = await browser.request("DELETE", "/v1/session")
    assert (out.status, out.body) == (204, b"")
    cleared = _cookie_parts(out)
    assert {f'{SESSION_COOKIE}=""', "Max-Age=0", "Path=/", "HttpOnly", "SameSite=Strict"} <= cleared
    assert _sessions(server) == 0
    for path in ("/v1/session", "/v1/audit"):
        gone = await browser.get(path)
        assert (gone.status, gone.json["code"]) == (401, "invalid_session"), path
    again = await browser.request("DELETE", "/v1/session")
    assert again.status == 204  # nothing left to end: the button always works
    none = await server.anonymous().request("DELETE", "/v1/session")
    assert none.status == 204
    anonymous = await server.anonymous().get("/v1/session")
    assert (anonymous.status, anonymous.json["code"]) == (401, "invalid_session")


async def test_a_revoked_key_ends_its_sessions_at_once(server: Server) -> None:
    browser = await sign_in(server)
    [(key_id,)] = server.sql("SELECT key_id FROM sessions")
    assert (await browser.get("/v1/audit")).status == 200
    await service.withdraw_key(server.services.store, key_id, server.clock)
    for path in ("/v1/audit", "/v1/session"):
        ended = await browser.get(path)
        assert (ended.status, ended.json["code"]) == (401, "invalid_session"), path


async def test_an_expired_session_is_refused_and_swept(server: Server) -> None:
    browser = await sign_in(server)
    server.clock.advance(timedelta(hours=12).total_seconds() - 1)
    assert (await browser.get("/v1/audit")).status == 200
    server.clock.advance(1)
    expired = await browser.get("/v1/audit")
    assert (expired.status, expired.json["code"]) == (401, "invalid_session")
    assert _sessions(server) == 1
    await server.sweep()
    assert _sessions(server) == 0


async def test_no_token_or_key_reaches_a_log_line_or_an_error_answer(
    server: Server, log_stream: io.StringIO
) -> None:
    key = await server.key(agent="ann", role="admin")
    signed = await server.anonymous().post("/v1/session", {"key": key.secret})
    browser = Browser(server.anonymous(), cookie_of(signed), signed.json["csrf_token"],
                      str(key.secret))  # fmt: skip
    answers = [
        await browser.get("/v1/holds/hold_nope"),  # 404
        await browser.get("/v1/timeline?from=x&to=y"),  # 422
        await browser.get("/v1/holds?nope=1"),  # 422
        await browser.request("POST", "/v1/attendees", {"emails": []}),  # 422
        await browser.request("POST", "/v1/attendees", DIRECTORY, headers={"X-CSRF-Token": "x"}),
        await browser.request("POST", "/v1/session", {"key": "sw_key_0.wrong-wrong-wrong"}),
        await browser.get("/v1/session"),
        await browser.request("DELETE", "/v1/session"),
        await browser.get("/v1/audit"),  # 401 now
    ]
    assert [a.status for a in answers] == [404, 422, 422, 422, 403, 401, 200, 204, 401]
    secrets = (browser.token, str(key.secret), hash_of(browser.token))
    for answer in answers:
        text = answer.body.decode() + str(answer.headers)
        assert not [s for s in secrets if s in text], answer.body[:300]
    output = log_stream.getvalue()
    assert output  # the access lines were written
    assert not [s for s in (*secrets, browser.csrf) if s in output]
    assert SESSION_COOKIE not in output
    assert "Cookie" not in output


HOSTILE_COOKIES = [
    f"{SESSION_COOKIE}=", f'{SESSION_COOKIE}="', f'{SESSION_COOKIE}="{"A" * 43}"',
    f"{SESSION_COOKIE}={'A' * 43}", f"{SESSION_COOKIE}={'A' * 8000}",
    f"{SESSION_COOKIE}=../../etc/passwd", f"{SESSION_COOKIE}=%00{'A' * 40}",
    f"{SESSION_COOKIE}=a; {SESSION_COOKIE}=b", f"{SESSION_COOKIE}=\u00e9{'A' * 42}",
    "other=1; =; ;;", f"{SESSION_COOKIE}",
]  # fmt: skip


async def test_a_hostile_cookie_is_no_session_and_never_a_500(server: Server) -> None:
    browser = await sign_in(server)  # a live session exists; none of these names it
    for cookie in HOSTILE_COOKIES:
        for method, path in (("GET", "/v1/audit"), ("GET", "/v1/session"),
                             ("POST", "/v1/attendees")):  # fmt: skip
            answer = await browser.client.request(
                method, path, DIRECTORY if method == "POST" else None,
                headers={"Cookie": cookie, "X-CSRF-Token": browser.csrf},
            )  # fmt: skip
            assert answer.status == 401, (cookie, path, answer.status, answer.body[:200])
            assert answer.json["code"] in ("invalid_session", "missing_api_key"), cookie
        out = await browser.client.request("DELETE", "/v1/session", headers={"Cookie": cookie})
        assert out.status == 204, cookie
    assert _sessions(server) == 1
