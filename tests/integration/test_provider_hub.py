"""The provider hub over a real SQLite file: what an adapter's failure does to a binding.

The adapters here are deliberately broken stand-ins for a third-party plugin's
bugs (no real calendar is involved: the point is what slotward does when the
adapter itself misbehaves).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slotward.api.bootstrap import Services, bootstrap
from slotward.api.config import Config
from slotward.api.providers import ProviderHub
from slotward.engine.calendars import (
    BusyRead,
    CalendarBinding,
    CalendarEvent,
    Capabilities,
    Connection,
    Window,
)
from slotward.engine.clock import FixedClock
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.delivery import Outcome

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)


class _Buggy:
    """A plugin whose read raises what no adapter should (a KeyError)."""

    name = "buggy"
    capabilities = Capabilities(writes=False, credentials=False, incremental=False)

    async def busy(self, conn: Connection, window: Window, cursor: str | None) -> BusyRead:
        raise KeyError("DTSTART")

    async def put_event(self, conn: Connection, event: CalendarEvent) -> Outcome:
        return Outcome(None, "read-only")

    async def delete_event(self, conn: Connection, uid: str) -> Outcome:
        return Outcome(None, "read-only")

    async def close(self) -> None:
        return None


@pytest.fixture
async def svc(tmp_path: Path) -> AsyncIterator[Services]:
    config = Config(db_url=f"sqlite+aiosqlite:///{tmp_path / 'hub.db'}")
    made = await bootstrap(config, clock=FixedClock(T0))
    hub = ProviderHub({"buggy": _Buggy()}, made.box, config.providers())
    yield replace(made, providers=hub)
    await made.providers.close()
    await made.store.close()


async def test_an_adapter_that_raises_puts_its_binding_in_error(svc: Services) -> None:
    binding = CalendarBinding(
        tenant="acme", attendee="att_a", provider="buggy", url="https://cal.example.com/a.ics",
        created_at=T0, updated_at=T0,
    )  # fmt: skip

    def put(uow: UnitOfWork) -> None:
        with uow:
            uow.calendars.put(binding)
            uow.commit()

    await svc.store.write(put)
    stored, error = await svc.providers.read(svc, binding)
    assert error is not None
    assert str(error) == "the adapter failed: KeyError"
    assert (stored.status, stored.error, stored.failures) == ("error", str(error), 1)
