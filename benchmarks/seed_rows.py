"""The rows a :class:`~slotward.benchmarks.seed_plan.Plan` would have left in the store.

For every event, in audit-log order, exactly what the use cases write
(engine/usecases/placing.py, lifecycle.py, expiry.py): the hold and its attendee row
(final state, written once), the directory entry on an attendee's first use,
the ledger record with its stored answer, the audit entry, the outbox event.

The engine's own functions are too slow for a million holds (a derived key
costs ~16 us, an audit hash ~20 us), so keys, hashes and bodies are built here
from the same canonical documents with string templates. They are not trusted:
the first events and every 4096th are rebuilt with the engine's functions
(``derive_key``, ``intent_fingerprint``, ``child_key``, ``entry_hash``,
``encode(hold_document(...))``) and any difference stops the seeding. Ids have
the shape of ``TimeOrderedIds`` (creation milliseconds, then 128 bits drawn
from the seeded generator).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring
from typing import Any, Final

from slotward.adapters.store.instants import from_us, to_us
from slotward.benchmarks.seed_plan import AGENTS, Fate, Kind, Plan, PlannedHold
from slotward.engine.model import AuditEntry, Hold, HoldStatus
from slotward.engine.rules.audit import GENESIS, entry_hash
from slotward.engine.rules.documents import encode, hold_document
from slotward.engine.rules.fingerprint import child_key, derive_key, hold_intent, intent_fingerprint
from slotward.engine.rules.holds import Commit, Event, Expire, Preemption, Release, apply
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import Interval
from slotward.engine.usecases.lifecycle import COMMIT_TOOL, RELEASE_TOOL
from slotward.engine.usecases.placing import TOOL

__all__ = ["COLUMNS", "Rows", "SeedRows"]

COLUMNS: Final = {
    "attendees": ("tenant", "id", "name", "created_us"),
    "attendee_emails": ("tenant", "email", "attendee_id"),
    "holds": (
        "id", "tenant", "key", "workflow_id", "agent_id", "attendees", "start_us", "end_us",
        "title", "description", "priority", "status", "expires_us", "token", "intent_fp",
        "created_us", "updated_us", "committed_us", "preempted_by", "audit_seq", "event_seq",
    ),
    "hold_attendees": ("hold_id", "attendee", "tenant", "start_us", "end_us", "active"),
    "ledger": (
        "tenant", "key", "fingerprint", "state", "created", "body", "hold_id", "created_us",
        "expires_us", "kind", "workflow_id", "tool", "agent_id", "lease_token",
        "lease_expires_us", "completed_us",
    ),
    "audit_log": (
        "tenant", "seq", "at_us", "actor", "action", "key", "hold_id", "outcome", "prev_hash",
        "hash",
    ),
    "outbox": (
        "id", "tenant", "type", "hold_id", "payload", "state", "created_us", "seq", "fanned",
        "settled_us",
    ),
}  # fmt: skip
_CHECK_EVERY: Final = 4096
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_TOPICS: Final = (
    "Strategy sync", "1:1", "Quarterly planning", "Customer call", "Interview",
    "Design review", "Budget review", "Onboarding", "Project kickoff", "Retrospective",
    "Pipeline review", "Vendor call",
)  # fmt: skip
_NAMES: Final = ("Alex", "Sam", "Priya", "Jordan", "Mei", "Lukas", "Amara", "Diego", "Noor")
_NOTES: Final = (
    "Agenda: last quarter's numbers, open hiring requests, and the launch checklist.",
    "Dial-in details follow in the invite. Please review the shared doc beforehand.",
    "Rescheduled from last week at the customer's request.",
)


@dataclass
class Rows:
    """Rows for each table, in the order the service would have inserted them."""

    tables: dict[str, list[tuple[Any, ...]]] = field(
        default_factory=lambda: {name: [] for name in COLUMNS}
    )


@dataclass(slots=True)
class _Static:
    """What every document of one hold shares, encoded once."""

    id: str
    key: str
    intent_fp: str
    workflow: str
    step: int | None
    title: str
    description: str | None
    head: str  # its document up to the status value
    times: str  # from after the status to the updated_at value
    events: int = 0  # its outbox events so far: the last one's seq


@functools.lru_cache(maxsize=1 << 16)
def _minute(minutes: int) -> str:
    return (_EPOCH + timedelta(minutes=minutes)).isoformat()[:16]


def _iso(us: int) -> str:
    """``format_instant`` of an instant in microseconds, twice as fast."""
    minutes, rest = divmod(us, 60_000_000)
    seconds, micros = divmod(rest, 1_000_000)
    if micros:
        return f"{_minute(minutes)}:{seconds:02d}.{micros:06d}Z"
    return f"{_minute(minutes)}:{seconds:02d}Z"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _q(value: str | None) -> str:
    """A JSON string (or null), as ``json.dumps(value, ensure_ascii=False)`` writes it."""
    return "null" if value is None else encode_basestring(value)


class SeedRows:
    """Turns a plan into rows: iterate :meth:`batches`, then read :attr:`head`."""

    def __init__(
        self, plan: Plan, tenant: str, emails: list[str], ids: list[str], rng: random.Random
    ) -> None:
        self.plan, self.tenant, self.emails, self.ids = plan, tenant, emails, ids
        self.head = (0, GENESIS)  # the audit chain's (seq, hash) so far
        self._rng = rng  # ids, workflows, steps, titles
        self._retention = int(Policy().retention / timedelta(microseconds=1))
        self._statics: dict[int, _Static] = {}
        self._seen = bytearray(plan.attendees)
        self._t = _q(tenant)
        self._actors = {a: _q(a) for a, _ in (*AGENTS, ("system", 0))}
        self._rows = Rows()

    def batches(self, size: int = 50_000) -> Iterator[Rows]:
        """The rows of about ``size`` events at a time, in audit-log order."""
        holds = self.plan.holds
        left = [1 + (h.committed_us is not None) + (h.ended_us is not None) for h in holds]
        for n, (at, _, _, kind, i) in enumerate(self.plan.events):
            h = holds[i]
            if kind is Kind.CREATE:
                self._create(i, h)
            else:
                self._move(kind, at, i, h)
            if n < 64 or n % _CHECK_EVERY == 0:
                _check(self, self._static(i), kind, h)
            left[i] -= 1
            if not left[i]:
                self._statics.pop(i, None)
            if n % size == size - 1:
                yield self._rows
                self._rows = Rows()
        yield self._rows

    def _static(self, i: int) -> _Static:
        found = self._statics.get(i)
        if found is None:
            found = self._statics[i] = self._make_static(self.plan.holds[i])
        return found

    def _new_id(self, prefix: str, at_us: int) -> str:
        return f"{prefix}_{at_us // 1000:012x}{self._rng.getrandbits(128):032x}"

    def _make_static(self, h: PlannedHold) -> _Static:
        rng, att = self._rng, self.ids[h.attendee]
        workflow = f"wf-{rng.getrandbits(64):016x}"
        step = None if rng.random() < 0.3 else rng.randint(0, 8)
        title = f"{rng.choice(_TOPICS)} with {rng.choice(_NAMES)}"
        description = rng.choice(_NOTES) if rng.random() < 0.3 else None
        start, end = _iso(h.start_us), _iso(h.end_us)
        intent = f'{{"attendees":["{att}"],"end":"{end}","start":"{start}"}}'
        key = "idem_" + _sha(
            f'{{"intent":{intent},"step":{"null" if step is None else step},'
            f'"tenant":{self._t},"tool":"{TOOL}","v":1,"workflow":{_q(workflow)}}}'
        )
        fp = _sha(f'{{"intent":{intent},"tenant":{self._t},"tool":"{TOOL}","v":1}}')
        hold_id = self._new_id("hold", h.created_us)
        agent, priority = AGENTS[h.agent]
        head = (
            f'{{"id":"{hold_id}","key":"{key}","workflow_id":{_q(workflow)},'
            f'"agent_id":{self._actors[agent]},"attendees":["{att}"],"start":"{start}",'
            f'"end":"{end}","title":{_q(title)},"description":{_q(description)},'
            f'"priority":{priority},"status":"'
        )
        times = (
            f'","expires_at":"{_iso(h.created_us + h.ttl_s * _S)}","token":{{}},'
            f'"created_at":"{_iso(h.created_us)}","updated_at":"'
        )
        return _Static(hold_id, key, fp, workflow, step, title, description, head, times)

    def _document(self, s: _Static, h: PlannedHold, state: _State) -> str:
        status, token, updated, committed, by = state
        at = "null" if committed is None else f'"{_iso(committed)}"'
        by_ = "null" if by is None else f'"{by}"'
        return (
            f'{s.head}{status}{s.times.format(token)}{_iso(updated)}","committed_at":{at},'
            f'"preempted_by":{by_},"audit_seq":{h.seq}}}'
        )

    def _audit(
        self, at: int, actor: str, action: str, key: str | None, hold_id: str, outcome: str
    ) -> int:
        seq, prev = self.head[0] + 1, self.head[1]
        key_ = "null" if key is None else f'"{key}"'
        digest = _sha(
            f'{{"action":"{action}","actor":{self._actors[actor]},"at":"{_iso(at)}",'
            f'"hold":"{hold_id}","key":{key_},"outcome":"{outcome}","prev_hash":"{prev}",'
            f'"seq":{seq},"tenant":{self._t}}}'
        )
        row = (self.tenant, seq, at, actor, action, key, hold_id, outcome, prev, digest)
        self._rows.tables["audit_log"].append(row)
        self.head = (seq, digest)
        return seq

    def _outbox(self, at: int, kind: str, s: _Static, payload: str) -> None:
        # Fanned out and delivered when it was written: a relay with no
        # subscription to send it to, as the service leaves an event then.
        s.events += 1
        row = (self._new_id("evt", at), self.tenant, kind, s.id, payload, "delivered", at,
               s.events, True, at)  # fmt: skip
        self._rows.tables["outbox"].append(row)

    def _ledger(
        self, at: int, key: str, created: bool, body: str, s: _Static, tool: str, agent: str
    ) -> None:
        self._rows.tables["ledger"].append((
            self.tenant, key, key, "succeeded", created, body.encode(), s.id, at,
            at + self._retention, "hold", s.workflow, tool, agent, None, None, at,
        ))  # fmt: skip

    def _create(self, i: int, h: PlannedHold) -> None:
        s, t, tables = self._static(i), self.tenant, self._rows.tables
        agent, priority = AGENTS[h.agent]
        att = self.ids[h.attendee]
        if not self._seen[h.attendee]:  # first use: the directory registers the email
            self._seen[h.attendee] = 1
            tables["attendees"].append((t, att, None, h.created_us))
            tables["attendee_emails"].append((t, self.emails[h.attendee], att))
        h.seq = self._audit(h.created_us, agent, "hold.create", s.key, s.id, "fresh")
        status, token, updated, committed, by = self._final(h)
        events = 1 + (h.committed_us is not None) + (h.ended_us is not None)  # one a change
        tables["holds"].append((
            s.id, t, s.key, s.workflow, agent, f'["{att}"]', h.start_us, h.end_us, s.title,
            s.description, priority, status, h.created_us + h.ttl_s * _S, token, s.intent_fp,
            h.created_us, updated, committed, by, h.seq, events,
        ))  # fmt: skip
        active = status in ("held", "committed")
        tables["hold_attendees"].append((s.id, att, t, h.start_us, h.end_us, active))
        doc = self._document(s, h, ("held", 1, h.created_us, None, None))
        self._ledger(h.created_us, s.key, True, doc, s, TOOL, agent)
        self._outbox(h.created_us, "hold.created", s, f'{{"hold":{doc}}}')

    def _move(self, kind: Kind, at: int, i: int, h: PlannedHold) -> None:
        s = self._static(i)
        if kind is Kind.COMMIT:
            doc = self._document(s, h, ("committed", 2, at, at, None))
        else:
            doc = self._document(s, h, self._final(h))
        if kind is Kind.EXPIRE:
            self._audit(at, "system", "hold.expire", None, s.id, "expired")
            self._outbox(at, "hold.expired", s, f'{{"hold":{doc}}}')
        elif kind is Kind.PREEMPT:
            winner = self.plan.holds[h.winner or 0]
            self._audit(at, AGENTS[winner.agent][0], "hold.preempt", s.key, s.id, "preempted")
            by = self._static(h.winner or 0).id
            self._outbox(at, "hold.preempted", s, f'{{"hold":{doc},"preempted_by":"{by}"}}')
        else:
            agent, action = AGENTS[h.agent][0], _ACTIONS[kind.value]
            key = "idem_" + _sha(f'{{"action":"{action}","parent":"{s.key}","v":1}}')
            self._audit(at, agent, f"hold.{action}", key, s.id, "fresh")
            self._ledger(at, key, False, doc, s, _TOOLS[kind.value], agent)
            self._outbox(at, _EVENTS[kind.value], s, f'{{"hold":{doc}}}')

    def _final(self, h: PlannedHold) -> _State:
        """The hold as stored at the end: also its state right after its last event."""
        fate, end, c = h.fate, h.ended_us or 0, h.committed_us
        if fate is Fate.COMMITTED:
            return "committed", 2, c or 0, c, None
        if fate is Fate.HELD:
            return "held", 1, h.created_us, None, None
        if fate is Fate.PREEMPTED:
            return "preempted", 2, end, None, self._static(h.winner or 0).id
        if fate is Fate.EXPIRED:
            return "expired", 1, end, None, None
        return "released", 2 if fate is Fate.RELEASED else 3, end, c, None


# (status, token, updated_us, committed_us, preempted_by): what moves in a document
_State = tuple[str, int, int, int | None, str | None]
_S: Final = 1_000_000
_ACTIONS: Final = {Kind.COMMIT.value: "commit", Kind.RELEASE.value: "release"}
_EVENTS: Final = {Kind.COMMIT.value: "hold.committed", Kind.RELEASE.value: "hold.released"}
_TOOLS: Final = {Kind.COMMIT.value: COMMIT_TOOL, Kind.RELEASE.value: RELEASE_TOOL}


def _check(b: SeedRows, s: _Static, kind: Kind, h: PlannedHold) -> None:
    """Rebuild the event's newest rows with the engine's functions; stop on a difference.

    The hold is replayed through the engine's state machine (``apply``) from its
    create, so tokens, statuses and times are the engine's too.
    """
    tables = b._rows.tables
    audit = tables["audit_log"][-1]
    tenant, seq, at_us, actor, action, key, hold_id, outcome, prev, digest = audit
    entry = AuditEntry(tenant, seq, from_us(at_us), actor, action, key, hold_id, outcome, prev, "")
    found: dict[str, tuple[object, object]] = {"audit hash": (digest, entry_hash(entry))}
    hold, at = _engine_hold(b, s, h, kind)
    doc = hold_document(hold, at)
    if kind is Kind.CREATE:
        intent = hold_intent([b.ids[h.attendee]], Interval(hold.start, hold.end))
        derived = derive_key(tenant=b.tenant, workflow=s.workflow, tool=TOOL, intent=intent,
                             step=s.step)  # fmt: skip
        found["key"] = (s.key, derived)
        found["intent"] = (s.intent_fp, intent_fingerprint(tenant=b.tenant, tool=TOOL,
                                                           intent=intent))  # fmt: skip
    verb = _ACTIONS.get(kind.value)
    if verb is not None:
        found["child key"] = (key, child_key(s.key, verb))
    if kind is Kind.CREATE or verb is not None:
        found["body"] = (tables["ledger"][-1][5], encode(doc))
    extra = {"preempted_by": hold.preempted_by} if kind is Kind.PREEMPT else {}
    payload = json.dumps({"hold": doc, **extra}, separators=(",", ":"))
    found["event"] = (tables["outbox"][-1][4], payload)
    found["event seq"] = (tables["outbox"][-1][7], hold.event_seq)
    if kind is Kind.CREATE:
        stored = tables["holds"][-1]
        final = hold if h.fate is Fate.HELD else None
        found["hold"] = (stored[:11], (s.id, b.tenant, s.key, s.workflow, hold.agent_id,
                         json.dumps(list(hold.attendees)), h.start_us, h.end_us, s.title,
                         s.description, hold.priority))  # fmt: skip
        if final is not None:
            found["held hold"] = (stored[11:], ("held", to_us(final.expires_at), 1, s.intent_fp,
                                  h.created_us, h.created_us, None, None, h.seq, 1))  # fmt: skip
    wrong = [name for name, (ours, engine) in found.items() if ours != engine]
    if wrong:
        raise RuntimeError(f"seeded {', '.join(wrong)} differ from the engine's at {audit}")


def _engine_hold(b: SeedRows, s: _Static, h: PlannedHold, kind: Kind) -> tuple[Hold, datetime]:
    """The engine's hold right after ``kind``, and when that was."""
    at = from_us(h.created_us)
    agent, priority = AGENTS[h.agent]
    hold = Hold(
        id=s.id, key=s.key, tenant=b.tenant, workflow_id=s.workflow, agent_id=agent,
        attendees=(b.ids[h.attendee],), start=from_us(h.start_us), end=from_us(h.end_us),
        title=s.title, description=s.description, priority=priority, status=HoldStatus.HELD,
        expires_at=from_us(h.created_us + h.ttl_s * _S), token=1, intent_fp=s.intent_fp,
        created_at=at, updated_at=at, audit_seq=h.seq, event_seq=1,
    )  # fmt: skip
    if kind is Kind.CREATE:
        return hold, at
    if h.committed_us is not None and (kind is Kind.COMMIT or h.fate is Fate.CANCELLED):
        at = from_us(h.committed_us)
        hold = apply(hold, Commit(1), at)[0]
    if kind is Kind.COMMIT:
        return hold, at
    at = from_us(h.ended_us or 0)
    winner = b._static(h.winner).id if h.winner is not None else ""
    events: dict[Kind, Event] = {Kind.RELEASE: Release(), Kind.EXPIRE: Expire(),
                                 Kind.PREEMPT: Preemption(winner)}  # fmt: skip
    event = events[kind]
    return apply(hold, event, at)[0], at
