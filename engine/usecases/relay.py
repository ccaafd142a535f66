"""The relay's transactions: fan events out, claim deliveries, record what happened.

The relay (api/workers/relay.py) sends between these, outside any
transaction: a delivery is claimed (a lease), sent, then its outcome recorded.
A relay that dies between the two leaves the claim to run out, and the next
relay sends the event again: at least once, never lost. Receivers dedupe on
``webhook-id``, the event id.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from slotward.engine.model import Claim, Delivery, OutboxEvent, Subscription
from slotward.engine.ports import Clock, IdGenerator, UnitOfWork
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.delivery import Outcome, RelaySettings, next_attempt
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.rules.topics import matches
from slotward.engine.usecases.calendar_writes import fan_out_writes
from slotward.engine.usecases.effects import audit

__all__ = [
    "RELAY_ACTOR",
    "RELAY_LEASE",
    "Recorded",
    "Result",
    "Work",
    "claim_work",
    "drop_relay_lease",
    "purge_delivered",
    "record_results",
    "relay_step",
    "take_relay_lease",
]

RELAY_ACTOR = "relay"  # the audit actor of what the relay decides (disabling a subscription)
RELAY_LEASE = "relay"  # the lease one process at a time holds on SQLite
FAN_OUT_BATCH = 500  # events fanned out per transaction


@dataclass(frozen=True)
class Work:
    """What one :func:`claim_work` found: the claims, and how many events it fanned out."""

    claims: list[Claim]
    fanned: int

    @property
    def more(self) -> bool:
        """Whether the fan-out filled its batch: more events may be waiting."""
        return self.fanned >= FAN_OUT_BATCH


@dataclass(frozen=True)
class Result:
    """What one attempt of a claimed delivery got."""

    delivery_id: str
    tenant: str  # the delivery's: its lock is taken before the outcome is recorded
    at: datetime  # when the attempt began
    outcome: Outcome


@dataclass
class Recorded:
    """What :func:`record_results` did, for the metrics."""

    delivered: int = 0
    failed: int = 0  # to be tried again
    dead: int = 0
    disabled: list[str] = field(default_factory=list)  # subscription ids


def take_relay_lease(
    uow: UnitOfWork, clock: Clock, owner: str, ttl: timedelta, name: str = RELAY_LEASE
) -> bool:
    """Take or renew the relay lease for ``owner``; False while another holds it.

    No tenant lock: the lease belongs to the store, not to a tenant.
    """
    with uow:
        now = clock.now()
        taken = uow.leases.take(name, owner, now, now + ttl)
        uow.commit()
        return taken


def drop_relay_lease(uow: UnitOfWork, owner: str, name: str = RELAY_LEASE) -> None:
    """Give the relay lease back (a clean stop), so another process need not wait it out.

    No tenant lock: the lease belongs to the store, not to a tenant.
    """
    with uow:
        uow.leases.drop(name, owner)
        uow.commit()


def relay_step(
    uow: UnitOfWork,
    clock: Clock,
    ids: IdGenerator,
    owner: str,
    results: Sequence[Result],
    limit: int,
    settings: RelaySettings,
    rand: Callable[[], float],
    *,
    audit_key: AuditKey | None,
    writable: Collection[str] = (),
) -> tuple[Recorded, Work]:
    """One turn of the relay, one transaction: record ``results``, fan new events
    out to their subscriptions (and, for the providers named in ``writable``,
    to their bound attendees' calendars: engine/usecases/calendar_writes.py),
    then claim up to ``limit`` due deliveries.

    The relay's part of the tenants of the results and of the new events is
    locked first, in order: a subscription's figures are read and written back
    (by one relay at a time), and a subscription deleted meanwhile (which
    takes its tenant's lock) gets no delivery after its deletion. Creates run
    alongside: they only add events, which a turn fans out once committed
    (claimed with SKIP LOCKED), and a disabling's audit entry is ordered at
    the chain's head.
    """
    with uow:
        events = uow.outbox.unfanned(FAN_OUT_BATCH)
        uow.lock_part({e.tenant for e in events} | {r.tenant for r in results}, "relay")
        now = clock.now()
        done = _record(uow, ids, results, now, settings, rand, audit_key)
        _fan_out(uow, ids, events, now, now + timedelta(seconds=settings.schedule[0]))
        fan_out_writes(uow, events, now, writable)
        claims = uow.deliveries.claim(owner, now, now + settings.lease, limit) if limit > 0 else []
        uow.commit()
        return done, Work(claims, len(events))


def claim_work(
    uow: UnitOfWork,
    clock: Clock,
    ids: IdGenerator,
    owner: str,
    limit: int,
    settings: RelaySettings,
) -> Work:
    """Fan new events out, then claim up to ``limit`` due deliveries (:func:`relay_step`)."""
    _, work = relay_step(uow, clock, ids, owner, (), limit, settings, lambda: 0.5, audit_key=None)
    return work


def _fan_out(
    uow: UnitOfWork, ids: IdGenerator, events: list[OutboxEvent], now: datetime, first: datetime
) -> None:
    """Each event's deliveries, first due at ``first`` (the schedule's first wait)."""
    if not events:
        return
    by_tenant: dict[str, list[Subscription]] = {}
    for sub in uow.webhooks.active({e.tenant for e in events}):
        by_tenant.setdefault(sub.tenant, []).append(sub)
    made = [
        _delivery(ids.new_id("dlv"), event, sub, first)
        for event in events
        for sub in by_tenant.get(event.tenant, ())
        if matches(sub.topics, event.type)
    ]
    if made:
        uow.deliveries.add(made)
    wanted = {d.event_id for d in made}
    uow.outbox.mark_fanned([e.id for e in events if e.id in wanted])
    # An event no subscription wants is delivered now (most of them, where
    # nobody subscribed): one statement, not a settling read of its deliveries.
    uow.outbox.mark_unwanted([e.id for e in events if e.id not in wanted], now)


def _delivery(delivery_id: str, event: OutboxEvent, sub: Subscription, due: datetime) -> Delivery:
    return Delivery(
        id=delivery_id,
        event_id=event.id,
        subscription_id=sub.id,
        tenant=event.tenant,
        hold_id=event.hold_id,
        seq=event.seq,
        state="pending",
        attempts=0,
        next_attempt_at=due,
        created_at=event.created_at,
    )


def record_results(
    uow: UnitOfWork,
    clock: Clock,
    ids: IdGenerator,
    results: Sequence[Result],
    settings: RelaySettings,
    rand: Callable[[], float],
    *,
    audit_key: AuditKey | None,
) -> Recorded:
    """Record ``results`` and claim nothing (:func:`relay_step`)."""
    done, _ = relay_step(uow, clock, ids, "", results, 0, settings, rand, audit_key=audit_key)
    return done


def _record(
    uow: UnitOfWork,
    ids: IdGenerator,
    results: Sequence[Result],
    now: datetime,
    settings: RelaySettings,
    rand: Callable[[], float],
    audit_key: AuditKey | None,
) -> Recorded:
    """Log each attempt and move its delivery on: delivered, again later, or dead.

    A 410 disables the subscription at once; so does failing for
    ``settings.disable_after`` without a success. Either way its pending
    deliveries die with it and a ``webhook.disabled`` event says so. A batch
    costs a handful of statements whatever its size: the deliveries read,
    logged and saved together, each subscription read and saved once.
    """
    done = Recorded()
    if not results:
        return done
    found = {d.id: d for d in uow.deliveries.get_many([r.delivery_id for r in results])}
    results = [r for r in results if r.delivery_id in found]  # else deleted meanwhile
    uow.deliveries.add_attempts(
        [(r.delivery_id, r.at, r.outcome.status, r.outcome.error) for r in results]
    )
    subs: dict[str, Subscription | None] = {}
    disabling: dict[str, str] = {}  # subscription id -> why
    moved: list[Delivery] = []
    for result in results:
        delivery = found[result.delivery_id]
        # Settled meanwhile (another relay after our lease ran out, a
        # disabling): only a success still changes it, as the receiver has it.
        if delivery.state == "delivered" or (delivery.state == "dead" and not result.outcome.ok):
            continue
        moved.append(_moved(delivery, result, now, settings, rand))
        _tally(done, moved[-1])
        if delivery.subscription_id not in subs:
            subs[delivery.subscription_id] = uow.webhooks.get(
                delivery.tenant, delivery.subscription_id
            )
        sub = subs[delivery.subscription_id]
        if sub is None:
            continue
        subs[sub.id] = _figures(sub, result, now)
        if result.outcome.gone and sub.status == "active":
            disabling.setdefault(sub.id, "the receiver answered 410 Gone")
    for sub in subs.values():  # from the batch's final figures: a later success clears it
        reason = _failing_too_long(sub, now, settings)
        if sub is not None and reason is not None and sub.status == "active":
            disabling.setdefault(sub.id, reason)
    uow.deliveries.save_many(moved)  # before a disabling kills what is still pending
    touched = {d.event_id for d in moved}
    for sub_id, reason in disabling.items():
        current = subs[sub_id]
        assert current is not None
        subs[sub_id] = replace(current, status="disabled", disabled_reason=reason, updated_at=now)
        touched.update(_disable(uow, ids, current, now, reason, audit_key))
        done.disabled.append(sub_id)
    for sub in subs.values():
        if sub is not None:
            uow.webhooks.save(sub)
    if touched:
        uow.outbox.settle(touched, now)
    return done


def _moved(
    d: Delivery,
    result: Result,
    now: datetime,
    settings: RelaySettings,
    rand: Callable[[], float],
) -> Delivery:
    tried = d.attempts + 1
    base = replace(
        d,
        attempts=tried,
        claim_owner=None,
        claim_until=None,
        last_status=result.outcome.status,
        last_error=result.outcome.error,
    )
    if result.outcome.ok:
        return replace(base, state="delivered", delivered_at=now, last_error=None)
    if result.outcome.gone:
        return replace(base, state="dead", last_error=result.outcome.error or "410 Gone")
    retry = next_attempt(settings, tried, now, result.outcome.retry_after, rand)
    if retry is None:
        return replace(base, state="dead")
    return replace(base, next_attempt_at=retry)


def _tally(done: Recorded, d: Delivery) -> None:
    if d.state == "delivered":
        done.delivered += 1
    elif d.state == "dead":
        done.dead += 1
    else:
        done.failed += 1


def _figures(sub: Subscription, result: Result, now: datetime) -> Subscription:
    if result.outcome.ok:
        return replace(
            sub,
            last_attempt_at=result.at,
            last_status=result.outcome.status,
            last_delivery_at=now,
            consecutive_failures=0,
            failing_since=None,
        )
    return replace(
        sub,
        last_attempt_at=result.at,
        last_status=result.outcome.status,
        consecutive_failures=sub.consecutive_failures + 1,
        failing_since=sub.failing_since or result.at,
    )


def _failing_too_long(
    sub: Subscription | None, now: datetime, settings: RelaySettings
) -> str | None:
    """Why ``sub`` is disabled for failing, if its failures have lasted long enough."""
    if sub is None or sub.failing_since is None:
        return None
    if now - sub.failing_since < settings.disable_after:
        return None
    hours = settings.disable_after.total_seconds() / 3600
    return f"every delivery failed for {hours:g} hours"


def _disable(
    uow: UnitOfWork,
    ids: IdGenerator,
    sub: Subscription,
    now: datetime,
    reason: str,
    audit_key: AuditKey | None,
) -> Collection[str]:
    """Disabling ``sub``: its pending deliveries die, an event and an audit entry say
    so. The caller saves the subscription itself."""
    killed = uow.deliveries.kill_pending(sub.id, now, f"the subscription was disabled: {reason}")
    audit(uow, sub.tenant, RELAY_ACTOR, now, "webhook.disable", sub.id, None, "disabled",
          audit_key=audit_key)  # fmt: skip
    payload = {
        "webhook_id": sub.id,
        "description": sub.description,
        "reason": reason,
        "at": format_instant(now),
    }
    uow.outbox.add(OutboxEvent(ids.new_id("evt"), sub.tenant, "webhook.disabled", now, payload))
    return killed


def purge_delivered(uow: UnitOfWork, clock: Clock, retention: timedelta, limit: int) -> int:
    """Delete up to ``limit`` events delivered longer than ``retention`` ago.

    No tenant lock: a delivered event is settled for good; nothing of a
    tenant's (its chain, its holds, a re-drive) reads or changes it again.
    """
    with uow:
        purged = uow.outbox.purge_delivered(clock.now() - retention, limit)
        uow.commit()
        return purged
