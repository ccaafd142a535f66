"""The event loop `slotward serve` runs on: uvloop, or asyncio's own (api/cli/serving.py)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from slotward.api.cli.serving import run
from slotward.api.config import Config
from slotward.engine.errors import ConfigError


def _loop_type(config: Config) -> type[asyncio.AbstractEventLoop]:
    seen: list[type[asyncio.AbstractEventLoop]] = []

    async def main() -> None:
        seen.append(type(asyncio.get_running_loop()))

    run(config, main())
    return seen[0]


def test_serve_runs_on_uvloop_by_default() -> None:
    assert Config.from_env({}).event_loop == "uvloop"
    assert issubclass(_loop_type(Config()), uvloop.Loop)


@pytest.mark.parametrize("value", ["asyncio", " AsyncIO "])
def test_the_environment_falls_back_to_asyncio(value: str) -> None:
    config = Config.from_env({"SLOTWARD_EVENT_LOOP": value})
    assert config.event_loop == "asyncio"
    assert not issubclass(_loop_type(config), uvloop.Loop)


def test_an_unknown_event_loop_is_refused() -> None:
    config = Config.from_env({"SLOTWARD_EVENT_LOOP": "trio"})
    for check in (config.check_logging, config.policy):
        with pytest.raises(ConfigError) as caught:
            check()
        assert "SLOTWARD_EVENT_LOOP" in caught.value.detail
