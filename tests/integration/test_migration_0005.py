"""Migration 0005: aliases stored by the old rule take the new form, ids kept.

A database is built at revision 0004 with rows exactly as the code before
0005 stored them (emails trimmed and case-folded, nothing more; unknown
emails under the id derived from that form), then the real server opens it,
which migrates it, and agents spell the old addresses every which way.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, text

from slotward.adapters.store import migrate
from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.engine.clock import FixedClock
from slotward.engine.rules.fingerprint import canonical_json
from tests.e2e.conftest import START, Server, serving
from tests.integration.databases import empty_database


def nfd(value: str) -> str:
    return unicodedata.normalize("NFD", value)


def old_form(email: str) -> str:
    """The rule before 0005 (engine/rules/attendees.py then): trim, case-fold."""
    return email.strip().casefold()


def old_id(tenant: str, email: str) -> str:
    doc = {"tenant": tenant, "email": old_form(email)}
    return "att_" + hashlib.sha256(canonical_json(doc)).hexdigest()[:32]


# (tenant, email as first sent, created_us): one attendee each, derived id.
# Two spellings of one mailbox were two attendees before 0005.
PEOPLE = {
    "jose": ("acme", "josé@example.com", 2),  # composed: the normal form
    "jose_nfd": ("acme", nfd("josé@example.com"), 1),  # older, but not normal
    "ana_u": ("acme", "ana@bücher.example", 1),
    "ana_a": ("acme", "ana@xn--bcher-kva.example", 3),  # the normal form, newer
    "diana_dot": ("acme", "DİANA@example.com", 2),
    "diana_root": ("acme", "Diana@Example.com.", 1),  # older; neither is normal
    "bob": ("acme", "bob@x_y.example", 1),  # IDNA 2008 refuses the domain
    "zoe": ("acme", nfd("zoë@example.com"), 1),
    "alex": ("acme", "alex@example.com", 1),  # normal already: untouched
    "other_jose": ("other", nfd("josé@example.com"), 1),
}
ID = {who: old_id(tenant, email) for who, (tenant, email, _) in PEOPLE.items()}
KIM = "kim"  # an attendee put with two aliases that now meet


def old_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    attendees = [
        {"tenant": tenant, "id": ID[who], "name": None, "created_us": created}
        for who, (tenant, _, created) in PEOPLE.items()
    ]
    attendees.append({"tenant": "acme", "id": KIM, "name": "Kim", "created_us": 5})
    emails = [
        {"tenant": tenant, "email": old_form(email), "attendee_id": ID[who]}
        for who, (tenant, email, _) in PEOPLE.items()
    ]
    for spelling in ("kim@example.com", "KIM@example.com."):
        emails.append({"tenant": "acme", "email": old_form(spelling), "attendee_id": KIM})
    return attendees, emails


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    """A fresh database at revision 0004 holding the old rows."""
    url, engine = empty_database(request, tmp_path, request.param, "migration5")
    with engine.begin() as conn:
        migrate.upgrade(conn, "0004")
        attendees, emails = old_rows()
        conn.execute(
            text("INSERT INTO attendees VALUES (:tenant, :id, :name, :created_us)"), attendees
        )
        conn.execute(
            text("INSERT INTO attendee_emails VALUES (:tenant, :email, :attendee_id)"), emails
        )
    yield url, engine
    engine.dispose()


@pytest.fixture
async def upgraded(database: tuple[str, Engine]) -> AsyncIterator[Server]:
    """The real server on the old database: opening it migrates it to head."""
    url, db = database
    config = Config(db_url=url)
    clock = FixedClock(START)
    services = await bootstrap(config, store=await open_store(config), clock=clock)
    app = build_app(services, config, sweep=False)
    async with serving(app) as base, aiohttp.ClientSession() as session:
        yield Server(services, clock, db, base, session)


def hold(attendee: str, workflow: str = "wf", day: int = 14) -> dict[str, Any]:
    start = f"2030-10-{day}T14:00:00Z"
    return {
        "workflow_id": workflow,
        "attendees": [attendee],
        "start": start,
        "duration_minutes": 30,
    }


def rows(db: Engine, query: str) -> set[tuple[Any, ...]]:
    with db.connect() as conn:
        return {tuple(r) for r in conn.execute(text(query))}


async def test_every_attendee_keeps_its_id_and_aliases_take_the_normal_form(
    upgraded: Server,
) -> None:
    attendees, _ = old_rows()
    assert rows(upgraded.db, "SELECT tenant, id, created_us FROM attendees") == {
        (a["tenant"], a["id"], a["created_us"]) for a in attendees
    }
    assert rows(upgraded.db, "SELECT tenant, email, attendee_id FROM attendee_emails") == {
        ("acme", "josé@example.com", ID["jose"]),  # the normal spelling's attendee
        ("acme", "ana@xn--bcher-kva.example", ID["ana_a"]),
        ("acme", "diana@example.com", ID["diana_root"]),  # the oldest
        ("acme", "bob@x_y.example", ID["bob"]),  # refused by the new rule: left alone
        ("acme", "zoë@example.com", ID["zoe"]),
        ("acme", "alex@example.com", ID["alex"]),
        ("acme", "kim@example.com", KIM),
        ("other", "josé@example.com", ID["other_jose"]),
    }
    legacy = "SELECT tenant, email, attendee_id, normalized, outcome FROM legacy_attendee_emails"
    assert rows(upgraded.db, legacy) == {
        ("acme", nfd("josé@example.com"), ID["jose_nfd"], "josé@example.com", "merged"),
        ("acme", "ana@bücher.example", ID["ana_u"], "ana@xn--bcher-kva.example", "merged"),
        ("acme", "di\u0307ana@example.com", ID["diana_dot"], "diana@example.com", "merged"),
        ("acme", "diana@example.com.", ID["diana_root"], "diana@example.com", "renamed"),
        ("acme", "bob@x_y.example", ID["bob"], None, "refused"),
        ("acme", nfd("zoë@example.com"), ID["zoe"], "zoë@example.com", "renamed"),
        ("acme", "kim@example.com.", KIM, "kim@example.com", "renamed"),
        ("other", nfd("josé@example.com"), ID["other_jose"], "josé@example.com", "renamed"),
    }


@pytest.mark.parametrize(
    ("tenant", "spelling", "who"),
    [
        ("acme", "josé@example.com", "jose"),
        ("acme", nfd("JOSÉ@EXAMPLE.COM."), "jose"),
        ("acme", "ana@bücher.example", "ana_a"),
        ("acme", "ANA@XN--BCHER-KVA.EXAMPLE.", "ana_a"),
        ("acme", "DİANA@example.com", "diana_root"),
        ("acme", "diana@example.com", "diana_root"),
        ("acme", "zoë@example.com", "zoe"),
        ("acme", nfd("zoë@example.com"), "zoe"),
        ("other", "JOSÉ@example.com", "other_jose"),
    ],
)
async def test_every_spelling_books_the_attendee_it_names(
    upgraded: Server, tenant: str, spelling: str, who: str
) -> None:
    agent = await upgraded.key(tenant=tenant)
    booked = await agent.create(hold(spelling))
    assert booked.status == 201, booked.json
    assert booked.json["attendees"] == [ID[who]]
    assert rows(upgraded.db, "SELECT count(*) FROM attendees") == {(len(PEOPLE) + 1,)}


async def test_attendees_no_email_names_stay_reachable_by_id(upgraded: Server) -> None:
    agent = await upgraded.key()
    refused = await agent.create(hold("bob@x_y.example"))
    assert refused.json["code"] == "invalid_email_domain"
    for n, who in enumerate(("bob", "jose_nfd", "diana_dot")):
        booked = await agent.create(hold(ID[who], f"wf-{n}", day=15))
        assert booked.json["attendees"] == [ID[who]]


async def test_putting_the_same_document_again_names_the_same_attendee(upgraded: Server) -> None:
    """Without an id, a PUT takes the attendee its first email resolves to.

    ``zoe`` was put before 0005 from the decomposed spelling, so its id derives
    from that spelling; the same document sent again updates it, not 409.
    """
    admin = await upgraded.key(agent="ops", role="admin")
    again = await admin.post("/v1/attendees", {"name": "Zoë", "emails": [nfd("zoë@example.com")]})
    assert again.status == 200, again.json
    assert again.json == {"id": ID["zoe"], "name": "Zoë", "emails": ["zoë@example.com"]}


def test_the_downgrade_puts_the_old_spellings_back(database: tuple[str, Engine]) -> None:
    _, db = database
    with db.begin() as conn:
        migrate.upgrade(conn, "0005")
    with db.begin() as conn:
        config = AlembicConfig()
        config.set_main_option("script_location", str(Path(migrate.__file__).parent / "migrations"))
        config.attributes["connection"] = conn
        command.downgrade(config, "0004")
    _, before = old_rows()
    found = rows(db, "SELECT tenant, email, attendee_id FROM attendee_emails")
    assert {(e["tenant"], e["email"], e["attendee_id"]) for e in before} <= found
    assert rows(db, "SELECT version_num FROM alembic_version") == {("0004",)}
