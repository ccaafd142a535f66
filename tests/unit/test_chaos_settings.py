"""``slotward bench chaos`` refuses settings it cannot run before anything starts."""

from __future__ import annotations

import math
from typing import Any

import pytest

from slotward.benchmarks.chaos import ChaosSettings


@pytest.mark.parametrize(
    ("option", "fields"),
    [
        ("--think", {"think": math.inf}),
        ("--think", {"think": math.nan}),
        ("--think", {"think": -1.0}),
        ("--kill-every", {"kill_every": math.inf}),
        ("--kill-every", {"kill_every": math.nan}),
        ("--kill-every", {"kill_every": 0.0}),
        ("--agents", {"agents": 0}),
    ],
)
def test_a_setting_that_cannot_run_is_refused_by_name(option: str, fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=option):
        ChaosSettings(**{"agents": 2, "intents": 2} | fields).check()


def test_finite_settings_pass() -> None:
    ChaosSettings(2, 2, kill_every=0.5, think=0.0).check()
    ChaosSettings(2, 2).check()
