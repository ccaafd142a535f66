"""A local Radicale (a real CalDAV server) for ``slotward bench providers``.

Radicale is a development dependency (the ``dev`` extra), not one of the
server's: the benchmark says so and stops (exit 2) when it is not installed.
It runs as ``python -m radicale`` on a free loopback port with ``auth none``
(anyone on loopback may read and write), its storage, config and log in the
run's temporary directory, and is always stopped. Its log is kept at level
``info``, one line per request: :meth:`Radicale.requests` counts them by
method, which is how the benchmark knows whether a claim read the calendar.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from slotward.benchmarks.cpu import cpu_seconds
from slotward.benchmarks.servers import ServerFailed, free_port

__all__ = ["MISSING_RADICALE", "Radicale", "radicale_server", "require_radicale"]

MISSING_RADICALE = (
    "slotward bench providers needs Radicale, a development dependency that is not "
    "installed: pip install 'radicale>=3.5' (or pip install -e '.[dev]')"
)
_START_SECONDS = 30.0
_REQUEST = re.compile(rb"\] ([A-Z]+) request for ")
_QUERY = b"""<?xml version="1.0" encoding="utf-8"?>
<C:calendar-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
  <D:prop><D:getetag/><C:calendar-data/></D:prop>
  <C:filter><C:comp-filter name="VCALENDAR"><C:comp-filter name="VEVENT"/>
  </C:comp-filter></C:filter>
</C:calendar-query>"""


@dataclass
class Radicale:
    """A running Radicale: its root URL, and what it was asked."""

    port: int
    log: Path
    pid: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def request(self, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:  # fmt: skip
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def calendar(self, path: str, ics: bytes) -> str:
        """A new calendar collection at ``path`` ("/user/name/") holding every event of
        the VCALENDAR ``ics`` (one PUT of the whole collection); its URL."""
        self.request("MKCOL", "/" + path.strip("/").split("/")[0] + "/")  # 201, or 405: there
        status, body = self.request("PUT", path, ics, {"Content-Type": "text/calendar"})
        if status not in (201, 204):
            raise ServerFailed(f"Radicale refused the calendar {path}: {status} {body[:300]!r}")
        return f"http://127.0.0.1:{self.port}{path}"

    def query(self, calendar_url: str) -> float:
        """Every event of the calendar, asked once (a calendar-query REPORT): Radicale
        parses and caches a collection's items on its first read, which is its own
        cost, not a reader's. The seconds it took."""
        started = time.perf_counter()
        status, _ = self.request("REPORT", urlsplit(calendar_url).path, _QUERY,
                                    {"Depth": "1", "Content-Type": "application/xml"})  # fmt: skip
        if status != 207:
            raise ServerFailed(f"Radicale refused the query of {calendar_url}: {status}")
        return time.perf_counter() - started

    def requests(self) -> Counter[str]:
        """The requests Radicale has logged so far, by method."""
        return Counter(m.decode() for m in _REQUEST.findall(self.log.read_bytes()))

    def cpu_seconds(self) -> float:
        """Radicale's user + system CPU seconds so far."""
        return cpu_seconds(self.pid)


@contextlib.contextmanager
def radicale_server(workdir: Path) -> Iterator[Radicale]:
    """Radicale on a free loopback port, its files under ``workdir``; always stopped."""
    require_radicale()
    root = workdir / "radicale"
    (root / "collections").mkdir(parents=True)
    port = free_port()
    config = root / "config"
    config.write_text(
        f"[server]\nhosts = 127.0.0.1:{port}\n\n"
        "[auth]\ntype = none\n\n"
        "[rights]\ntype = authenticated\n\n"
        f"[storage]\nfilesystem_folder = {root / 'collections'}\n\n"
        "[web]\ntype = none\n\n"
        "[logging]\nlevel = info\n"
    )
    log = root / "radicale.log"
    with log.open("wb") as out:  # a file, never a pipe nobody drains
        proc = subprocess.Popen(
            [sys.executable, "-m", "radicale", "--config", str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=root,
        )  # fmt: skip
    try:
        server = Radicale(port, log, proc.pid)
        _wait_ready(server, proc)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def require_radicale() -> None:
    """Raise :class:`ServerFailed` saying how to install Radicale when it is not."""
    if importlib.util.find_spec("radicale") is None:
        raise ServerFailed(MISSING_RADICALE)


def _wait_ready(server: Radicale, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = server.log.read_text(errors="replace")[-3000:]
            raise ServerFailed(f"Radicale did not start; its output:\n{tail}")
        try:
            status, _ = server.request("OPTIONS", "/")
        except OSError:
            time.sleep(0.05)
            continue
        if status < 500:
            return
        time.sleep(0.05)
