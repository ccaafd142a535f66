"""A real Radicale CalDAV server for the provider tests.

Started from the venv's ``radicale`` (3.5+, which refuses every request unless
an auth type is set) on a free loopback port, with its config and storage in
a temporary folder. ``stop()`` and ``kill()`` end the process and keep the
storage, ``restart()`` brings it back on the same port, ``close()`` ends it
all. A reaper (tests/reaper.py, as tests/pgserver.py uses it) kills the
process and removes the folder when the test run dies first, kill -9
included; the pid it kills is read from a file that ``restart()`` rewrites.

The helpers (``calendar``, ``put``, ``delete``, ``hrefs``, ``get``) talk plain
HTTP to the server, past any adapter: they make the calendars the tests read
and the external events the adapters must see. ``vevent`` writes one.
"""

from __future__ import annotations

import base64
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC as _UTC
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Literal
from urllib.parse import quote, urlsplit
from xml.etree import ElementTree

__all__ = ["BERLIN", "RadicaleServer", "start_radicale", "vevent"]

AuthType = Literal["none", "htpasswd"]
DEFAULT_USER = "test"
_START_TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RadicaleServer:
    """One Radicale process (or none, between ``stop()`` and ``restart()``)."""

    root: Path
    port: int
    auth: AuthType
    users: dict[str, str]
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _reaper: int | None = field(default=None, repr=False)
    _reaper_process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The server's root, with a trailing slash."""
        return f"http://127.0.0.1:{self.port}/"

    @property
    def pid_file(self) -> Path:
        return self.root / "radicale.pid"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- the process ---------------------------------------------------------------

    def start(self) -> None:
        """Start the process and wait until it answers HTTP."""
        if self.running:
            return
        log = (self.root / "radicale.log").open("ab")
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "radicale", "--config", str(self.root / "config")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.root,
            )  # fmt: skip
        finally:
            log.close()
        self.pid_file.write_text(str(self._process.pid))
        self._wait_until_up()

    def stop(self) -> None:
        """End the process (SIGTERM, then SIGKILL); the storage stays."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """End the process at once (SIGKILL); the storage stays."""
        self._end(signal.SIGKILL)

    def restart(self) -> None:
        """Bring a stopped or killed server back on the same port and storage."""
        self.stop()
        self.start()

    def close(self) -> None:
        """End the process, remove the folder and dismiss the reaper."""
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
        if self._reaper is not None:
            os.close(self._reaper)  # the reaper wakes, finds no pid file, and exits
            self._reaper = None
        if self._reaper_process is not None:
            self._reaper_process.wait(timeout=130)
            self._reaper_process = None

    def __enter__(self) -> RadicaleServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def watch(self) -> None:
        """Start the reaper that kills this server if the test run dies first."""
        read, write = os.pipe()  # not inherited by the programs the tests start
        reap = [sys.executable, "-m", "tests.radicale", "--reap", str(self.pid_file)]
        self._reaper_process = subprocess.Popen(
            [sys.executable, "-m", "tests.reaper", str(self.root), *reap],
            stdin=read, start_new_session=True, cwd=Path(__file__).resolve().parent.parent,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(read)
        self._reaper = write

    def _end(self, sig: signal.Signals) -> None:
        process, self._process = self._process, None
        self.pid_file.unlink(missing_ok=True)
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise RuntimeError(f"radicale exited at start:\n{self.log()}")
            try:
                status, _, _ = self.request("OPTIONS", "/", user="")
            except OSError:
                time.sleep(0.05)  # waiting for a real process to open its port
                continue
            if status < 500:
                return
        self.kill()
        raise RuntimeError(f"radicale did not answer within {_START_TIMEOUT:g} s:\n{self.log()}")

    def log(self) -> str:
        path = self.root / "radicale.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    # -- plain HTTP ------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        user: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request to the server (``path`` absolute, or a URL on it), as ``user``
        (None: the first of ``users``; "": no credentials)."""
        parts = urlsplit(path)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        sent = dict(headers or {})
        user = self._user(user)
        if self.auth == "htpasswd" and user:
            token = base64.b64encode(f"{user}:{self.users[user]}".encode()).decode()
            sent["Authorization"] = f"Basic {token}"
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(method, target, body=body, headers=sent)
            response = connection.getresponse()
            data = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            connection.close()

    def _user(self, user: str | None) -> str:
        return next(iter(self.users)) if user is None else user

    def calendar(self, name: str | None = None, user: str | None = None) -> str:
        """A new, empty calendar collection of ``user`` (MKCALENDAR): its URL, with a
        trailing slash."""
        principal = f"/{quote(self._user(user))}/"
        self.request("MKCOL", principal, user=user)  # 201, or 405 when it is there already
        path = f"{principal}{name or 'cal-' + uuid.uuid4().hex[:12]}/"
        status, _, body = self.request("MKCALENDAR", path, _MKCALENDAR, _XML, user)
        if status != 201:
            raise RuntimeError(f"MKCALENDAR {path}: {status} {body[:300]!r}\n{self.log()}")
        return f"http://127.0.0.1:{self.port}{path}"

    def put(self, calendar_url: str, name: str, ics: bytes, user: str | None = None) -> str:
        """PUT ``ics`` as ``name`` in the calendar (created or replaced): its href."""
        href = urlsplit(calendar_url).path + quote(name)
        status, _, body = self.request("PUT", href, ics, {"Content-Type": _ICS}, user)
        if status not in (201, 204):
            raise RuntimeError(f"PUT {href}: {status} {body[:300]!r}\n{self.log()}")
        return href

    def delete(self, href: str, user: str | None = None) -> int:
        """DELETE a resource (an href or URL on the server): the status."""
        status, _, _ = self.request("DELETE", href, user=user)
        return status

    def get(self, href: str, user: str | None = None) -> bytes | None:
        """A resource's body, or None when it is not there."""
        status, _, body = self.request("GET", href, user=user)
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"GET {href}: {status}\n{self.log()}")
        return body

    def hrefs(self, calendar_url: str, user: str | None = None) -> list[str]:
        """The hrefs of the resources in the calendar (PROPFIND, depth 1), sorted."""
        path = urlsplit(calendar_url).path
        status, _, body = self.request("PROPFIND", path, _PROPFIND, {**_XML, "Depth": "1"}, user)
        if status != 207:
            raise RuntimeError(f"PROPFIND {path}: {status}\n{self.log()}")
        found = ElementTree.fromstring(body).iter("{DAV:}href")  # our own server's answer
        return sorted(h.text for h in found if h.text and h.text.rstrip("/") != path.rstrip("/"))


