"""The keyed audit chain and its checkpoints, against an attacker who can write the store.

The attacker here has the store (rows and head) but not the audit key: they
rewrite what they like, recomputing plain SHA-256 hashes or MACs under a key
of their own. Each rewrite must leave verification failing, or be one the
documentation names as undetectable (a deleted tail with no checkpoint
behind it).
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from slotward.api.config import Config
from slotward.api.http.statuses import status_of
from slotward.engine.clock import FixedClock
from slotward.engine.errors import Conflict, Unavailable, ValidationFailed
from slotward.engine.fakes import InMemoryUnitOfWork, State
from slotward.engine.model import AuditEntry, Principal
from slotward.engine.rules.audit import (
    GENESIS,
    KEYED_PREFIX,
    AuditKey,
    entry_hash,
    is_keyed,
    next_entry,
    verify_chain,
)
from slotward.engine.rules.checkpoints import (
    SEAL_ACTION,
    Checkpoint,
    read_checkpoint,
    sign_checkpoint,
)
from slotward.engine.usecases.audit import seal_chain, take_checkpoint
from slotward.engine.usecases.reads import verify_audit

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TENANT = "acme"
KEY = AuditKey.derive(b"the server's audit key, 32 bytes")
ATTACKER = AuditKey.derive(b"a key the attacker made up itself")
ADMIN = Principal(TENANT, "ops", "admin", 0)


def extend(
    chain: list[AuditEntry], n: int, key: AuditKey | None, tenant: str = TENANT
) -> list[AuditEntry]:
    chain = list(chain)
    for _ in range(n):
        head = (chain[-1].seq, chain[-1].hash) if chain else (0, GENESIS)
        i = head[0]
        chain.append(
            next_entry(
                head, tenant=tenant, at=T0 + timedelta(seconds=i), actor=f"agent-{i % 3}",
                action="hold.create", key=f"idem_{i}", hold_id=f"hold_{i}", outcome="fresh",
                audit_key=key,
            )
        )  # fmt: skip
    return chain


def sealed(chain: list[AuditEntry]) -> list[AuditEntry]:
    """A plain chain with the operator's seal: one keyed entry after its head."""
    head = chain[-1]
    seal = next_entry(
        (head.seq, head.hash), tenant=head.tenant, at=head.at, actor="system",
        action=SEAL_ACTION, key=None, hold_id=None, outcome="sealed", audit_key=KEY, seal=True,
    )  # fmt: skip
    return [*chain, seal]


def rehash(chain: list[AuditEntry], start: int, key: AuditKey | None) -> list[AuditEntry]:
    """What the attacker does: recompute every hash from index ``start`` on."""
    out = list(chain[:start])
    for entry in chain[start:]:
        prev = out[-1].hash if out else GENESIS
        moved = replace(entry, prev_hash=prev)
        out.append(replace(moved, hash=entry_hash(moved, key)))
    return out


def verify(
    chain: list[AuditEntry], key: AuditKey | None = KEY, checkpoint: str | None = None
) -> dict[str, object]:
    state = State(audit={TENANT: chain} if chain else {})
    return verify_audit(InMemoryUnitOfWork(state), ADMIN, batch=3, audit_key=key,
                        checkpoint=checkpoint)  # fmt: skip


def point(chain: list[AuditEntry], at: int | None = None, tenant: str = TENANT) -> str:
    entry = chain[-1 if at is None else at - 1]
    return sign_checkpoint(Checkpoint(tenant, entry.seq, entry.hash, "2030-10-01T09:00:00Z"), KEY)


# The keyed chain


def test_a_keyed_chain_verifies_under_its_key_and_says_so() -> None:
    chain = extend([], 7, KEY)
    assert all(is_keyed(e.hash) and len(e.hash) <= 64 for e in chain)  # fits the hash column
    assert verify(chain) == {
        "ok": True, "count": 7, "head": chain[-1].hash, "keyed": True, "keyed_from": 1,
    }  # fmt: skip


def test_the_mac_covers_every_field() -> None:
    chain = extend([], 4, KEY)
    changes = [{"actor": "x"}, {"action": "hold.release"}, {"key": None}, {"hold_id": "h"},
               {"outcome": "conflict"}, {"tenant": "globex"}, {"at": T0}]  # fmt: skip
    for change in changes:
        forged = replace(chain[1], **change)  # type: ignore[arg-type]
        assert verify_chain([chain[0], forged], key=KEY).reason == "hash"


