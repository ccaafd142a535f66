"""``slotward bench providers``: claims on attendees bound to a CalDAV calendar, and mirroring.

One `slotward serve` and one local Radicale (benchmarks/radicale.py; a
development dependency: without it the benchmark says so and exits 2). The
server keeps every mirror fresh for the whole run
(``SLOTWARD_PROVIDER_MAX_STALENESS`` and ``SLOTWARD_PROVIDER_SYNC_INTERVAL`` at
a day), so after each binding's first read, made by its PUT, a claim decides
on the mirror alone and never waits for Radicale.

- **bound** / **unbound**: C agents (one key each) claim 30-minute slots, one
  attendee per claim. C attendees are each bound to a calendar of their own
  in Radicale (``PUT /v1/attendees/{attendee}/calendar``) holding an external
  event in every gap between the claims, so every overlap check meets busy
  time right beside the slot; C other attendees are bound to nothing. N claims
  each, in ``ROUNDS`` alternating rounds pooled (the machine's noise falls on
  both alike). Target: the bound claims' p50 at most 1.5x the unbound ones'.
  Reported beside it: the p99 ratio, how many claims read the calendar (their
  answer's ``external_as_of`` is not their binding's first read) and how many
  reads Radicale saw meanwhile, the calendar writes of the bound holds (each
  hold's event, by the server's writer), and the server's CPU per claim from
  /proc (the bound claims' includes their writes: each round is measured until
  the writes are done and the server is idle).
- **mirror**: one Radicale calendar of E events, S of them weekly series
  without end and E - S single events, spread over the coming seven weeks;
  ``MIRROR_READS`` attendees are bound to it one after another, and each PUT
  (its first full read into the mirror) is timed. Reported: the seconds, the
  busy blocks stored (counted in the database) against those the calendar
  holds in the window read, and the CPU of the server and of Radicale per read.

Every call to slotward's holds is recorded and checked against the database
afterwards by the history checker (``slotward.testing``): a violation makes the
run exit 1.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from sqlalchemy import create_engine, func, select
from sqlalchemy.pool import NullPool

from slotward.adapters.store.tables import calendar_busy
from slotward.benchmarks.baseline import check_warmup, plan, warm_count
from slotward.benchmarks.cpu import per_call_us, tree_cpu_seconds
from slotward.benchmarks.loadgen import drive
from slotward.benchmarks.plans import Call, create_call, future_start, one_per_task, phase
from slotward.benchmarks.plans import warmup_phase as warmup
from slotward.benchmarks.radicale import Radicale, radicale_server, require_radicale
from slotward.benchmarks.recording import calls_of, check_history
from slotward.benchmarks.results import (
    Outcome,
    Result,
    Settings,
    Target,
    percentile,
    pooled,
    ratio,
)
from slotward.benchmarks.servers import (
    ServerFailed,
    make_keys,
    server_env,
    server_pid,
    slotward_server,
    workspace,
)
from slotward.engine.model import Principal
from slotward.testing import sync_url

__all__ = ["MIRROR_READS", "ROUNDS", "providers"]

TENANT = "bench"
ROUNDS = 4  # bound, read-only and unbound in turn, pooled
KINDS = ("bound", "readonly", "unbound")
MIRROR_READS = 3  # attendees bound to the big calendar, one after another
_GOAL = 1.5
_MINUTES = 30  # a claim; claims of one attendee start an hour apart
_READS = ("REPORT", "PROPFIND", "GET")  # what reading a calendar sends to Radicale
_WRITES = ("PUT", "DELETE")
_IDLE_CPU = 0.02  # server CPU seconds in _IDLE_LOOK seconds below which it is idle
_IDLE_LOOK = 0.25
_FRESH = "86400"  # seconds: no mirror goes stale, no binding is due, within a run


def providers(settings: Settings, *, events: int = 1000, series: int = 50) -> Outcome:
    if events < 1 or not 0 <= series <= events:
        raise ValueError("--events must be positive and --series 0 to --events")
    require_radicale()  # before anything is started
    outcome = Outcome("providers", settings)
    c = settings.concurrency
    principals = [Principal(TENANT, f"agent-{i}", "agent", 50) for i in range(c)]
    principals.append(Principal(TENANT, "admin", "admin", 50))
    with workspace(settings.db) as databases, _server_env():
        url = databases.fresh("providers")
        keys = make_keys(url, principals)
        with (
            radicale_server(databases.workdir) as radicale,
            slotward_server(url, settings.workers, databases.workdir) as base,
        ):
            run = _Run(settings, base, keys, radicale, outcome)
            claimed = run.claims()
            mirrored = run.mirror(events, series)
        calls = [call for records in run.records for call in calls_of(records, principals)]
        check_history(outcome, url, calls)
        blocks = _blocks(url, [m["attendee"] for m in mirrored["reads"]])
    bound, readonly, _ = _claim_results(settings, claimed, outcome)
    _mirror_result(settings, mirrored, blocks, events, series, outcome)
    outcome.targets.append(Target(
        f"bound claim p50 / unbound, fresh mirror, at {c} agents",
        bound.extra["p50_ratio_to_unbound"], _GOAL, False,
    ))  # fmt: skip
    outcome.targets.append(Target(
        f"read-only (ics) bound claim p50 / unbound, fresh mirror, no writes, at {c} agents",
        readonly.extra["p50_ratio_to_unbound"], _GOAL, False,
    ))  # fmt: skip
    for result in (bound, readonly):
        read = result.extra["claims_read_provider"]
        if read:
            outcome.notes.append(f"{read} {result.scenario} claims read the calendar: "
                                 "the mirror was not fresh for them")  # fmt: skip
    return outcome


@contextlib.contextmanager
def _server_env() -> Iterator[None]:
    """The server's settings (it inherits this environment): Radicale on loopback
    allowed, every mirror fresh for the run, a sealing key."""
    wanted = {
        "SLOTWARD_ALLOW_PRIVATE_URLS": "true",
        "SLOTWARD_PROVIDER_MAX_STALENESS": _FRESH,
        "SLOTWARD_PROVIDER_SYNC_INTERVAL": _FRESH,
        "SLOTWARD_SECRET_KEY": base64.b64encode(os.urandom(24)).decode(),
    }
    with server_env(wanted):
        yield


class _Run:
    """One server and one Radicale, measured: the claims, then the mirror."""

    def __init__(
        self, settings: Settings, base: str, keys: Sequence[str], radicale: Radicale,
        outcome: Outcome,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.base = base
        self.agents = list(keys[:-1])
        self.admin = keys[-1]
        self.radicale = radicale
        self.outcome = outcome
        self.records: list[Sequence[Mapping[str, Any]]] = []  # every recorded call
        self.pid = server_pid(base)

    # -- claims --------------------------------------------------------------------

    def claims(self) -> dict[str, Any]:
        s = self.settings
        c, per_round = s.concurrency, max(1, s.requests // ROUNDS)
        rows = math.ceil(per_round / c)  # slots each attendee gets per round
        start = future_start()
        warm_slot = ROUNDS * rows  # after the measured ones
        as_of: dict[str, str] = {}  # attendee's email -> the first read of its binding
        for i in range(c):
            # "readonly" attendees read the same kind of calendar as an ICS feed (GET of
            # the collection): the mirror's cost without the calendar writes.
            for kind, provider in (("bound", "caldav"), ("readonly", "ics")):
                ics = _gaps_calendar(start, warm_slot + 8, f"{kind}-{i}")
                calendar = self.radicale.calendar(f"/bench/{kind}-{i}/", ics)
                email = f"{kind}-{i}@bench.example"
                doc = self.bind(email, calendar, provider)
                as_of[email] = str(doc["sync"]["external_as_of"])
        put_base = self.radicale.requests()
        warm = warmup(self.base, c, c, start - timedelta(days=1), creates=warm_count(s),
                      record=True)  # fmt: skip
        for kind in KINDS:
            calls = [_claim(kind, i, start, warm_slot, i) for i in range(c)]
            warm.append(phase(f"warm {kind}", self.base, one_per_task(calls), concurrency=c,
                              seconds=120, expect=(201,), record=True))  # fmt: skip
        answered = drive(plan(s, warm, self.agents))["phases"]
        check_warmup(self.outcome, answered)
        self.records += [p["records"] for p in answered[len(warm) - 1 - len(KINDS) :]]
        self.settle(put_base["PUT"] + c)
        done: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
        for r in range(ROUNDS):
            for kind in KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]:
                calls = [_claim(kind, j % c, start, r * rows + j // c, j % c)
                         for j in range(per_round)]  # fmt: skip
                done[kind].append(self.round(kind, calls))
        return {"done": done, "as_of": as_of}

    def round(self, kind: str, calls: Sequence[Call]) -> dict[str, Any]:
        s = self.settings
        before, cpu = self.radicale.requests(), self.cpu()
        spec = phase(kind, self.base, one_per_task(calls), concurrency=s.concurrency,
                     seconds=s.seconds, expect=(201,), record=True)  # fmt: skip
        answer = drive(plan(s, [spec], self.agents))["phases"][0]
        self.records.append(answer["records"])
        created = answer["statuses"].get("201", 0)
        writes = created if kind == "bound" else 0
        settled = self.settle(before["PUT"] + writes)
        asked = self.radicale.requests() - before
        if not settled:
            self.outcome.notes.append(
                f"{kind}: the server was not idle, or its calendar writes not done, "
                f"{s.seconds:g} s after the round"
            )
        # The server's CPU until its calendar writes are done: they are the claims' cost too.
        return {**answer, "server_cpu_seconds": self.cpu() - cpu, "asked": asked}

    def settle(self, puts: int) -> bool:
        """Until Radicale has seen ``puts`` PUTs and the server is idle; False when
        that did not happen within the time bound."""
        deadline = time.monotonic() + self.settings.seconds
        while time.monotonic() < deadline:
            written = self.radicale.requests()["PUT"] >= puts
            cpu = self.cpu()
            time.sleep(_IDLE_LOOK)
            if written and self.cpu() - cpu < _IDLE_CPU:
                return True
        return False

    def cpu(self) -> float:
        return 0.0 if self.pid is None else tree_cpu_seconds(self.pid)

    def bind(self, attendee: str, calendar: str, provider: str = "caldav") -> dict[str, Any]:
        """PUT the attendee's binding to ``calendar``: the answer (its first read made)."""
        body = {"provider": provider, "url": calendar}
        status, doc = _call(self.base, self.admin, "PUT",
                            f"/v1/attendees/{quote(attendee)}/calendar", body)  # fmt: skip
        if status != 200 or doc.get("sync", {}).get("status") != "ok":
            raise ServerFailed(f"binding {attendee} to {calendar}: {status} {doc}")
        return doc

    # -- the mirror ----------------------------------------------------------------

    def mirror(self, events: int, series: int) -> dict[str, Any]:
        first = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        first += timedelta(days=1)
        ics = _big_calendar(first, events, series)
        calendar = self.radicale.calendar("/bench/big/", ics)
        cold = self.radicale.query(calendar)  # Radicale's first read of it, untimed
        reads = []
        for m in range(MIRROR_READS):
            asked, cpu, theirs = self.radicale.requests(), self.cpu(), self.radicale.cpu_seconds()
            started = time.perf_counter()
            doc = self.bind(f"mirror-{m}@bench.example", calendar)
            took = time.perf_counter() - started
            reads.append({
                "seconds": took, "attendee": str(doc["attendee"]),
                "covers": doc["sync"]["covers"], "server_cpu_seconds": self.cpu() - cpu,
                "radicale_cpu": self.radicale.cpu_seconds() - theirs,
                "asked": self.radicale.requests() - asked,
            })  # fmt: skip
        return {"reads": reads, "first": first, "bytes": len(ics), "cold": cold}


