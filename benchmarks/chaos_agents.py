"""One simulated agent of ``slotward bench chaos``: its intents, pursued through faults.

An agent works through its intents one after the other (benchmarks/chaos_faults.py
plans them): create the hold, commit it with the token it was answered, and
sometimes release it (the compensation). Every call goes over its own aiohttp
session, not slotward's client, because the faults need finer control than a
client's retries: an answer read and thrown away, a connection cut a few
milliseconds in, the same create sent twice at once, a retry spelled
otherwise.

What counts as what:

- no answer (the connection refused while the server is down, reset by a
  kill, or cut on purpose), 503, 429, 409 ``request_in_progress``: try again,
  a create with the next planned spelling, after a short pause (0.1-1 s: the
  outages are short, and a duplicate in progress ends in milliseconds), for
  up to ``PATIENCE`` seconds;
- 409 ``slot_conflict``: refused; an offered alternative is tried (at most
  ``ALTERNATIVES`` times per intent) as a new step of the intent's workflow;
- 409 ``hold_preempted`` or ``hold_expired`` on the commit: the hold is gone;
  the slot is claimed again as a new step (bounded by the same count);
- any other answer (a 422, a ``token_mismatch``, a 500) is unexpected: the
  intent ends ``unexpected`` and the run fails. So is a drifted create that is
  not a replay (``Idempotent-Replayed: true``) of the intent's live hold (unless
  the commit then finds that hold preempted or expired: nothing live to
  replay), twins of a duplicate that do not both hold the same hold (or both
  meet the same refusal), and a wrong answer a lost-answer fault throws away
  (a 5xx is counted as a server error, a 4xx other than a refusal ends the
  intent ``unexpected``).

Every call that may have reached the server is recorded for the history
checker (``slotward.testing``), labelled with its intent; a connection refused
never reached it and is not recorded.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import aiohttp

from slotward.benchmarks.chaos_faults import (
    SLOT_MINUTES,
    TENANT,
    AgentPlan,
    Intent,
    Lose,
    drifted,
    spelled,
)
from slotward.testing import Call

__all__ = ["ALTERNATIVES", "PATIENCE", "Agent", "Track"]

PATIENCE = 180.0  # seconds one call is retried through outages before the intent gives up
ALTERNATIVES = 2  # further claims per intent after a refusal
_HEADERS = ("Idempotency-Key", "Idempotent-Replayed")
_TRY_AGAIN = frozenset({429, 503})
_GONE = frozenset({"hold_preempted", "hold_expired"})
_REFUSALS = {"create": frozenset({"slot_conflict"}), "commit": _GONE}
_TIMEOUT = aiohttp.ClientTimeout(total=60)


@dataclass
class Track:
    """What one intent went through: the report's and the demo's row."""

    intent: Intent
    outcome: str = "pending"  # landed | compensated | refused | unexpected | unresolved
    reason: str | None = None
    hold_id: str | None = None
    attempts: int = 0  # requests sent
    retries: int = 0  # of them, sent again for want of an answer
    injected: list[str] = field(default_factory=list)
    started: float = 0.0
    ms: float | None = None  # time to outcome
    surprise: str | None = None  # a wrong answer, even one a fault threw away: unexpected

    @property
    def settled(self) -> bool:
        return self.outcome in ("landed", "compensated", "refused")


@dataclass(frozen=True)
class _Answer:
    status: int
    raw: bytes
    replayed: bool = False  # Idempotent-Replayed: true
    at: float = 0.0  # when it came (time.time(), the server's clock on this machine)

    def doc(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.raw) if self.raw else {}
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    @property
    def code(self) -> str | None:
        code = self.doc().get("code")
        return code if isinstance(code, str) else None

    @property
    def ok(self) -> bool:
        return self.status in (200, 201)

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.code == "slot_conflict"

    def created(self) -> float:
        """When the hold it is about was created (time.time() scale); -inf if unknown."""
        try:
            return datetime.fromisoformat(str(self.doc()["created_at"])).timestamp()
        except (KeyError, ValueError):
            return float("-inf")


class Agent:
    """One agent: its key, its plan, the calls it recorded and how each intent ended."""

    def __init__(
        self, plan: AgentPlan, secret: str, base: str, at: datetime, calls: list[Call], seed: int,
        think: float = 0.0,
    ) -> None:  # fmt: skip
        self.plan, self.base, self.at, self.calls = plan, base, at, calls
        self._auth = {"Authorization": f"Bearer {secret}"}
        self._rng = random.Random(f"{seed}-{plan.index}")  # the cuts' moments
        self._think = think
        self.tracks: list[Track] = []
        self.server_errors = 0

    async def run(self, session: aiohttp.ClientSession) -> None:
        for intent in self.plan.intents:
            await asyncio.sleep(self._rng.uniform(0, 2 * self._think))  # a model deciding
            track = Track(intent, started=time.perf_counter())
            self.tracks.append(track)
            try:
                await self._pursue(session, track)
            finally:
                track.ms = (time.perf_counter() - track.started) * 1000

    async def _pursue(self, session: aiohttp.ClientSession, track: Track) -> None:
        intent, faults = track.intent, track.intent.faults
        start = self.at + timedelta(minutes=SLOT_MINUTES * intent.slot)
        step, left = 1, ALTERNATIVES
        while True:
            first = step == 1  # the planned faults of a create meet the first claim only
            answer = await self._create(session, track, start, step,
                                        faults.lose if first else "none",
                                        faults.duplicate and first)  # fmt: skip
            if answer is None:
                return _end(track, "unresolved", "no answer to the create")
            if track.surprise:
                return _end(track, "unexpected", track.surprise)
            doc = answer.doc()
            if answer.status == 409 and answer.code == "slot_conflict":
                alternatives = doc.get("alternatives") or []
                if left and alternatives:
                    start, step, left = (
                        datetime.fromisoformat(alternatives[0]["start"]),
                        step + 1,
                        left - 1,
                    )
                    continue
                return _end(track, "refused", "slot_conflict")
            if not answer.ok:
                return _end(track, "unexpected", f"create answered {answer.status} {answer.code}")
            hold, sent = str(doc.get("id")), {"token": doc.get("token")}
            suspect, rebooked = None, False  # a drifted create that did not replay the hold
            if faults.drift and "drift" not in track.injected:  # on the first hold it got
                track.injected.append("drift")
                again = await self._create(session, track, start, drifted(step), "none", False)
                if again is None:
                    return _end(track, "unresolved", "no answer to the drifted create")
                if not (again.ok and again.replayed and again.doc().get("id") == hold):
                    suspect = (f"the drifted create answered {again.status} {again.code} "
                               f"replayed={again.replayed} about {again.doc().get('id')}, "
                               f"not a replay of the live {hold}")  # fmt: skip
                    if not (again.ok or again.conflict):  # excused by nothing
                        return _end(track, "unexpected", suspect)
                    rebooked = again.ok  # a hold of its own, if the first was gone
            track.hold_id = hold
            commit = await self._send(session, track, _fixed(sent),
                                      f"/v1/holds/{hold}/commit", "commit", hold,
                                      "discard" if faults.lose_commit else "none")  # fmt: skip
            if commit is None:
                return _end(track, "unresolved", "no answer to the commit")
            if commit.status == 409 and commit.code in _GONE:
                # gone, so possibly before the drift came: no live hold it could replay;
                # a hold the drift booked afresh is then the intent's, and the next claim
                # gets it back (DESIGN 3) without counting as another claim
                if left or rebooked:
                    step, left = step + 1, left - (0 if rebooked else 1)
                    continue
                return _end(track, "refused", str(commit.code))
            if commit.status != 200:
                return _end(track, "unexpected", f"commit answered {commit.status} {commit.code}")
            if suspect is not None:  # the hold was live until its commit: it should have replayed
                return _end(track, "unexpected", suspect)
            break
        if not faults.release:
            return _end(track, "landed", None)
        track.injected.append("release")
        path = f"/v1/holds/{hold}/release"
        release = await self._send(session, track, _fixed({}), path, "release",
                                   hold, "none")  # fmt: skip
        if release is None:
            return _end(track, "unresolved", "no answer to the release")
        if release.status != 200:
            return _end(track, "unexpected", f"release answered {release.status} {release.code}")
        return _end(track, "compensated", None)

    async def _create(
        self, session: aiohttp.ClientSession, track: Track, start: datetime, step: int,
        lose: Lose, duplicate: bool,
    ) -> _Answer | None:  # fmt: skip
        intent = track.intent
        faults = intent.faults

        def body(attempt: int) -> tuple[str, dict[str, Any]]:
            return spelled(faults.spelling(attempt), intent.attendees, start, intent.minutes,
                           workflow=intent.workflow, step=step)  # fmt: skip

        label = f"create:{intent.workflow}:{step}"
        if not duplicate:
            return await self._send(session, track, body, "", "create", None, lose, label)
        track.injected.append("duplicate")
        both = await asyncio.gather(
            self._send(session, track, body, "", "create", None, lose, label),
            self._send(session, track, body, "", "create", None, "none", label),
        )
        first, second = both
        if first is None or second is None:
            return None
        if first.ok or second.ok:  # one holds: both must, and the same hold
            held, other = (first, second) if first.ok else (second, first)
            # ... unless the other was refused before that hold existed: a conflict is not
            # recorded under the key (DESIGN 4), and a rival may leave the slot in between
            early = other.conflict and other.at < held.created()
            same = other.ok and held.doc().get("id") == other.doc().get("id")
            if not (same or early):
                track.surprise = (f"duplicate creates answered {first.status} {first.code} "
                                  f"about {first.doc().get('id')} and {second.status} "
                                  f"{second.code} about {second.doc().get('id')}")  # fmt: skip
            return first if first.ok else second
        if (first.status, first.code) != (second.status, second.code):
            track.surprise = (f"duplicate creates answered {first.status} {first.code} and "
                              f"{second.status} {second.code}")  # fmt: skip
        return first

    async def _send(
        self, session: aiohttp.ClientSession, track: Track,
        body: Callable[[int], tuple[str, dict[str, Any]]], path: str, op: str,
        target: str | None, lose: Lose, label: str | None = None,
    ) -> _Answer | None:  # fmt: skip
        """POST until answered (see the module's doc); None when patience ran out."""
        deadline = time.monotonic() + PATIENCE
        pause, attempt = 0.05, 0
        while time.monotonic() < deadline:
            where, sent = body(attempt)
            url = self.base + (path or ("/v1/tool-calls" if where == "tool" else "/v1/holds"))
            cut = lose == "cut" and attempt == 0
            answer = await self._post(
                session, url, sent, op, target, label or f"{op}:{target}", cut
            )
            track.attempts += 1
            if cut and answer is None:
                track.injected.append("cut")  # (an answer quicker than the cut is kept)
            if answer is not None and answer.status >= 500 and answer.status != 503:
                self.server_errors += 1
            if answer is not None and lose == "discard" and attempt == 0:
                track.injected.append(f"lost-{op}")
                if not _expected(op, answer):  # judged before the fault throws it away
                    track.surprise = track.surprise or (
                        f"the lost first {op} answered {answer.status} {answer.code}"
                    )
                answer = None  # the server acted; its answer never reached the agent
            attempt += 1
            wait = _wait_for(answer)
            if wait is None and answer is not None:
                return answer
            track.retries += 1
            await asyncio.sleep(wait if wait is not None else pause)
            pause = min(pause * 2, 1.0)
        return None

    async def _post(
        self, session: aiohttp.ClientSession, url: str, body: dict[str, Any], op: str,
        target: str | None, label: str, cut: bool,
    ) -> _Answer | None:  # fmt: skip
        """One POST, recorded unless it never reached the server; None: no answer."""
        patience = aiohttp.ClientTimeout(total=self._rng.uniform(0.002, 0.03)) if cut else _TIMEOUT
        invoked = time.time()
        status: int | None = None
        raw, answered = b"", {}
        try:
            async with session.post(url, json=body, headers=self._auth, timeout=patience) as resp:
                raw = await resp.read()
                status = resp.status
                answered = {h: resp.headers[h] for h in _HEADERS if h in resp.headers}
        except aiohttp.ClientConnectorError:
            return None  # refused: the server is down and this call never reached it
        except (aiohttp.ClientError, TimeoutError):
            pass  # reset or cut: it may have acted
        self.calls.append(Call(
            op="create" if op == "create" else "commit" if op == "commit" else "release",
            tenant=TENANT, agent=self.plan.name, request=body, status=status, body=raw,
            headers=answered, target=target, invoked_at=invoked,
            completed_at=None if status is None else time.time(), intent=label,
        ))  # fmt: skip
        replayed = answered.get("Idempotent-Replayed") == "true"
        return None if status is None else _Answer(status, raw, replayed, time.time())


def _fixed(body: dict[str, Any]) -> Callable[[int], tuple[str, dict[str, Any]]]:
    """The same body at every attempt (a commit, a release)."""
    return lambda _: ("holds", body)


def _wait_for(answer: _Answer | None) -> float | None:
    """How long to wait before trying again, or None when the answer is final."""
    if answer is None:
        return None
    busy = answer.status == 409 and answer.code == "request_in_progress"
    if busy or answer.status in _TRY_AGAIN or answer.status >= 500:
        return 0.1 if busy else 0.25
    return None


def _expected(op: str, answer: _Answer) -> bool:
    """An answer the agent would act on (a hold, a refusal) or try again after."""
    return answer.ok or _wait_for(answer) is not None or answer.code in _REFUSALS.get(op, ())


def _end(track: Track, outcome: str, reason: str | None) -> None:
    if track.surprise is not None and outcome != "unexpected":  # a wrong answer met on the way
        outcome, reason = "unexpected", track.surprise
    track.outcome, track.reason = outcome, reason