def test_an_attacker_recomputing_every_hash_with_sha256_fails_verification() -> None:
    chain = extend([], 6, KEY)
    edited = [*chain[:2], replace(chain[2], outcome="conflict"), *chain[3:]]
    forged = rehash(edited, 0, None)  # every hash, plain, and the head moved to match
    result = verify(forged)
    assert result["ok"] is False
    assert result["reason"] == "unkeyed"  # a chain plain to its end, while the server has a key


def test_a_downgrade_from_the_edited_entry_on_is_caught_there() -> None:
    chain = extend([], 6, KEY)
    forged = rehash([*chain[:3], replace(chain[3], actor="evil"), *chain[4:]], 3, None)
    result = verify(forged)
    assert (result["ok"], result["broken_at"], result["reason"]) == (False, 4, "unkeyed")
    assert result["count"] == 3


def test_a_mac_under_another_key_is_caught() -> None:
    chain = extend([], 5, KEY)
    forged = rehash([*chain[:2], replace(chain[2], hold_id="hold_x"), *chain[3:]], 2, ATTACKER)
    result = verify(forged)
    assert (result["ok"], result["broken_at"], result["reason"]) == (False, 3, "hash")


def test_a_sealed_chain_with_a_plain_first_part_verifies_and_pins_it() -> None:
    legacy = extend([], 3, None)
    chain = extend(sealed(legacy), 2, KEY)
    assert verify(chain)["ok"] is True
    assert verify(chain)["keyed_from"] == 4
    # Rewriting the plain part moves the hash the seal's MAC covers.
    forged = rehash([replace(chain[0], actor="evil"), *chain[1:3]], 0, None) + chain[3:]
    assert (verify(forged)["broken_at"], verify(forged)["reason"]) == (4, "link")


def test_a_keyed_server_extends_a_plain_chain_in_plain_until_it_is_sealed() -> None:
    chain = extend(extend([], 3, None), 3, KEY)
    assert not any(is_keyed(e.hash) for e in chain)
    assert verify(chain)["reason"] == "unkeyed"


def test_a_full_downgrade_is_not_laundered_by_the_next_write() -> None:
    """The attacker rewrites a keyed chain in plain SHA-256; the server's next
    write must not key the forged history into a chain that verifies."""
    chain = extend([], 5, KEY)
    forged = rehash([*chain[:2], replace(chain[2], actor="mallory"), *chain[3:]], 0, None)
    after = extend(forged, 3, KEY)  # ordinary writes of the keyed server
    result = verify(after)
    assert (result["ok"], result["reason"], result["keyed_from"]) == (False, "unkeyed", None)
    relinked = [*forged[:3], replace(chain[3], prev_hash=forged[2].hash), *chain[4:]]
    assert (verify(relinked)["broken_at"], verify(relinked)["reason"]) == (4, "hash")


def test_without_a_key_a_plain_chain_verifies_as_before() -> None:
    chain = extend([], 3, None)
    assert verify(chain, key=None) == {"ok": True, "count": 3, "head": chain[-1].hash}


def test_without_the_key_keyed_entries_cannot_be_vouched_for() -> None:
    chain = extend(sealed(extend([], 2, None)), 1, KEY)
    result = verify(chain, key=None)
    assert (result["ok"], result["broken_at"], result["reason"]) == (False, 3, "no_key")


def test_a_server_without_the_key_refuses_to_extend_a_keyed_chain() -> None:
    chain = extend([], 2, KEY)
    with pytest.raises(Unavailable) as info:
        extend(chain, 1, None)
    assert info.value.code == "audit_key_required"


def test_an_empty_chain_verifies_under_a_key() -> None:
    assert verify([]) == {"ok": True, "count": 0, "head": GENESIS, "keyed": True,
                          "keyed_from": None}  # fmt: skip


def test_a_truncated_tail_with_the_head_moved_back_needs_a_checkpoint() -> None:
    chain = extend([], 6, KEY)
    kept = point(chain)  # the operator's checkpoint at seq 6
    truncated = chain[:4]  # the fake's head is its last entry: the head moved back
    assert verify(truncated)["ok"] is True  # the chain alone cannot tell
    result = verify(truncated, checkpoint=kept)
    assert result["ok"] is False
    assert (result["broken_at"], result["reason"], result["checkpoint"]) == (5, "checkpoint",
                                                                              "failed")  # fmt: skip


