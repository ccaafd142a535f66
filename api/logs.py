"""Structured logs: one JSON object per line (or plain text for a terminal).

A record's structured fields are the ``extra={...}`` it was logged with; the
formatters write them beside ``ts``, ``level``, ``logger`` and ``msg``. What
goes into them is up to the caller: the access log (api/telemetry.py) never
passes the Authorization header, an API key or a body.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

from slotward.api.config import Config

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "record_fields"]

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
        return json.dumps(doc, default=str, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger msg name=value ...``, for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        parts += [f"{name}={value}" for name, value in record_fields(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
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
