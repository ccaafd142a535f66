"""Dashboard sessions (api/sessions.py, engine/usecases/sessions.py) on the fakes.

Keys are issued as `slotward keys create` issues them; time moves only when a
test advances the clock. The cookie's token is what the test holds as a
browser would; the store must never hold it, only its hash.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slotward.api import service
from slotward.api.bootstrap import Services, bootstrap
from slotward.api.config import Config
from slotward.api.keyhash import legacy_hash
from slotward.api.sessions import (
    SESSION_LIFETIME,
    check_csrf,
    check_fetch_site,
    csrf_token,
    token_hash,
)
from slotward.api.workers.sweeper import sweep_once
from slotward.engine.clock import FixedClock
from slotward.engine.errors import SlotwardError
from slotward.engine.fakes import InMemoryStore, InMemoryUnitOfWork, SequentialIds
from slotward.engine.model import Principal, Role
from slotward.engine.ports import UnitOfWork
from slotward.engine.usecases.sessions import close_session, open_session, purge_sessions

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
async def svc() -> Services:
    return await bootstrap(
        Config(), store=InMemoryStore(), clock=FixedClock(T0), ids=SequentialIds()
    )


def _store(svc: Services) -> InMemoryStore:
    assert isinstance(svc.store, InMemoryStore)
    return svc.store


def _clock(svc: Services) -> FixedClock:
    assert isinstance(svc.clock, FixedClock)
    return svc.clock


async def _key(svc: Services, role: Role = "reviewer", agent: str = "ann") -> service.NewKey:
    principal = Principal("acme", agent, role, 0)
    return await service.issue_key(svc.store, principal, svc.clock, svc.ids, svc.keys.hasher)


async def _refused(call: object, code: str) -> None:
    with pytest.raises(SlotwardError) as caught:
        await call  # type: ignore[misc]
    assert caught.value.code == code, caught.value.detail


@pytest.mark.parametrize("role", ["reviewer", "admin"])
async def test_a_reviewer_or_admin_signs_in_and_the_store_keeps_only_a_hash(
    svc: Services, role: Role
) -> None:
    key = await _key(svc, role)
    signed_in = await svc.sessions.sign_in(key.secret)
    assert signed_in.document() == {
        "tenant": "acme",
        "agent_id": "ann",
        "role": role,
        "csrf_token": csrf_token(signed_in.token),
        "expires_at": "2030-10-01T21:00:00Z",
    }
    [(stored_hash, stored)] = _store(svc).state.sessions.items()
    assert stored_hash == token_hash(signed_in.token) != signed_in.token
    assert (stored.key_id, stored.tenant, stored.created_at) == (key.id, "acme", T0)
    assert stored.expires_at - stored.created_at == SESSION_LIFETIME == timedelta(hours=12)
    assert signed_in.token not in repr(signed_in)
    again = await svc.sessions.resolve(signed_in.token)
    assert again.principal == key.principal
    assert again.document() == signed_in.document()


async def test_an_agent_key_a_wrong_key_and_a_legacy_key_cannot_sign_in(svc: Services) -> None:
    agent = await _key(svc, "agent", "bot")
    await _refused(svc.sessions.sign_in(agent.secret), "role_forbidden")
    await _refused(svc.sessions.sign_in(agent.secret + "x"), "invalid_api_key")
    await _refused(svc.sessions.sign_in("not a key at all"), "invalid_api_key")
    legacy = "sw_" + "A" * 43  # a key from before key ids, stored by its plain hash
    reviewer = Principal("acme", "old", "reviewer", 0)

    def add_legacy(uow: UnitOfWork) -> None:
        with uow:
            uow.keys.add("key_legacy", legacy_hash(legacy), reviewer, T0)
            uow.commit()

    await svc.store.write(add_legacy)
    assert await svc.keys.resolve(legacy) == reviewer  # a good key for the API
    await _refused(svc.sessions.sign_in(legacy), "invalid_api_key")  # but no session names it
    assert _store(svc).state.sessions == {}


async def test_a_session_ends_at_its_expiry_and_the_sweeper_purges_it(svc: Services) -> None:
    signed_in = await svc.sessions.sign_in((await _key(svc)).secret)
    _clock(svc).advance(SESSION_LIFETIME.total_seconds() - 1)
    assert (await svc.sessions.resolve(signed_in.token)).principal.agent_id == "ann"
    _clock(svc).advance(1)
    await _refused(svc.sessions.resolve(signed_in.token), "invalid_session")
    assert len(_store(svc).state.sessions) == 1  # refused, not yet purged
    await sweep_once(svc)
    assert _store(svc).state.sessions == {}


async def test_a_revoked_key_ends_its_sessions_at_once(svc: Services) -> None:
    key = await _key(svc)
    signed_in = await svc.sessions.sign_in(key.secret)
    await service.withdraw_key(svc.store, key.id, svc.clock)
    await _refused(svc.sessions.resolve(signed_in.token), "invalid_session")


@pytest.mark.parametrize("token", ["", "x", "A" * 42, "A" * 44, "A" * 42 + "é", "../" * 15])
async def test_a_malformed_or_unknown_cookie_is_no_session(svc: Services, token: str) -> None:
    await svc.sessions.sign_in((await _key(svc)).secret)
    await _refused(svc.sessions.resolve(token), "invalid_session")
    await _refused(svc.sessions.resolve("A" * 43), "invalid_session")  # well formed, unknown


async def test_a_live_session_signs_out_only_with_its_csrf_token(svc: Services) -> None:
    signed_in = await svc.sessions.sign_in((await _key(svc)).secret)
    await _refused(svc.sessions.sign_out(signed_in.token, None), "csrf_failed")
    await _refused(svc.sessions.sign_out(signed_in.token, "0" * 64), "csrf_failed")
    assert len(_store(svc).state.sessions) == 1
    await svc.sessions.sign_out(signed_in.token, csrf_token(signed_in.token))
    assert _store(svc).state.sessions == {}
    await _refused(svc.sessions.resolve(signed_in.token), "invalid_session")
    await svc.sessions.sign_out(signed_in.token, None)  # gone already: nothing to protect
    await svc.sessions.sign_out(None, None)


async def test_a_dead_sessions_row_goes_with_its_sign_out(svc: Services) -> None:
    key = await _key(svc)
    signed_in = await svc.sessions.sign_in(key.secret)
    await service.withdraw_key(svc.store, key.id, svc.clock)
    await svc.sessions.sign_out(signed_in.token, None)  # its key is revoked: no token needed
    assert _store(svc).state.sessions == {}


def test_the_csrf_token_is_the_sessions_own_and_compared_whole() -> None:
    token = "T" * 43
    check_csrf(token, csrf_token(token))
    for wrong in (None, "", csrf_token("U" * 43), csrf_token(token)[:-1], csrf_token(token) + "0",
                  csrf_token(token).upper(), "é" * 64):  # fmt: skip
        with pytest.raises(SlotwardError) as caught:
            check_csrf(token, wrong)
        assert (caught.value.code, caught.value.extra) == ("csrf_failed", {})
    assert csrf_token(token) != token_hash(token)  # one cannot be told from the other


@pytest.mark.parametrize(
    ("site", "allowed"),
    [(None, True), ("same-origin", True), ("none", True), ("same-site", False),
     ("cross-site", False), ("", False)],
)  # fmt: skip
def test_a_sign_in_from_another_site_is_refused(site: str | None, allowed: bool) -> None:
    if allowed:
        check_fetch_site(site)
    else:
        with pytest.raises(SlotwardError, match="dashboard's own page"):
            check_fetch_site(site)


def test_the_use_cases_purge_only_what_expired_and_close_only_what_exists() -> None:
    store = InMemoryStore()
    clock = FixedClock(T0)
    for n, hours in enumerate((1, 2, 3)):
        open_session(
            InMemoryUnitOfWork(store.state), f"h{n}", "key_1", "acme", clock,
            timedelta(hours=hours),
        )  # fmt: skip
    clock.advance(2 * 3600)
    assert purge_sessions(InMemoryUnitOfWork(store.state), clock, limit=1) == 1
    assert purge_sessions(InMemoryUnitOfWork(store.state), clock) == 1
    assert purge_sessions(InMemoryUnitOfWork(store.state), clock) == 0
    assert set(store.state.sessions) == {"h2"}
    assert close_session(InMemoryUnitOfWork(store.state), "h9") is False
    assert close_session(InMemoryUnitOfWork(store.state), "h2") is True
    assert store.state.sessions == {}