def test_a_checkpoint_holds_while_the_chain_grows() -> None:
    chain = extend([], 3, KEY)
    kept = point(chain)
    result = verify(extend(chain, 4, KEY), checkpoint=kept)
    assert (result["ok"], result["checkpoint"], result["count"]) == (True, "ok", 7)


def test_a_rewritten_entry_at_the_checkpoint_fails_it() -> None:
    chain = extend([], 4, None)
    kept = point(chain, at=2)  # a (hand-signed) checkpoint of a plain entry
    forged = rehash([chain[0], replace(chain[1], actor="evil"), *chain[2:]], 1, None)
    result = verify(forged, checkpoint=kept)
    assert (result["ok"], result["broken_at"], result["checkpoint"]) == (False, 2, "failed")


def test_entries_after_a_checkpoint_must_be_keyed() -> None:
    chain = extend([], 2, None)
    kept = point(chain)  # signed while the chain was still plain
    result = verify(extend(chain, 2, None), checkpoint=kept)
    assert (result["ok"], result["broken_at"], result["reason"]) == (False, 3, "unkeyed")
    assert result["checkpoint"] == "ok"  # its entry is there; what follows is not keyed


# The checkpoint token


def test_a_checkpoint_round_trips_and_carries_no_secret() -> None:
    token = point(extend([], 2, KEY))
    assert token.startswith("swcp1.")
    assert len(token.split(".")) == 3
    payload = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert set(payload) == {"tenant", "seq", "hash", "at"}
    assert read_checkpoint(token, KEY, TENANT).seq == 2


def test_a_forged_checkpoint_signature_is_refused() -> None:
    chain = extend([], 2, KEY)
    for key in (ATTACKER, replace(KEY, checkpoint=KEY.chain)):  # the chain's key is not it
        forged = sign_checkpoint(Checkpoint(TENANT, 2, chain[-1].hash, "x"), key)
        with pytest.raises(ValidationFailed) as info:
            verify(chain, checkpoint=forged)
        assert info.value.code == "checkpoint_signature_invalid"
    token = point(chain)
    head, _payload, sig = token.split(".")
    other = base64.urlsafe_b64encode(
        json.dumps({"tenant": TENANT, "seq": 1, "hash": chain[0].hash, "at": "x"}).encode()
    )
    edited = f"{head}.{other.decode().rstrip('=')}.{sig}"
    with pytest.raises(ValidationFailed) as info:
        read_checkpoint(edited, KEY, TENANT)
    assert info.value.code == "checkpoint_signature_invalid"


def test_another_tenants_checkpoint_is_refused() -> None:
    token = point(extend([], 2, KEY, tenant="globex"), tenant="globex")
    with pytest.raises(ValidationFailed) as info:
        verify(extend([], 2, KEY), checkpoint=token)
    assert info.value.code == "checkpoint_wrong_tenant"
    assert "globex" not in info.value.detail


