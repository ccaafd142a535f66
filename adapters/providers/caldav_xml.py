"""The WebDAV and CalDAV XML the CalDAV adapter sends, and what it reads of the answers.

Requests: ``sync-collection`` (RFC 6578), ``calendar-multiget`` and a
``calendar-query`` over a time range (RFC 4791). Answers are a calendar
server's, so hostile: parsed with defusedxml (no DTD, no entities, no
external references), after the caller has capped their size; anything that
does not parse is :class:`~slotward.engine.calendars.CalendarInvalid`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from urllib.parse import urlsplit
from xml.etree.ElementTree import Element
from xml.sax.saxutils import escape

from defusedxml import ElementTree as SafeTree  # type: ignore[import-untyped]  # ships no stubs

from slotward.engine.calendars import CalendarInvalid, Window

__all__ = [
    "DavResponse",
    "Multistatus",
    "multiget_body",
    "parse_multistatus",
    "precondition",
    "query_body",
    "sync_body",
]

_DAV: Final = "{DAV:}"
_CALDAV: Final = "{urn:ietf:params:xml:ns:caldav}"
_HEAD: Final = '<?xml version="1.0" encoding="utf-8"?>\n'
_NS: Final = 'xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav"'
_STATUS: Final = re.compile(r"^\s*HTTP/\d(?:\.\d)?\s+(\d{3})")


@dataclass(frozen=True)
class DavResponse:
    """One ``D:response`` of a multistatus: a member's href (its path), the status of
    the member itself (``D:status``: 404 for a member removed since a sync token)
    or of its properties (the ``D:propstat`` that holds them), its ETag and its
    calendar data when asked for."""

    href: str
    status: int | None
    etag: str | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class Multistatus:
    responses: tuple[DavResponse, ...]
    sync_token: str | None = None


def sync_body(token: str | None) -> bytes:
    """A ``sync-collection`` REPORT: the members changed since ``token`` (all, for None)."""
    sent = f"<D:sync-token>{escape(token)}</D:sync-token>" if token else "<D:sync-token/>"
    return (
        f"{_HEAD}<D:sync-collection {_NS}>{sent}<D:sync-level>1</D:sync-level>"
        "<D:prop><D:getetag/></D:prop></D:sync-collection>"
    ).encode()


def multiget_body(hrefs: Sequence[str]) -> bytes:
    """A ``calendar-multiget`` REPORT of these members' ETags and data."""
    listed = "".join(f"<D:href>{escape(h)}</D:href>" for h in hrefs)
    return (
        f"{_HEAD}<C:calendar-multiget {_NS}><D:prop><D:getetag/><C:calendar-data/></D:prop>"
        f"{listed}</C:calendar-multiget>"
    ).encode()


def query_body(window: Window) -> bytes:
    """A ``calendar-query`` REPORT: the events overlapping ``window``, with their data."""
    return (
        f"{_HEAD}<C:calendar-query {_NS}><D:prop><D:getetag/><C:calendar-data/></D:prop>"
        '<C:filter><C:comp-filter name="VCALENDAR"><C:comp-filter name="VEVENT">'
        f'<C:time-range start="{_utc(window.start)}" end="{_utc(window.end)}"/>'
        "</C:comp-filter></C:comp-filter></C:filter></C:calendar-query>"
    ).encode()


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def parse_multistatus(data: bytes) -> Multistatus:
    """The responses of a 207 answer; CalendarInvalid if it is not a multistatus."""
    root = _parse(data)
    if root.tag != f"{_DAV}multistatus":
        raise CalendarInvalid("the server's answer is not a WebDAV multistatus")
    responses = tuple(
        response
        for element in root.findall(f"{_DAV}response")
        if (response := _response(element)) is not None
    )
    token = root.findtext(f"{_DAV}sync-token")
    return Multistatus(responses, token.strip() if token and token.strip() else None)


def precondition(data: bytes) -> str | None:
    """The local name of the first precondition in a ``D:error`` body
    (``valid-sync-token``, ``supported-report``), or None."""
    try:
        root = _parse(data)
    except CalendarInvalid:
        return None
    if root.tag != f"{_DAV}error" or len(root) == 0:
        return None
    return str(root[0].tag).rsplit("}", 1)[-1]


def _parse(data: bytes) -> Element:
    try:
        root = SafeTree.fromstring(data, forbid_dtd=True)
    except Exception as exc:  # defusedxml's refusals and expat's errors alike
        kind = type(exc).__name__
        raise CalendarInvalid(f"the server's answer is not well-formed XML ({kind})") from None
    if not isinstance(root, Element):
        raise CalendarInvalid("the server's answer is not XML")
    return root


def _response(element: Element) -> DavResponse | None:
    href = element.findtext(f"{_DAV}href")
    if not href or not href.strip():
        return None
    try:
        path = urlsplit(href.strip()).path
    except ValueError:
        return None
    status = _status(element.findtext(f"{_DAV}status"))
    if status is not None:
        return DavResponse(path, status)
    for propstat in element.findall(f"{_DAV}propstat"):
        code = _status(propstat.findtext(f"{_DAV}status"))
        prop = propstat.find(f"{_DAV}prop")
        if prop is None or code is None or not 200 <= code < 300:
            continue
        etag = prop.findtext(f"{_DAV}getetag")
        text = prop.findtext(f"{_CALDAV}calendar-data")
        data = text.encode() if text and text.strip() else None
        return DavResponse(path, code, etag.strip() if etag else None, data)
    return DavResponse(path, None)


def _status(text: str | None) -> int | None:
    match = _STATUS.match(text or "")
    return int(match.group(1)) if match else None