def start_radicale(auth: AuthType = "none", users: dict[str, str] | None = None) -> RadicaleServer:
    """A running Radicale on a free loopback port; the caller must ``close()`` it.

    ``auth="htpasswd"`` checks ``users`` (name -> password, stored plain in
    the server's users file); ``auth="none"`` lets anyone in. Any
    authenticated user may create collections under its own path and read
    and write them (``rights.type = authenticated``).
    """
    root = Path(tempfile.mkdtemp(prefix="slotward-radicale-"))
    accounts = dict(users or {DEFAULT_USER: "secret"})
    server = RadicaleServer(root, _free_port(), auth, accounts)
    server.watch()
    try:
        _configure(server)
        server.start()
    except BaseException:
        server.close()  # no half-started server or folder left behind
        raise
    return server


def _configure(server: RadicaleServer) -> None:
    root = server.root
    (root / "users").write_text("".join(f"{u}:{p}\n" for u, p in server.users.items()))
    (root / "collections").mkdir()
    (root / "config").write_text(
        f"""[server]
hosts = 127.0.0.1:{server.port}

[auth]
type = {server.auth}
htpasswd_filename = {root / "users"}
htpasswd_encryption = plain
delay = 0

[rights]
type = authenticated

[storage]
filesystem_folder = {root / "collections"}

[web]
type = none

[logging]
level = warning
mask_passwords = True
"""
    )


_ICS = "text/calendar; charset=utf-8"
_XML = {"Content-Type": "application/xml; charset=utf-8"}
_MKCALENDAR = b"""<?xml version="1.0" encoding="utf-8"?>
<C:mkcalendar xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
  <D:set><D:prop>
    <C:supported-calendar-component-set><C:comp name="VEVENT"/></C:supported-calendar-component-set>
  </D:prop></D:set>
</C:mkcalendar>"""
# The listing asks for each resource's type alone. Radicale (3.9) writes a
# PROPFIND's properties after it lets go of its storage lock, and a calendar's
# getetag hashes every item file then: one deleted meanwhile fails the whole
# listing with a 500 (FileNotFoundError). Types come from what was read under
# the lock. tests/integration/test_radicale_listing.py holds it to that.
_PROPFIND = b"""<?xml version="1.0" encoding="utf-8"?>
<D:propfind xmlns:D="DAV:"><D:prop><D:resourcetype/></D:prop></D:propfind>"""

# Europe/Berlin since 1996: CET, CEST from the last Sunday of March to the last of October.
BERLIN = """BEGIN:VTIMEZONE
TZID:Europe/Berlin
BEGIN:DAYLIGHT
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
TZNAME:CEST
DTSTART:19700329T020000
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU
END:DAYLIGHT
BEGIN:STANDARD
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
TZNAME:CET
DTSTART:19701025T030000
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU
END:STANDARD
END:VTIMEZONE
"""


def vevent(
    uid: str,
    start: datetime,
    end: datetime,
    *,
    tzid: str | None = None,
    rrule: str | None = None,
    status: str | None = None,
    transparent: bool = False,
    sequence: int = 0,
    summary: str = "external",
) -> bytes:
    """A VCALENDAR with one VEVENT. Aware times are written in UTC; with ``tzid``
    (only "Europe/Berlin" has its VTIMEZONE here) naive times are local to it."""

    def when(name: str, moment: datetime) -> str:
        if tzid is not None:
            return f"{name};TZID={tzid}:{moment:%Y%m%dT%H%M%S}"
        if moment.tzinfo is None:
            raise ValueError("a time without tzid must be aware")
        return f"{name}:{moment.astimezone(_UTC):%Y%m%dT%H%M%SZ}"

    lines = [
        "BEGIN:VCALENDAR",
        "VERSION:2.0",
        "PRODID:-//slotward tests//radicale//EN",
        *([BERLIN.strip()] if tzid == "Europe/Berlin" else []),
        "BEGIN:VEVENT",
        f"UID:{uid}",
        "DTSTAMP:20260101T000000Z",
        when("DTSTART", start),
        when("DTEND", end),
        f"SUMMARY:{summary}",
        f"SEQUENCE:{sequence}",
        *([f"RRULE:{rrule}"] if rrule else []),
        *([f"STATUS:{status}"] if status else []),
        *(["TRANSP:TRANSPARENT"] if transparent else []),
        "END:VEVENT",
        "END:VCALENDAR",
    ]
    return ("\r\n".join("\r\n".join(line.splitlines()) for line in lines) + "\r\n").encode()


def _reap(pid_file: Path) -> None:
    """Kill the pid in ``pid_file`` if it is still a radicale (the reaper's command)."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"radicale" in cmdline:
        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reap"]:
        _reap(Path(sys.argv[2]))