def _claim(kind: str, attendee: int, start: datetime, slot: int, key: int) -> Call:
    """A claim of ``kind``'s attendee for 30 minutes at hour ``slot`` from ``start``."""
    at = start + timedelta(hours=slot)
    name = f"{kind}-{attendee}-{slot}"
    return create_call(name, f"{kind}-{attendee}@bench.example", at, key, minutes=_MINUTES,
                       call_id=name, intent=name)  # fmt: skip


def _vcalendar(vevents: Sequence[str]) -> bytes:
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//slotward bench//providers//EN",
             *vevents, "END:VCALENDAR"]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n").encode()


def _vevent(uid: str, start: datetime, minutes: int, rrule: str | None = None) -> str:
    end = start + timedelta(minutes=minutes)
    lines = ["BEGIN:VEVENT", f"UID:{uid}", "DTSTAMP:20260101T000000Z",
             f"DTSTART:{start:%Y%m%dT%H%M%SZ}", f"DTEND:{end:%Y%m%dT%H%M%SZ}",
             "SUMMARY:busy elsewhere", *([f"RRULE:{rrule}"] if rrule else []),
             "END:VEVENT"]  # fmt: skip
    return "\r\n".join(lines)


def _gaps_calendar(start: datetime, slots: int, name: str) -> bytes:
    """An external event in the gap after each claim's slot: 35 to 55 minutes past."""
    gap = timedelta(minutes=_MINUTES + 5)
    return _vcalendar([_vevent(f"{name}-{k}@bench", start + timedelta(hours=k) + gap, 20)
                       for k in range(slots)])  # fmt: skip


