"""The log formatters and configure_logging, on real loggers and a string stream."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from slotward.api.config import Config
from slotward.api.logs import JsonFormatter, TextFormatter, configure_logging
from slotward.engine.errors import ConfigError


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """configure_logging changes the root logger: put it back for the next test."""
    root, own = logging.getLogger(), logging.getLogger("slotward")
    handlers, level, own_level = list(root.handlers), root.level, own.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    own.setLevel(own_level)


def _record(msg: str = "hello %s", *args: object, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("slotward.test")
    return logger.makeRecord(logger.name, logging.INFO, "f.py", 1, msg, args, None, extra=extra)


def test_json_lines_carry_the_four_fields_and_the_extras() -> None:
    record = _record("hello %s", "world", route="/v1/holds", status=201, workflow=None)
    doc = json.loads(JsonFormatter().format(record))
    assert doc["level"] == "INFO"
    assert doc["logger"] == "slotward.test"
    assert doc["msg"] == "hello world"
    assert doc["route"] == "/v1/holds"
    assert doc["status"] == 201
    assert "workflow" not in doc  # None is left out, not written as null
    assert doc["ts"].endswith("Z")
    moment = datetime.fromisoformat(doc["ts"].replace("Z", "+00:00"))
    assert abs(moment - datetime.fromtimestamp(record.created, UTC)).total_seconds() < 0.001


def test_an_extra_cannot_overwrite_the_fixed_fields() -> None:
    doc = json.loads(JsonFormatter().format(_record("m", level="fake", logger="fake", ts="x")))
    assert (doc["level"], doc["logger"], doc["ts"] != "x") == ("INFO", "slotward.test", True)


def test_exceptions_are_one_json_line() -> None:
    logger = logging.getLogger("slotward.test")
    try:
        raise ValueError("boom")
    except ValueError:
        record = logger.makeRecord(
            logger.name, logging.ERROR, "f.py", 1, "failed", (), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exc"]


def test_text_lines_read_as_key_value_pairs() -> None:
    line = TextFormatter().format(_record("POST %s 201", "/v1/holds", outcome="fresh"))
    assert line.endswith("INFO slotward.test POST /v1/holds 201 outcome=fresh")


def test_configure_logging_writes_json_for_slotward_and_keeps_others_at_warning() -> None:
    stream = io.StringIO()
    configure_logging(Config(log_format="json", log_level="debug"), stream)
    logging.getLogger("slotward.access").debug("mine", extra={"key": "idem_1"})
    logging.getLogger("aiosqlite").debug("executing SELECT with parameters")
    logging.getLogger("aiosqlite").warning("library warning")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(d["logger"], d["msg"]) for d in lines] == [
        ("slotward.access", "mine"),
        ("aiosqlite", "library warning"),
    ]
    assert lines[0]["key"] == "idem_1"


def test_configure_logging_twice_replaces_its_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(Config(log_format="json"), first)
    configure_logging(Config(log_format="text"), second)
    logging.getLogger("slotward.access").info("once")
    assert first.getvalue() == ""
    assert second.getvalue().rstrip().endswith("INFO slotward.access once")


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"log_format": "xml"}, "SLOTWARD_LOG_FORMAT"), ({"log_level": "loud"}, "SLOTWARD_LOG_LEVEL")],
)
def test_unknown_log_settings_are_refused(fields: dict[str, str], named: str) -> None:
    config = Config(**fields)  # type: ignore[arg-type]
    for check in (lambda: configure_logging(config, io.StringIO()), config.policy):
        with pytest.raises(ConfigError) as caught:
            check()
        assert caught.value.code == "invalid_config"
        assert named in caught.value.detail


def test_log_settings_come_from_the_environment() -> None:
    config = Config.from_env({"SLOTWARD_LOG_FORMAT": "text", "SLOTWARD_LOG_LEVEL": "WARNING"})
    config.check_logging()
    assert (config.log_format, config.log_level) == ("text", "WARNING")
    with pytest.raises(ConfigError):
        Config.from_env({"SLOTWARD_LOG_FORMAT": "JSONL"}).check_logging()


# Each breaks a line for some reader: a terminal, `grep`, or str.splitlines.
LINE_BREAKERS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", "\x1b[2K\r"]


@pytest.mark.parametrize("breaker", LINE_BREAKERS)
def test_a_text_line_cannot_be_forged_through_the_message_or_a_value(breaker: str) -> None:
    forged = "2030-01-01T00:00:00.000Z INFO slotward.access POST /v1/holds 201"
    line = TextFormatter().format(
        _record("got %s", f"x{breaker}{forged}", workflow=f"wf{breaker}{forged}")
    )
    assert len(line.splitlines()) == 1
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in line)
    assert forged in line  # still readable, escaped


def test_text_escapes_read_one_way_and_values_that_could_pass_for_fields_are_quoted() -> None:
    line = TextFormatter().format(
        _record("a\\nb\n", plain="wf-1", spaced="a b=c", quoted='say "hi"', empty="")
    )
    assert "INFO slotward.test a\\\\nb\\n plain=wf-1" in line  # a backslash, then a newline
    assert 'spaced="a b=c"' in line
    assert 'quoted="say \\"hi\\""' in line
    assert 'empty=""' in line


def test_a_text_traceback_is_indented_so_only_records_start_a_line() -> None:
    logger = logging.getLogger("slotward.test")
    try:
        raise ValueError("boom\n2030-01-01T00:00:00.000Z INFO forged\rline")
    except ValueError:
        record = logger.makeRecord(
            logger.name, logging.ERROR, "f.py", 1, "failed", (), sys.exc_info()
        )
    first, *rest = TextFormatter().format(record).splitlines()
    assert first.endswith("ERROR slotward.test failed")
    assert rest
    assert all(line.startswith("  ") for line in rest)
    assert any("forged\\rline" in line for line in rest)


@pytest.mark.parametrize("text", ["a\u2028b\x85c\udcff", "ascii but \x7f"])
def test_json_lines_escape_what_splits_them_for_a_unicode_reader(text: str) -> None:
    # \udcff: an undecodable header byte; DEL, in a line otherwise ASCII, steers a terminal.
    line = JsonFormatter().format(_record("m %s", text, value=text))
    assert len(line.splitlines()) == 1
    assert line.isascii()
    assert not any(c in line for c in "\x7f\x85\u2028")
    line.encode("utf-8")  # no lone surrogate left to fail the stream
    doc = json.loads(line)
    assert (doc["msg"], doc["value"]) == (f"m {text}", text)
