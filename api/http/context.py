"""What handlers share, as typed application state."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from slotward.api.completions import Completions
from slotward.api.inflight import InFlight
from slotward.api.keycache import KeyCache
from slotward.api.metrics import Metrics
from slotward.api.storms import StormWatch
from slotward.engine.ports import Clock, IdGenerator, Store
from slotward.engine.rules.policy import Policy

__all__ = ["SERVICES", "Services"]


@dataclass(frozen=True)
class Services:
    store: Store
    clock: Clock
    ids: IdGenerator
    policy: Policy
    keys: KeyCache
    inflight: InFlight
    metrics: Metrics
    storms: StormWatch
    completions: Completions


SERVICES = web.AppKey("services", Services)
