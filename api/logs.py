"""Structured logs: one JSON object per line (or plain text for a terminal).

A record's structured fields are the ``extra={...}`` it was logged with; the
formatters write them beside ``ts``, ``level``, ``logger`` and ``msg``. What
goes into them is up to the caller: the access log (api/http/telemetry.py) never
passes the Authorization header, an API key or a body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

from slotward.api.config import Config

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "escape", "record_fields"]

# Attributes every LogRecord has; anything else on a record came from `extra`.
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record was logged with (``extra=``), None dropped."""
    return {
        name: value
        for name, value in vars(record).items()
        if name not in _RESERVED and not name.startswith("_") and value is not None
    }


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name, value in record_fields(record).items():
            doc.setdefault(name, value)  # a field may not overwrite the four above
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        line = json.dumps(doc, default=str, ensure_ascii=False, separators=(",", ":"))
        # json escapes C0 only; these would still split the line for a reader
        # that breaks on every Unicode line boundary (str.splitlines), or fail
        # to encode (a lone surrogate). Outside strings JSON is ASCII, so an
        # escape is always inside one.
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
        parts = [_timestamp(record), record.levelname, escape(record.name)]
        parts.append(escape(record.getMessage()))
        parts += [_field(name, value) for name, value in record_fields(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            trace = self.formatException(record.exc_info).split("\n")
            line += "".join(f"\n  {escape(part)}" for part in trace)
        return line


class _SlotwardHandler(logging.StreamHandler[IO[str]]):
    """The handler configure_logging installs, so a second call replaces it."""


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
