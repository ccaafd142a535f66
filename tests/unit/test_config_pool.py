"""SLOTWARD_DB_POOL_SIZE: read, defaulted, and refused when it cannot be meant."""

from __future__ import annotations

import pytest

from slotward.api.config import Config
from slotward.engine.errors import ConfigError


def test_the_pool_size_is_read_and_defaults_to_ten() -> None:
    assert Config().db_pool_size == 10
    config = Config.from_env({"SLOTWARD_DB_POOL_SIZE": "24"})
    config.policy()  # accepted
    assert config.db_pool_size == 24


@pytest.mark.parametrize("value", ["0", "-3", "501", "ten", "2.5"])
def test_a_pool_size_out_of_bounds_or_not_a_count_is_invalid_config(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Config.from_env({"SLOTWARD_DB_POOL_SIZE": value}).policy()
    assert refused.value.code == "invalid_config"
    assert "SLOTWARD_DB_POOL_SIZE" in str(refused.value)
