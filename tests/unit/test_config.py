"""Configuration from the environment: every bad value is refused with invalid_config."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slotward.api.config import Config
from slotward.engine.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SLOTWARD_RETRY_STORM_WINDOW", "inf"),
        ("SLOTWARD_RETRY_STORM_WINDOW", "nan"),
        ("SLOTWARD_RETRY_STORM_WINDOW", "0"),
        ("SLOTWARD_SWEEP_INTERVAL", "-1"),
        ("SLOTWARD_SWEEP_INTERVAL", "1e12"),
        ("SLOTWARD_RETRY_STORM_REPLAYS", "0"),
        ("SLOTWARD_RETRY_STORM_REPLAYS", "many"),
        ("SLOTWARD_RETRY_STORM_WINDOW", "1.5"),
        ("SLOTWARD_SWEEP_INTERVAL", "31"),
        ("SLOTWARD_RATE_LIMIT", "-1"),
        ("SLOTWARD_RATE_LIMIT", "fast"),
        ("SLOTWARD_RATE_BURST", "-2"),
        ("SLOTWARD_KEY_CACHE_SECONDS", "0"),
        ("SLOTWARD_RETENTION_HOURS", "721"),
        ("SLOTWARD_RETENTION_HOURS", "0"),
    ],
)
def test_bad_values_are_refused(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Config.from_env({name: value}).policy()
    assert refused.value.code == "invalid_config"


def test_the_defaults_are_designs() -> None:
    policy = Config.from_env({}).policy()
    assert policy.retention.total_seconds() == 72 * 3600
    assert (policy.storm_replays, policy.storm_window.total_seconds()) == (20, 60)
    assert policy.default_lease_seconds == 30


def test_thirty_days_of_retention_is_the_most() -> None:
    assert Config.from_env({"SLOTWARD_RETENTION_HOURS": "720"}).policy().retention.days == 30


def test_the_rate_limit_is_on_by_default_and_zero_turns_it_off() -> None:
    assert Config.from_env({}).rate_limit == 50
    assert Config.from_env({"SLOTWARD_RATE_LIMIT": " 0 "}).rate_limit == 0
    assert Config.from_env({"SLOTWARD_RATE_LIMIT": "0.0"}).rate_limit == 0
    assert Config.from_env({"SLOTWARD_RATE_LIMIT": "0"}).rate_limit == 0
    assert Config.from_env({"SLOTWARD_RATE_LIMIT": "2.5"}).rate_limit == 2.5


def test_store_waits_are_read_and_bounded() -> None:
    config = Config.from_env({"SLOTWARD_STORE_TIMEOUT": "12", "SLOTWARD_LOCK_TIMEOUT": "0.5"})
    assert (config.waits().queue_seconds, config.waits().lock_seconds) == (12, 0.5)
    assert (Config().waits().queue_seconds, Config().waits().lock_seconds) == (30, 5)
    refused_settings = [
        {"SLOTWARD_STORE_TIMEOUT": "301"},
        {"SLOTWARD_LOCK_TIMEOUT": "0.05"},
        {"SLOTWARD_STORE_TIMEOUT": "2", "SLOTWARD_LOCK_TIMEOUT": "3"},  # a lock wait is in line
    ]
    for env in refused_settings:
        with pytest.raises(ConfigError) as refused:
            Config.from_env(env).policy()
        assert refused.value.code == "invalid_config"
    assert Config.from_env({"SLOTWARD_STORE_TIMEOUT": "0.5"}).waits().statement_seconds == 30


def test_the_provider_settings_read_from_the_environment() -> None:
    env = {
        "SLOTWARD_PROVIDER_MAX_STALENESS": "0",  # every decision reads the calendars first
        "SLOTWARD_PROVIDER_TIMEOUT": "2.5",
        "SLOTWARD_PROVIDER_HORIZON_DAYS": "30",
        "SLOTWARD_PROVIDER_SYNC_INTERVAL": "5",
    }
    found = Config.from_env(env).providers()
    assert found.external.max_staleness == timedelta(0)
    assert found.external.horizon == timedelta(days=30)
    assert found.settings.timeout == 2.5
    assert found.sync_interval == timedelta(seconds=5)
    defaults = Config.from_env({}).providers()
    assert defaults.external.max_staleness == timedelta(seconds=60)
    assert defaults.settings.allow_private_urls is False


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SLOTWARD_PROVIDER_MAX_STALENESS", "-1"),
        ("SLOTWARD_PROVIDER_MAX_STALENESS", "nan"),
        ("SLOTWARD_PROVIDER_TIMEOUT", "0"),
        ("SLOTWARD_PROVIDER_TIMEOUT", "500"),
        ("SLOTWARD_PROVIDER_HORIZON_DAYS", "0"),
        ("SLOTWARD_PROVIDER_SYNC_INTERVAL", "0"),
    ],
)
def test_a_provider_setting_out_of_range_is_refused(name: str, value: str) -> None:
    with pytest.raises(ConfigError):
        Config.from_env({name: value}).providers()
