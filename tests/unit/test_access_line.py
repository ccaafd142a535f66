"""log_fields (api/logs.py): the access log's cheap path writes the line the
formatter writes for the record, and steps aside for any other listener."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from slotward.api.config import Config
from slotward.api.logs import (
    ATOMIC_WRITE,
    JsonFormatter,
    _timestamp,
    configure_logging,
    log_fields,
)

FIELDS = {"method": "POST", "route": "/v1/holds", "status": 201, "duration_ms": 4.213,
          "outcome": "fresh", "key": "idem_\u00e9\u2028x", "workflow": None, "hold": "hold_1",
          "agent": "agent-a", "tenant": "acme"}  # fmt: skip


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root, own = logging.getLogger(), logging.getLogger("slotward")
    handlers, level, own_level = list(root.handlers), root.level, own.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    own.setLevel(own_level)


def _without_ts(line: str, fmt: str) -> str:
    return (
        line.split(" ", 1)[1]
        if fmt == "text"
        else json.dumps({k: v for k, v in json.loads(line).items() if k != "ts"})
    )


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_cheap_line_is_the_records_line(fmt: str) -> None:
    stream = io.StringIO()
    configure_logging(Config(log_format=fmt), stream)
    logger = logging.getLogger("slotward.access")
    log_fields(logger, logging.INFO, "POST /v1/holds 201", FIELDS)
    logger.info("POST /v1/holds 201", extra=FIELDS)  # the logging module's own way
    cheap, record = stream.getvalue().splitlines()
    assert _without_ts(cheap, fmt) == _without_ts(record, fmt)
    if fmt == "json":
        doc = json.loads(cheap)
        assert list(doc)[:5] == ["ts", "level", "logger", "msg", "method"]
        assert "workflow" not in doc  # None is left out
        assert len(doc["ts"]) == len("2030-01-01T00:00:00.000Z")
        assert doc["ts"].endswith("Z")


def test_below_the_level_nothing_is_written() -> None:
    stream = io.StringIO()
    configure_logging(Config(log_level="WARNING"), stream)
    log_fields(logging.getLogger("slotward.access"), logging.INFO, "m", FIELDS)
    assert stream.getvalue() == ""


def test_another_listener_gets_an_ordinary_record(caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    configure_logging(Config(), stream)
    with caplog.at_level(logging.INFO, logger="slotward.access"):
        log_fields(logging.getLogger("slotward.access"), logging.INFO, "POST /v1/holds 201",
                   FIELDS)  # fmt: skip
    (record,) = caplog.records
    assert (record.getMessage(), getattr(record, "tenant", None)) == ("POST /v1/holds 201", "acme")
    assert json.loads(stream.getvalue())["tenant"] == "acme"  # and ours still writes it


def test_a_filter_on_the_way_is_honoured() -> None:
    stream = io.StringIO()
    configure_logging(Config(), stream)
    logger = logging.getLogger("slotward.access")

    def drop(record: logging.LogRecord) -> bool:
        return False

    logger.addFilter(drop)
    try:
        log_fields(logger, logging.INFO, "m", FIELDS)
    finally:
        logger.removeFilter(drop)
    assert stream.getvalue() == ""


def test_the_timestamp_is_the_records_millisecond() -> None:
    for created in (1900000000.0, 1900000000.9995, 1900000000.9999996, 1900000000.1234):
        moment = datetime.fromtimestamp(created, UTC)
        expected = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        assert _timestamp(created) == expected


def test_json_values_are_written_as_the_standard_library_writes_them() -> None:
    """orjson writes a dataclass field by field (its secrets too) and datetimes its
    own way; the lines keep json's ``default=str``: the repr, which hides secrets."""
    config = Config(key_pepper="pepper-secret-zeta")
    moment = datetime(2030, 1, 1, 9, 30, tzinfo=UTC)
    record = logging.getLogger("slotward.test").makeRecord(
        "slotward.test", logging.INFO, "f.py", 1, "m", (), None,
        extra={"config": config, "at": moment, "ids": (1, 2), "big": 2**70},
    )  # fmt: skip
    doc = json.loads(JsonFormatter().format(record))
    assert "pepper-secret-zeta" not in json.dumps(doc)
    assert doc["config"] == str(config)
    assert (doc["at"], doc["ids"], doc["big"]) == (str(moment), [1, 2], 2**70)


def test_a_handler_given_another_formatter_gets_a_record_not_the_cheap_line() -> None:
    stream = io.StringIO()
    handler = configure_logging(Config(), stream)
    logging.getLogger().handlers[:] = [handler]  # ours alone (pytest's own set aside)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))  # an embedder's
    log_fields(logging.getLogger("slotward.access"), logging.INFO, "POST /v1/holds 201", FIELDS)
    assert stream.getvalue() == "INFO POST /v1/holds 201\n"


