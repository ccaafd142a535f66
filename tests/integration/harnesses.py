"""Calendars reached behind slotward's back, for the conformance kit
(slotward.testing.providers ``CalendarHarness``): a directory of .ics files
(the memcal plugin's calendar), one .ics file (the ICS adapter's) and a
calendar collection on a real Radicale (the CalDAV adapter's).

They parse with icalendar. The file ones write each file whole and atomically
(a temporary file renamed over it), as a calendar app saving its file would:
an adapter never reads half a file. The Radicale one speaks plain HTTP to the
server (tests/radicale.py), as another CalDAV client would.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import icalendar

from slotward.engine.calendars import Connection
from tests.radicale import RadicaleServer

__all__ = ["CalDavHarness", "DirectoryHarness", "IcsFileHarness", "masters"]

_EMPTY = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//slotward tests//EN\r\nEND:VCALENDAR\r\n"


def masters(data: bytes | str) -> list[tuple[str, str]]:
    """``(uid, status)`` of each event in ``data``: its master (no RECURRENCE-ID)."""
    calendar = icalendar.Calendar.from_ical(data)
    return [
        (str(event["UID"]), str(event.get("STATUS", "")))
        for event in calendar.walk("VEVENT")
        if "RECURRENCE-ID" not in event
    ]


def _uid(ics: str) -> str:
    events = icalendar.Calendar.from_ical(ics).walk("VEVENT")
    return str(events[0]["UID"])


def _write(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".harness-")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


class DirectoryHarness:
    """A calendar as a directory of ``<uid>.ics`` files."""

    def __init__(self, folder: Path, timezone: str = "UTC") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._connection = Connection(url=folder.as_uri(), timezone=timezone)

    @property
    def connection(self) -> Connection:
        return self._connection

    def _files(self) -> list[Path]:
        return sorted(p for p in self.folder.glob("*.ics") if not p.name.startswith("."))

    async def add_external(self, ics: str) -> None:
        name = quote(f"external-{_uid(ics)}", safe="@._-") + ".ics"
        _write(self.folder / name, ics.encode())

    async def remove_external(self, uid: str) -> None:
        for path in self._files():
            if any(found == uid for found, _ in masters(path.read_bytes())):
                path.unlink()

    async def events(self) -> list[tuple[str, str]]:
        return sorted(e for path in self._files() for e in masters(path.read_bytes()))


class IcsFileHarness:
    """A calendar as one .ics file (as a calendar app exports it), read through a
    ``file://`` URL: events are added by rewriting the file with theirs merged in."""

    def __init__(self, path: Path, timezone: str = "UTC") -> None:
        self.path = path
        _write(path, _EMPTY.encode())
        self._connection = Connection(url=path.as_uri(), timezone=timezone)

    @property
    def connection(self) -> Connection:
        return self._connection

    def _calendar(self) -> Any:
        return icalendar.Calendar.from_ical(self.path.read_bytes())

    async def add_external(self, ics: str) -> None:
        calendar = self._calendar()
        zones = {str(z["TZID"]) for z in calendar.walk("VTIMEZONE")}
        for component in icalendar.Calendar.from_ical(ics).subcomponents:
            if component.name == "VTIMEZONE" and str(component["TZID"]) in zones:
                continue
            calendar.add_component(component)
        _write(self.path, calendar.to_ical())

    async def remove_external(self, uid: str) -> None:
        calendar = self._calendar()
        calendar.subcomponents = [
            c for c in calendar.subcomponents if c.name != "VEVENT" or str(c["UID"]) != uid
        ]
        _write(self.path, calendar.to_ical())

    async def events(self) -> list[tuple[str, str]]:
        return sorted(masters(self.path.read_bytes()))


class CalDavHarness:
    """A calendar collection on a real Radicale, as ``user`` (with their password
    when the server checks them)."""

    def __init__(self, server: RadicaleServer, user: str) -> None:
        self.server = server
        self.user = user
        self.url = server.calendar(user=user)
        password = server.users.get(user) if server.auth == "htpasswd" else None
        self._connection = Connection(url=self.url, username=user, password=password)

    @property
    def connection(self) -> Connection:
        return self._connection

    async def add_external(self, ics: str) -> None:
        name = f"external-{uuid.uuid4().hex}.ics"  # another client's name, not the UID
        await asyncio.to_thread(self.server.put, self.url, name, ics.encode(), self.user)

    async def remove_external(self, uid: str) -> None:
        for href, found in await asyncio.to_thread(self._resources):
            if any(event_uid == uid for event_uid, _ in found):
                await asyncio.to_thread(self.server.delete, href, self.user)

    async def events(self) -> list[tuple[str, str]]:
        resources = await asyncio.to_thread(self._resources)
        return sorted(event for _, found in resources for event in found)

    def _resources(self) -> list[tuple[str, list[tuple[str, str]]]]:
        found = []
        for href in self.server.hrefs(self.url, self.user):
            data = self.server.get(href, self.user)
            if data is not None:
                found.append((href, masters(data)))
        return found