@pytest.mark.parametrize(
    "token",
    [
        "", "swcp1", "swcp1..", "swcp2.e30.AAAA", "swcp1.e30", "swcp1.e30.AAAA.AAAA",
        "swcp1.e3+.AAAA", "swcp1.e30=.AAAA", "swcp1.ë30.AAAA", "x" * 5000, "swcp1.e30.A",
    ],
)  # fmt: skip
def test_a_malformed_checkpoint_is_refused(token: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        read_checkpoint(token, KEY, TENANT)
    assert info.value.code in {"invalid_checkpoint", "checkpoint_signature_invalid"}
    assert status_of(info.value) == 422


@pytest.mark.parametrize(
    "payload",
    [b"[]", b"{}", b"not json", b'{"tenant":"acme","seq":true,"hash":"h","at":"x"}',
     b'{"tenant":"acme","seq":-1,"hash":"h","at":"x"}',
     b'{"tenant":"acme","seq":0,"hash":"h","at":"x"}',
     b'{"tenant":1,"seq":2,"hash":"h","at":"x"}',
     b'{"tenant":"acme","seq":2,"hash":"h","at":"x","more":1}'],
)  # fmt: skip
def test_a_signed_but_malformed_payload_is_refused(payload: bytes) -> None:
    import hashlib
    import hmac

    body = base64.urlsafe_b64encode(payload).rstrip(b"=").decode()
    mac = hmac.new(KEY.checkpoint, f"swcp1.{body}".encode(), hashlib.sha256).digest()
    token = f"swcp1.{body}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    with pytest.raises(ValidationFailed) as info:
        read_checkpoint(token, KEY, TENANT)
    assert info.value.code == "invalid_checkpoint"


def test_a_checkpoint_needs_a_server_key() -> None:
    with pytest.raises(ValidationFailed) as info:
        verify(extend([], 1, None), key=None, checkpoint=point(extend([], 1, KEY)))
    assert info.value.code == "audit_key_not_set"


# Taking a checkpoint


def test_a_checkpoint_of_a_plain_chain_is_refused_until_it_is_sealed() -> None:
    state = State(audit={TENANT: extend([], 3, None)})
    with pytest.raises(Conflict) as info:
        take_checkpoint(InMemoryUnitOfWork(state), TENANT, KEY, FixedClock(T0))
    assert (info.value.code, info.value.extra["reason"]) == ("audit_chain_broken", "unkeyed")
    assert "slotward audit seal" in info.value.detail
    assert "ever keyed has been rewritten" in info.value.detail
    assert len(state.audit[TENANT]) == 3  # nothing vouched for


def test_sealing_keys_a_plain_chain_once_and_a_checkpoint_then_signs_it() -> None:
    state = State(audit={TENANT: extend([], 3, None)})
    assert seal_chain(InMemoryUnitOfWork(state), TENANT, KEY, FixedClock(T0)) == 4
    seal = state.audit[TENANT][-1]
    assert (seal.seq, seal.action, seal.hash.startswith(KEYED_PREFIX)) == (4, SEAL_ACTION, True)
    assert seal_chain(InMemoryUnitOfWork(state), TENANT, KEY, FixedClock(T0)) is None
    assert len(state.audit[TENANT]) == 4  # a keyed chain needs no second seal
    token = take_checkpoint(InMemoryUnitOfWork(state), TENANT, KEY, FixedClock(T0))
    taken = read_checkpoint(token, KEY, TENANT)
    assert (taken.seq, taken.hash) == (4, seal.hash)
    assert verify(state.audit[TENANT], checkpoint=token)["ok"] is True
    assert seal_chain(InMemoryUnitOfWork(State()), TENANT, KEY, FixedClock(T0)) is None


def test_a_broken_plain_chain_is_not_sealed() -> None:
    chain = extend([], 3, None)
    state = State(audit={TENANT: [chain[0], replace(chain[1], actor="evil"), chain[2]]})
    with pytest.raises(Conflict) as info:
        seal_chain(InMemoryUnitOfWork(state), TENANT, KEY, FixedClock(T0))
    assert info.value.code == "audit_chain_broken"
    assert len(state.audit[TENANT]) == 3


def test_a_checkpoint_of_an_empty_chain_pins_genesis() -> None:
    state = State()
    token = take_checkpoint(InMemoryUnitOfWork(state), TENANT, KEY, FixedClock(T0))
    assert (read_checkpoint(token, KEY, TENANT).seq, state.audit.get(TENANT)) == (0, None)
    assert verify(extend([], 2, KEY), checkpoint=token)["ok"] is True
    assert verify(extend([], 2, None), checkpoint=token)["reason"] == "unkeyed"


def test_a_broken_chain_is_not_signed() -> None:
    chain = extend([], 3, KEY)
    state = State(audit={TENANT: [chain[0], replace(chain[1], actor="evil"), chain[2]]})
    with pytest.raises(Conflict) as info:
        take_checkpoint(InMemoryUnitOfWork(state), TENANT, KEY, FixedClock(T0))
    assert info.value.code == "audit_chain_broken"
    assert len(state.audit[TENANT]) == 3  # no seal over the damage


# The key itself


def test_the_key_reaches_the_policy_and_is_never_printed() -> None:
    secret = "a-very-secret-audit-key"
    policy = Config(audit_key=secret).policy()
    assert policy.audit_key == AuditKey.derive(secret.encode())
    assert secret not in repr(policy)
    assert "chain" not in repr(policy.audit_key)
    assert policy.audit_key.chain != policy.audit_key.checkpoint
    assert Config().policy().audit_key is None