class _Writes(io.StringIO):
    """A stream that counts its writes, and keeps each."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.each: list[str] = []

    def write(self, text: str) -> int:
        self.writes += 1
        self.each.append(text)
        return super().write(text)


def _ours_alone(stream: io.StringIO) -> logging.Handler:
    handler = configure_logging(Config(), stream)
    logging.getLogger().handlers[:] = [handler]  # pytest's own set aside
    return handler


def _logged(stream: io.StringIO) -> list[str]:
    return [json.loads(line)["msg"] for line in stream.getvalue().splitlines()]


async def test_on_the_loop_a_turns_lines_are_written_together_at_its_end() -> None:
    stream = _Writes()
    _ours_alone(stream)
    access = logging.getLogger("slotward.access")
    for n in range(3):
        log_fields(access, logging.INFO, f"line {n}", FIELDS)
    assert stream.getvalue() == ""  # still this turn
    await asyncio.sleep(0)
    assert _logged(stream) == ["line 0", "line 1", "line 2"]
    assert stream.writes == 1
    log_fields(access, logging.INFO, "line 3", FIELDS)  # the next turn's own drain
    await asyncio.sleep(0)
    assert _logged(stream)[-1] == "line 3"
    assert stream.writes == 2


async def test_a_record_or_a_flush_writes_the_waiting_lines_first() -> None:
    stream = io.StringIO()
    handler = _ours_alone(stream)
    access, other = logging.getLogger("slotward.access"), logging.getLogger("slotward.relay")
    log_fields(access, logging.INFO, "first", FIELDS)
    other.warning("second")  # an ordinary record, in the same turn
    assert _logged(stream) == ["first", "second"]
    log_fields(access, logging.INFO, "third", FIELDS)
    handler.flush()  # as logging.shutdown does at exit
    assert _logged(stream) == ["first", "second", "third"]
    await asyncio.sleep(0)  # the drain due finds nothing more to write
    assert _logged(stream) == ["first", "second", "third"]


def test_lines_waiting_on_a_loop_that_stopped_are_not_lost() -> None:
    stream = io.StringIO()
    _ours_alone(stream)
    access = logging.getLogger("slotward.access")
    stopped = asyncio.new_event_loop()

    async def log_then_stop() -> None:
        log_fields(access, logging.INFO, "before the stop", FIELDS)
        stopped.stop()

    task = stopped.create_task(log_then_stop())
    stopped.run_forever()  # one turn: the task logs and stops the loop
    stopped.close()  # its drain never runs
    assert task.done()
    assert _logged(stream) == []  # a stopped loop runs no callback scheduled in its last turn

    async def on_another_loop() -> None:
        log_fields(access, logging.INFO, "on another loop", FIELDS)
        await asyncio.sleep(0)

    asyncio.run(on_another_loop())  # schedules its own drain, which writes both
    assert _logged(stream) == ["before the stop", "on another loop"]


def test_replacing_the_handler_writes_what_the_old_one_held() -> None:
    first, second = io.StringIO(), io.StringIO()
    _ours_alone(first)
    access = logging.getLogger("slotward.access")

    async def log_and_replace() -> None:
        log_fields(access, logging.INFO, "to the first", FIELDS)
        _ours_alone(second)
        log_fields(access, logging.INFO, "to the second", FIELDS)
        await asyncio.sleep(0)

    asyncio.run(log_and_replace())
    assert (_logged(first), _logged(second)) == (["to the first"], ["to the second"])


async def test_a_turns_lines_go_in_whole_lines_of_at_most_a_pipes_atomic_write() -> None:
    """Workers share stderr: a write(2) to a pipe past PIPE_BUF may be cut into by
    another process's, so no write of the turn's lines is larger (a longer line
    goes alone)."""
    stream = _Writes()
    _ours_alone(stream)
    access = logging.getLogger("slotward.access")
    for n in range(40):
        log_fields(access, logging.INFO, f"line {n}", {**FIELDS, "pad": "x" * 300})
    log_fields(access, logging.INFO, "long", {**FIELDS, "pad": "\u00e9" * ATOMIC_WRITE})
    log_fields(access, logging.INFO, "after", FIELDS)
    await asyncio.sleep(0)
    assert _logged(stream) == [*(f"line {n}" for n in range(40)), "long", "after"]
    assert 1 < stream.writes < 42  # together, and cut
    for text in stream.each:
        assert text.endswith("\n")
        size = len(text.encode())
        assert size <= ATOMIC_WRITE or text.count("\n") == 1, size


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("cannot be shown")


async def test_a_line_that_cannot_be_formatted_is_lost_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Lines are formatted when the turn's are written: one that fails there is
    reported on stderr, as emit reports it, and the others of the turn are written."""
    stream = io.StringIO()
    _ours_alone(stream)
    access = logging.getLogger("slotward.access")
    log_fields(access, logging.INFO, "before", FIELDS)
    log_fields(access, logging.INFO, "broken", {**FIELDS, "odd": _Unprintable()})
    log_fields(access, logging.INFO, "after", FIELDS)
    await asyncio.sleep(0)
    assert _logged(stream) == ["before", "after"]
    reported = capsys.readouterr().err
    assert "--- Logging error ---" in reported
    assert "cannot be shown" in reported
