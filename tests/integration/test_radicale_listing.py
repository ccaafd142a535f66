"""The Radicale test helper lists a calendar while another client deletes from it.

The provider tests poll a calendar's listing (RadicaleServer.hrefs) while
slotward's calendar writer deletes the event of a hold that expired. A
listing that asked for the calendar's getetag failed with Radicale's 500 in
some 1.6% of such listings (Radicale computes it outside its storage lock):
one end-to-end run failed so. This holds the helper to a listing that cannot.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from tests.radicale import RadicaleServer

LISTINGS = 300  # at 1.6% a getetag listing fails within these with 99% odds
JOIN_WAIT = 30.0  # a guard against a hang, never a timing assertion


def _event(uid: str) -> bytes:
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//slotward tests//EN\r\n"
        f"BEGIN:VEVENT\r\nUID:{uid}\r\nDTSTAMP:20300101T000000Z\r\n"
        "DTSTART:20300101T100000Z\r\nDTEND:20300101T110000Z\r\nSUMMARY:churn\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    ).encode()


def test_a_listing_survives_deletes_made_while_it_runs(radicale: RadicaleServer) -> None:
    calendar = radicale.calendar()
    path = urlsplit(calendar).path
    kept = [radicale.put(calendar, f"kept-{i}.ics", _event(f"kept-{i}")) for i in range(20)]
    done = threading.Event()
    churned: list[int] = []

    def churn() -> None:
        n = 0
        while not done.is_set():
            href = radicale.put(calendar, f"churn-{n}.ics", _event(f"churn-{n}"))
            assert radicale.delete(href) in (200, 204)
            n += 1
        churned.append(n)

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        listings = [radicale.hrefs(calendar) for _ in range(LISTINGS)]
    finally:
        done.set()
        writer.join(JOIN_WAIT)
    assert churned, "the writer thread failed"
    assert churned[0] > 0  # the deletes did run beside the listings
    for found in listings:
        assert set(kept) <= set(found)
        assert all(h.startswith(path) for h in found)
