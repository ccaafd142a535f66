"""Structured logs: one JSON object per line (or plain text for a terminal).

A record's structured fields are the ``extra={...}`` it was logged with; the
formatters write them beside ``ts``, ``level``, ``logger`` and ``msg``. What
goes into them is up to the caller: the access log (api/http/telemetry.py) never
passes the Authorization header, an API key or a body.

The access log writes a line per request, so :func:`log_fields` skips the
logging module's record, filters and handler chain when the one handler on the
way is the one :func:`configure_logging` installed: the line is the one its
formatter would write for the record, written straight to its stream (a
fifth of the logging module's cost, the write itself aside). With any other
handler or filter on the way (pytest's ``caplog``, an embedding
application's own), it logs an ordinary record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from slotward.api.config import Config
from slotward.engine.clock import SystemClock

__all__ = [
    "ATOMIC_WRITE",
    "JsonFormatter",
    "TextFormatter",
    "configure_logging",
    "escape",
    "log_fields",
    "record_fields",
]

# Attributes every LogRecord has; anything else on a record came from `extra`.
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record was logged with (``extra=``), None dropped."""
    return {
        name: value
        for name, value in vars(record).items()
        if name not in _RESERVED and not name.startswith("_") and value is not None
    }


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text


def _timestamp(created: float) -> str:
    """``created`` as ``YYYY-MM-DDTHH:MM:SS.mmmZ``, as ``datetime.isoformat`` writes it.

    The second's text is kept: lines come many to a second. The microseconds
    are rounded first and the milliseconds then cut, as
    ``datetime.fromtimestamp(created).isoformat(timespec="milliseconds")`` does.
    """
    global _second  # one slot, replaced whole: safe from any thread
    whole = int(created)
    micros = round((created - whole) * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    cached = _second
    if cached[0] != whole:
        text = datetime.fromtimestamp(whole, UTC).replace(tzinfo=None).isoformat()
        cached = _second = (whole, text)
    return cached[1] + _MILLIS[micros // 1000]


_MILLIS = [f".{ms:03d}Z" for ms in range(1000)]  # a line's end of its timestamp, made once


_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        doc = self._doc(record.created, record.levelname, record.name, record.getMessage())
        for name, value in record_fields(record).items():
            doc.setdefault(name, value)  # a field may not overwrite the four above
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return _json_line(doc)

    def fields_line(self, created: float, level: str, name: str, msg: str,
                    fields: dict[str, Any]) -> str:  # fmt: skip
        """The line :meth:`format` writes for a record of these, with ``fields`` as extras."""
        doc = self._doc(created, level, name, msg)
        for field, value in fields.items():
            if value is not None:
                doc.setdefault(field, value)
        return _json_line(doc)

    @staticmethod
    def _doc(created: float, level: str, name: str, msg: str) -> dict[str, Any]:
        return {"ts": _timestamp(created), "level": level, "logger": name, "msg": msg}


# orjson would write a dataclass out field by field (a ``repr=False`` secret
# included) and a datetime its own way: both go to ``default=str``, as with json.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _json_line(doc: dict[str, Any]) -> str:
    try:
        line = orjson.dumps(doc, default=str, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:  # a lone surrogate, an integer past 64 bits
        line = json.dumps(doc, default=str, ensure_ascii=False, separators=(",", ":"))
    # JSON escapes C0 only; these would still split the line for a reader
    # that breaks on every Unicode line boundary (str.splitlines), or fail
    # to encode (a lone surrogate). Outside strings JSON is ASCII, so an
    # escape is always inside one. An ASCII line has none of them but DEL,
    # and two scans in C cost a tenth of the expression's.
    if line.isascii() and "\x7f" not in line:
        return line
    return _JSON_UNSAFE.sub(lambda c: f"\\u{ord(c.group()):04x}", line)


# What could end a line or steer a terminal (C0, DEL, C1, the Unicode line and
# paragraph separators), a lone surrogate (an undecodable header byte), and the
# backslash that starts an escape, so that an escape reads one way only.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\\]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
# A value with one of these is quoted, so it cannot pass for further fields.
_NEEDS_QUOTES = re.compile(r'[\s"=]|^$')


def _escape_one(found: re.Match[str]) -> str:
    char = found.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def escape(text: str) -> str:
    """``text`` on one line: control characters and line breaks as backslash escapes."""
    return _UNSAFE.sub(_escape_one, text)


def _field(name: str, value: object) -> str:
    shown = escape(str(value))
    if _NEEDS_QUOTES.search(shown):
        shown = '"' + shown.replace('"', '\\"') + '"'
    return f"{escape(name)}={shown}"


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger msg name=value ...``, for a person at a terminal.

    A record is one line whatever it holds: a newline or another control
    character in the message or a value is written as an escape (``\\n``,
    ``\\x1b``), and a value with a space, ``"`` or ``=`` is quoted. Only a
    traceback spans lines, each indented, so a line that starts with a
    timestamp is always a record.
    """

    def format(self, record: logging.LogRecord) -> str:
        line = self.fields_line(
            record.created, record.levelname, record.name, record.getMessage(),
            record_fields(record),
        )  # fmt: skip
        if record.exc_info:
            trace = self.formatException(record.exc_info).split("\n")
            line += "".join(f"\n  {escape(part)}" for part in trace)
        return line

    def fields_line(self, created: float, level: str, name: str, msg: str,
                    fields: dict[str, Any]) -> str:  # fmt: skip
        """The line :meth:`format` writes for a record of these, with ``fields`` as extras."""
        parts = [_timestamp(created), level, escape(name), escape(msg)]
        parts += [_field(n, value) for n, value in fields.items() if value is not None]
        return " ".join(parts)


_WALL_CLOCK = SystemClock()
# What one write(2) to a pipe may carry and stay whole beside other processes'
# writes to it (POSIX PIPE_BUF, 4096 on Linux): `serve --workers N` shares stderr.
ATOMIC_WRITE = 4096
# A line of log_fields waiting for its turn's end: its formatter and what
# fields_line takes (created, level name, logger name, msg, fields).
_Line = tuple[JsonFormatter | TextFormatter, float, str, str, str, dict[str, Any]]


class _SlotwardHandler(logging.StreamHandler[IO[str]]):
    """The handler configure_logging installs, so a second call replaces it.

    Lines of :func:`log_fields` written on an event loop are formatted and
    written at the end of the loop's turn, that turn's together, whole lines of
    up to ``ATOMIC_WRITE`` bytes a write: the answers of a group of creates
    settle in one turn, and each line's own ``write`` and flush cost more than
    its formatting (formatted together too, creates cost some 3% less server
    CPU: docs/performance.md, eleventh pass). A line that cannot be formatted
    is reported as ``emit`` reports one, and the others are written. Whatever
    else is written (a record, a line off the
    loop, a flush, the handler's close at exit) writes them first, so lines keep
    their order. A process killed within a turn loses that turn's lines only.
    """

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        self._pending: list[_Line] = []
        self._drain_on: asyncio.AbstractEventLoop | None = None  # where a drain is due

    def emit_fields(self, logger: logging.Logger, level: int, msg: str,
                    fields: dict[str, Any]) -> None:  # fmt: skip
        """Write the line ``emit`` would for such a record, without making one.

        The line is formatted when it is written (the class's docstring):
        ``fields`` must not change meanwhile.
        """
        formatter = self.formatter
        try:
            # _direct only hands over a handler with configure_logging's formatter.
            assert isinstance(formatter, (JsonFormatter, TextFormatter))
            created = _WALL_CLOCK.timestamp()  # as a LogRecord's, the wall clock
            line = (formatter, created, logging.getLevelName(level), logger.name, msg, fields)
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            with self.lock:  # type: ignore[union-attr]  # createLock() made it
                self._pending.append(line)
                if loop is None:
                    self._write_pending()
                    return
                if self._drain_on is loop:
                    return  # this turn's drain is due already
                self._drain_on = loop
            loop.call_soon(self._drain)
        except Exception:
            # As emit does: report on stderr, never fail the request.
            self.handleError(logger.makeRecord(logger.name, level, "", 0, msg, (), None))

    def _drain(self) -> None:
        try:
            with self.lock:  # type: ignore[union-attr]
                self._drain_on = None
                self._write_pending()
        except Exception:
            self.handleError(logging.makeLogRecord({"msg": "access lines lost"}))

    def _write_pending(self) -> None:
        """Write the waiting lines, whole lines of at most ``ATOMIC_WRITE`` bytes
        at a time (a line longer alone); the caller holds the lock."""
        if not self._pending:
            return
        waiting, self._pending = self._pending, []
        chunk: list[str] = []
        size = 0
        for formatter, created, level, name, msg, fields in waiting:
            try:
                line = formatter.fields_line(created, level, name, msg, fields)
            except Exception:  # as emit does: this line is lost, not the others
                self.handleError(logging.makeLogRecord({"name": name, "msg": msg}))
                continue
            # One more byte for the newline; an ASCII line's length is its size.
            length = (len(line) if line.isascii() else len(line.encode())) + 1
            if chunk and size + length > ATOMIC_WRITE:
                self._write_lines(chunk)
                chunk, size = [], 0
            chunk.append(line)
            size += length
        self._write_lines(chunk)

    def _write_lines(self, lines: list[str]) -> None:
        self.stream.write(self.terminator.join(lines) + self.terminator)
        super().flush()  # one write(2) of whole lines: several processes share a pipe

    def emit(self, record: logging.LogRecord) -> None:
        # Handler.handle holds the lock: the waiting lines go first.
        try:
            self._write_pending()
        except Exception:
            self.handleError(record)
        super().emit(record)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write_pending()
        super().flush()


def _direct(logger: logging.Logger, level: int) -> _SlotwardHandler | None:
    """The one handler a record of ``logger`` at ``level`` reaches, if it is ours, unfiltered."""
    found: _SlotwardHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if found is not None or type(handler) is not _SlotwardHandler or handler.filters:
                return None
            found = handler
        current = current.parent if current.propagate else None
    if found is None or level < found.level:
        return None
    if type(found.formatter) not in (JsonFormatter, TextFormatter):
        return None  # someone changed its formatter: only a record goes through that
    return found


def log_fields(logger: logging.Logger, level: int, msg: str, fields: dict[str, Any]) -> None:
    """``logger.log(level, msg, extra=fields)``, cheaper where nothing but our handler listens.

    ``msg`` is the finished message (no ``%`` arguments). Fields that are None
    are left out, as the formatters leave them out of a record.
    """
    if not logger.isEnabledFor(level):
        return
    handler = _direct(logger, level)
    if handler is None:
        logger.log(level, msg, extra=fields)
    else:
        handler.emit_fields(logger, level, msg, fields)


def configure_logging(config: Config, stream: IO[str] | None = None) -> logging.Handler:
    """Log to ``stream`` (stderr) in ``config.log_format`` at ``config.log_level``.

    The level applies to slotward's own loggers (``slotward.*``). Other
    libraries stay at WARNING and above whatever it is: some log query
    parameters, and so stored bodies, at DEBUG.
    """
    config.check_logging()
    level = logging.getLevelName(config.log_level.upper())
    handler = _SlotwardHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if config.log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _SlotwardHandler)]:
        old.flush()  # the lines it still holds, to the stream they were meant for
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))
    logging.getLogger("slotward").setLevel(level)
    return handler


class Throttled:
    """A warning logged at once, then its repeats within ``seconds`` as one count.

    For what a flood repeats (refused connections, failed accepts): a flood
    must not become a flood of log lines. Runs on the event loop.
    """

    def __init__(self, logger: logging.Logger, seconds: float = 1.0) -> None:
        self._logger = logger
        self._seconds = seconds
        self._repeats: int | None = None  # None: no window open

    def warning(self, message: str, repeated: str, extra: dict[str, Any]) -> None:
        """Log ``message``, or count a repeat; ``repeated`` (``%d``: the count) ends a window."""
        if self._repeats is not None:
            self._repeats += 1
            return
        self._logger.warning(message, extra=extra)
        self._repeats = 0
        asyncio.get_running_loop().call_later(self._seconds, self._close, repeated, extra)

    def _close(self, repeated: str, extra: dict[str, Any]) -> None:
        repeats, self._repeats = self._repeats, None
        if repeats:
            self._logger.warning(repeated, repeats, extra={**extra, "repeats": repeats})
