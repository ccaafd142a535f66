"""Stored emails take the one-mailbox-one-string form (engine/rules/emails.py).

Before, an email was trimmed and case-folded only, so ``josé`` composed and
decomposed, ``bücher.example`` and ``xn--bcher-kva.example``, a trailing dot
and ``DİANA``/``diana`` were stored as different aliases, often of different
attendees. Every alias is re-normalized; attendee ids never change (holds,
keys and calendar bindings name attendees by id):

- An alias whose stored spelling is already the normal form stays as it is.
- An alias whose spelling changes is rewritten to the normal form, pointing at
  the same attendee.
- When several aliases now meet in one normal form and point at different
  attendees (one mailbox was two attendees), one attendee keeps the alias:
  the one the already-normal spelling named, if one did (requests spelled the
  normal way keep resolving as they did), else the oldest attendee (by
  creation time, then id). The other attendees keep their rows and ids, and
  their holds; they stay reachable by id, but no email names them any more.
- A stored alias the new rule refuses (a domain IDNA 2008 does not allow,
  such as ``x_y.example``) stays as it is: no request can spell it now, its
  attendee is reachable by id.

Nothing is lost: every alias rewritten, merged or refused is kept in
``legacy_attendee_emails`` with its old spelling, its attendee, its normal
form and the outcome (``renamed``, ``merged``, ``refused``), for operators to
review. The downgrade puts the old spellings back as aliases of their old
attendees (the normal forms stay: they name the same attendees).

The rule is the engine's: a later change of it comes with its own migration.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from alembic import op

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.emails import normalize_email

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_S = sa.String
_LEGACY = "legacy_attendee_emails"

_attendees = sa.table("attendees", sa.column("tenant"), sa.column("id"), sa.column("created_us"))
_emails = sa.table("attendee_emails", sa.column("tenant"), sa.column("email"),
                   sa.column("attendee_id"))  # fmt: skip
_legacy = sa.table(_LEGACY, sa.column("tenant"), sa.column("email"), sa.column("attendee_id"),
                   sa.column("normalized"), sa.column("outcome"))  # fmt: skip


# NamedTuples, not dataclasses: Alembic loads this file outside sys.modules,
# where a dataclass cannot resolve its own module.
class _Alias(NamedTuple):
    tenant: str
    email: str
    attendee_id: str
    created_us: int | None  # None: an alias of an attendee row that is missing


class _Plan(NamedTuple):
    deleted: list[dict[str, Any]]
    added: list[dict[str, Any]]
    legacy: list[dict[str, Any]]


def upgrade() -> None:
    op.create_table(
        _LEGACY,
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("email", _S(254), primary_key=True),
        sa.Column("attendee_id", _S(128), nullable=False),
        sa.Column("normalized", _S(254), nullable=True),
        sa.Column("outcome", _S(16), nullable=False),
    )
    bind = op.get_bind()
    plan = _plan(_aliases(bind))
    if plan.deleted:
        gone = sa.delete(_emails).where(
            _emails.c.tenant == sa.bindparam("w_tenant"),
            _emails.c.email == sa.bindparam("w_email"),
        )
        bind.execute(gone, plan.deleted)
    if plan.added:
        bind.execute(sa.insert(_emails), plan.added)
    if plan.legacy:
        bind.execute(sa.insert(_legacy), plan.legacy)


def downgrade() -> None:
    bind = op.get_bind()
    old = bind.execute(
        sa.select(_legacy.c.tenant, _legacy.c.email, _legacy.c.attendee_id).where(
            _legacy.c.outcome != "refused"
        )
    ).all()
    if old:
        rows = [{"tenant": t, "email": e, "attendee_id": a} for t, e, a in old]
        bind.execute(sa.insert(_emails), rows)
    op.drop_table(_LEGACY)


def _aliases(bind: sa.Connection) -> list[_Alias]:
    joined = _emails.outerjoin(
        _attendees,
        sa.and_(_attendees.c.tenant == _emails.c.tenant, _attendees.c.id == _emails.c.attendee_id),
    )
    query = sa.select(
        _emails.c.tenant, _emails.c.email, _emails.c.attendee_id, _attendees.c.created_us
    ).select_from(joined)
    return [_Alias(*row) for row in bind.execute(query)]


def _plan(aliases: Iterable[_Alias]) -> _Plan:
    plan = _Plan([], [], [])
    groups: dict[tuple[str, str], list[_Alias]] = defaultdict(list)
    for alias in aliases:
        try:
            groups[(alias.tenant, normalize_email(alias.email))].append(alias)
        except ValidationFailed:
            plan.legacy.append(_legacy_row(alias, None, "refused"))
    for (tenant, normal), members in sorted(groups.items()):
        if [m.email for m in members] == [normal]:
            continue
        winner = _winner(normal, members)
        if all(m.email != normal for m in members):
            plan.added.append({"tenant": tenant, "email": normal, "attendee_id": winner})
        for m in members:
            if m.email != normal:
                plan.deleted.append({"w_tenant": tenant, "w_email": m.email})
                outcome = "renamed" if m.attendee_id == winner else "merged"
                plan.legacy.append(_legacy_row(m, normal, outcome))
    return plan


def _winner(normal: str, members: Sequence[_Alias]) -> str:
    """The attendee the normal form names from now on."""
    for m in members:
        if m.email == normal:
            return m.attendee_id
    oldest = min(members, key=lambda m: (m.created_us is None, m.created_us or 0, m.attendee_id))
    return oldest.attendee_id


def _legacy_row(alias: _Alias, normal: str | None, outcome: str) -> dict[str, Any]:
    return {
        "tenant": alias.tenant,
        "email": alias.email,
        "attendee_id": alias.attendee_id,
        "normalized": normal,
        "outcome": outcome,
    }
