"""Placeholder until the registry lands (branch i15-kit): the built-in adapters only."""

from __future__ import annotations

import importlib

from slotward.engine.calendars import ProviderSettings
from slotward.engine.ports import CalendarProvider

__all__ = ["load_providers"]

_BUILTINS = {
    "caldav": ("slotward.adapters.providers.caldav", "caldav_provider"),
    "ics": ("slotward.adapters.providers.ics", "ics_provider"),
}


def load_providers(settings: ProviderSettings) -> dict[str, CalendarProvider]:
    found: dict[str, CalendarProvider] = {}
    for name, (module, factory) in _BUILTINS.items():
        try:
            make = getattr(importlib.import_module(module), factory)
        except ImportError:
            continue
        found[name] = make(settings)
    return found
