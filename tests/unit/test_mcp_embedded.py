"""An embedded call never shows the model a failure's own text (api/mcp/embedded.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import pytest

from slotward.api.bootstrap import bootstrap
from slotward.api.config import Config
from slotward.api.mcp.embedded import Embedded
from slotward.api.mcp.results import tool_result
from slotward.engine.fakes import InMemoryStore
from slotward.engine.ports import UnitOfWork
from slotward.engine.tools import FIND_FREE_SLOTS

T = TypeVar("T")
SECRET_DETAIL = "disk on fire at /srv/secret"


class BrokenStore(InMemoryStore):
    """A store with a bug: every transaction raises what nobody planned for."""

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        raise RuntimeError(SECRET_DETAIL)

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        raise RuntimeError(SECRET_DETAIL)


async def test_an_unexpected_failure_is_logged_and_answered_internal_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    services = await bootstrap(Config(), store=BrokenStore())
    envelope = {"tool": FIND_FREE_SLOTS.name, "arguments": {}}
    with caplog.at_level(logging.ERROR, logger="slotward.mcp"):
        answer = await Embedded(services).call(envelope, "sw_abc_def")
    result = tool_result(answer)
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["code"] == "internal_error"
    assert result.structured_content["retryable"] is True
    assert SECRET_DETAIL not in result.model_dump_json()
    assert "Traceback" not in result.model_dump_json()
    assert any(SECRET_DETAIL in (r.exc_text or "") for r in caplog.records)  # kept for operators
    assert "sw_abc_def" not in caplog.text