_SINGLE_EVERY = timedelta(minutes=53)  # singles: 45 minutes, one every 53 minutes
_SERIES_EVERY = timedelta(minutes=197)  # series: their first instances over the first week


def _singles(first: datetime, count: int) -> list[tuple[datetime, datetime]]:
    return [(first + _SINGLE_EVERY * i, first + _SINGLE_EVERY * i + timedelta(minutes=45))
            for i in range(count)]  # fmt: skip


def _series_starts(first: datetime, count: int) -> list[datetime]:
    return [first + _SERIES_EVERY * j + timedelta(minutes=7) for j in range(count)]


def _big_calendar(first: datetime, events: int, series: int) -> bytes:
    """``events - series`` single events and ``series`` weekly series without end."""
    singles = [_vevent(f"single-{i}@bench", s, 45)
               for i, (s, _) in enumerate(_singles(first, events - series))]  # fmt: skip
    weekly = [_vevent(f"series-{j}@bench", s, 30, "FREQ=WEEKLY")
              for j, s in enumerate(_series_starts(first, series))]  # fmt: skip
    return _vcalendar(singles + weekly)


def _expected_blocks(first: datetime, events: int, series: int, covers: Mapping[str, str]) -> int:
    """The instances of the big calendar that overlap the window a read covers."""
    since, until = (
        datetime.fromisoformat(covers[k].replace("Z", "+00:00")) for k in ("from", "to")
    )
    count = sum(1 for s, e in _singles(first, events - series) if s < until and e > since)
    for s in _series_starts(first, series):
        while s < until:
            count += s + timedelta(minutes=30) > since
            s += timedelta(weeks=1)
    return count


def _call(
    base: str, key: str, method: str, path: str, body: Mapping[str, Any]
) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                            timeout=300)  # fmt: skip
    try:
        connection.request(method, path, body=json.dumps(body).encode(), headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json"})  # fmt: skip
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        doc = {"body": raw[:300].decode(errors="replace")}
    return response.status, doc if isinstance(doc, dict) else {"body": doc}


def _blocks(url: str, attendees: Sequence[str]) -> list[int]:
    """The busy blocks stored for each of ``attendees``."""
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            out = []
            for attendee in attendees:
                mine = (calendar_busy.c.tenant == TENANT, calendar_busy.c.attendee == attendee)
                query = select(func.count()).select_from(calendar_busy).where(*mine)
                out.append(int(conn.execute(query).scalar_one()))
            return out
    finally:
        engine.dispose()


def _pooled(phases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The rounds of one kind as one phase, with what Radicale was asked."""
    out = pooled(phases)
    out["asked"] = sum((p["asked"] for p in phases), Counter())
    return out


def _read_provider(records: Sequence[Mapping[str, Any]], as_of: Mapping[str, str]) -> int:
    """Bound claims decided on external time read after their binding's first read."""
    count = 0
    for r in records:
        if r["status"] != 201:
            continue
        doc = json.loads(base64.b64decode(r["body"]))
        count += doc.get("external_as_of") != as_of[r["request"]["attendees"][0]]
    return count


def _claim_results(
    settings: Settings, claimed: Mapping[str, Any], outcome: Outcome
) -> tuple[Result, Result, Result]:
    c = settings.concurrency
    done = claimed["done"]
    pooled = {kind: _pooled(done[kind]) for kind in KINDS}
    bound = outcome.add(Result.of("bound", pooled["bound"], settings, c), pooled["bound"])
    readonly = outcome.add(
        Result.of("readonly", pooled["readonly"], settings, c), pooled["readonly"]
    )
    unbound = outcome.add(Result.of("unbound", pooled["unbound"], settings, c), pooled["unbound"])
    bound_records = [r for p in done["bound"] for r in p["records"]]
    readonly_records = [r for p in done["readonly"] for r in p["records"]]
    for kind, records in (("bound", bound_records), ("readonly", readonly_records)):
        answers = [json.loads(base64.b64decode(r["body"])) for r in records if r["status"] == 201]
        no_external = sum(1 for doc in answers if "external_as_of" not in doc)
        if no_external:
            outcome.problems.append(f"{kind}: {no_external} answers carry no external_as_of")
    for result in (bound, readonly, unbound):
        result.extra["attendees"] = c
        result.extra["rounds"] = ROUNDS
    asked: Counter[str] = pooled["bound"]["asked"]
    bound.extra["claims_read_provider"] = _read_provider(bound_records, claimed["as_of"])
    bound.extra["provider_reads"] = sum(asked[m] for m in _READS)
    bound.extra["calendar_writes"] = sum(asked[m] for m in _WRITES)
    bound.extra["p50_ratio_to_unbound"] = ratio(bound.p50_ms, unbound.p50_ms)
    bound.extra["p99_ratio_to_unbound"] = ratio(bound.p99_ms, unbound.p99_ms)
    seen: Counter[str] = pooled["readonly"]["asked"]
    readonly.extra["claims_read_provider"] = _read_provider(readonly_records, claimed["as_of"])
    readonly.extra["provider_reads"] = sum(seen[m] for m in _READS)
    readonly.extra["calendar_writes"] = sum(seen[m] for m in _WRITES)
    readonly.extra["p50_ratio_to_unbound"] = ratio(readonly.p50_ms, unbound.p50_ms)
    readonly.extra["p99_ratio_to_unbound"] = ratio(readonly.p99_ms, unbound.p99_ms)
    unbound.extra["provider_reads"] = sum(pooled["unbound"]["asked"][m] for m in _READS)
    return bound, readonly, unbound


def _mirror_result(
    settings: Settings, mirrored: Mapping[str, Any], blocks: Sequence[int], events: int,
    series: int, outcome: Outcome,
) -> Result:  # fmt: skip
    reads = mirrored["reads"]
    took = sorted(r["seconds"] * 1000 for r in reads)
    seconds = sum(r["seconds"] for r in reads)
    expected = [_expected_blocks(mirrored["first"], events, series, r["covers"]) for r in reads]
    result = Result(
        scenario="mirror", requests=len(reads), seconds=round(seconds, 6),
        req_per_s=round(len(reads) / seconds, 3) if seconds > 0 else 0.0,
        p50_ms=round(percentile(took, 0.5), 2), p90_ms=round(percentile(took, 0.9), 2),
        p99_ms=round(percentile(took, 0.99), 2), errors=0, concurrency=1,
        db=settings.db_kind, workers=settings.workers, client_cpu=0.0,
        server_cpu_us_per_call=per_call_us(
            sum(r["server_cpu_seconds"] for r in reads), len(reads)),
        statuses={"200": len(reads)},
    )  # fmt: skip
    result.extra.update({
        "events": events, "series": series, "calendar_bytes": mirrored["bytes"],
        "mirror_seconds": round(statistics.median(r["seconds"] for r in reads), 3),
        "reads_seconds": [round(r["seconds"], 3) for r in reads],
        "busy_blocks": blocks[0], "busy_blocks_per_read": list(blocks),
        "expected_blocks": expected[0],
        "server_cpu_s_per_read": [round(r["server_cpu_seconds"], 3) for r in reads],
        "radicale_cpu_s_per_read": [round(r["radicale_cpu"], 3) for r in reads],
        "radicale_first_query_seconds": round(mirrored["cold"], 3),
        "radicale_requests_per_read": [dict(r["asked"]) for r in reads],
    })  # fmt: skip
    outcome.results.append(result)
    for got, want, read in zip(blocks, expected, reads, strict=True):
        if got == 0 and want:
            outcome.problems.append(f"mirror: no busy block stored for {read['attendee']}")
        elif got != want:
            outcome.notes.append(f"mirror: {got} busy blocks stored for {read['attendee']}, "
                                 f"{want} instances in the window read")  # fmt: skip
    return result
