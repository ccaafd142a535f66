"""Prometheus metrics: what a process counts, and the store's figures at scrape time.

Metrics carry no tenant data: every label comes from a small fixed set (route
templates, methods, statuses, outcomes, conflict kinds, hold statuses), never
from a tenant, agent, workflow, key or raw path.

Counters and the latency histogram count what this process answered. With
``slotward serve --workers N`` the processes share one port, so a scrape
reaches any one of them: there every process writes its counts to files in one
shared directory (prometheus-client's multiprocess mode, ``shared_dir``) and
whichever process is scraped sums them all. The gauges are read from the store
at scrape time (:class:`StoreFigures`), so they describe the whole database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from slotward.engine.errors import SlotConflict, SlotwardError
from slotward.engine.model import Gauges, HoldStatus, Reply

__all__ = [
    "CONFLICT_KINDS",
    "DELIVERY_OUTCOMES",
    "HANDOVER_REASONS",
    "IDEMPOTENCY_OUTCOMES",
    "Metrics",
    "StoreFigures",
]

IDEMPOTENCY_OUTCOMES = ("fresh", "replayed", "in_progress", "mismatch", "takeover",
                        "fencing_rejected")  # fmt: skip
CONFLICT_KINDS = ("held", "committed", "external")
DELIVERY_OUTCOMES = ("delivered", "failed", "dead")
HANDOVER_REASONS = ("foreign", "incomplete")
_ERROR_OUTCOMES = {
    "request_in_progress": "in_progress",
    "idempotency_key_reused": "mismatch",
    "lease_lost": "fencing_rejected",
}
# Any other method is "other": a client must not be able to mint label values.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class StoreFigures(Collector):
    """The store's gauges, as last read (at scrape time): whole-database figures."""

    def __init__(self) -> None:
        self._gauges = Gauges({}, 0, None, 0)
        self._lag = 0.0
        self._outbox_lag = 0.0
        # This process's relay, not the store's: whether it may deliver now.
        self.relay_lease_held: Callable[[], bool] = lambda: False

    def update(self, gauges: Gauges, now: datetime) -> None:
        self._gauges = gauges
        overdue = gauges.oldest_overdue
        self._lag = 0.0 if overdue is None else max(0.0, (now - overdue).total_seconds())
        oldest = gauges.oldest_pending_event
        self._outbox_lag = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())

    def collect(self) -> Iterator[Metric]:
        g = self._gauges
        holds = GaugeMetricFamily(
            "slotward_holds", "Holds in the store by status", labels=["status"]
        )
        for status in HoldStatus:
            holds.add_metric([status.value], g.holds_by_status.get(status.value, 0))
        yield holds
        yield GaugeMetricFamily(
            "slotward_outbox_backlog", "Outbox rows waiting for delivery", value=g.outbox_backlog
        )
        yield GaugeMetricFamily(
            "slotward_sweeper_lag_seconds",
            "How long the oldest held hold past its expiry has waited for the sweeper",
            value=self._lag,
        )
        yield GaugeMetricFamily(
            "slotward_ledger_executing", "Execution leases in flight (not yet expired)",
            value=g.executing,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "slotward_outbox_lag_seconds",
            "Age of the oldest outbox event not yet delivered everywhere (0: none waits)",
            value=self._outbox_lag,
        )
        yield GaugeMetricFamily(
            "slotward_outbox_dead", "Outbox events a delivery gave up on", value=g.dead_events
        )
        failing = GaugeMetricFamily(
            "slotward_webhook_consecutive_failures",
            "Failed deliveries in a row, per failing subscription (by its opaque id)",
            labels=["subscription"],
        )
        for sub_id, count in sorted(g.failing_subscriptions.items()):
            failing.add_metric([sub_id], count)
        yield failing
        yield GaugeMetricFamily(
            "slotward_relay_lease_held",
            "1 while this process holds the relay lease (SQLite; always 1 on PostgreSQL)",
            value=1 if self.relay_lease_held() else 0,
        )


class Metrics:
    """One process's metrics, in a registry of its own (tests run many servers).

    ``shared_dir``: the directory the processes of one ``--workers`` server
    share. prometheus-client must have been imported with
    ``PROMETHEUS_MULTIPROC_DIR`` naming it (api/cli/serving.py starts the workers so).
    """

    def __init__(self, shared_dir: str | None = None) -> None:
        if shared_dir is not None and values.ValueClass is values.MutexValue:
            raise RuntimeError(
                "shared metrics need PROMETHEUS_MULTIPROC_DIR set before prometheus_client loads"
            )
        self._shared_dir = shared_dir
        self._request_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self.registry = CollectorRegistry()
        r = self.registry
        self._requests = Counter(
            "slotward_http_requests", "HTTP requests answered, by route, method and status",
            ["route", "method", "status"], registry=r,
        )  # fmt: skip
        self._latency = Histogram(
            "slotward_http_request_duration_seconds",
            "Time from the request reaching the app to its answer, by route template and method",
            ["route", "method"], registry=r,
        )  # fmt: skip
        self._idempotency = Counter(
            "slotward_idempotency", "Idempotent calls by how the ledger answered them",
            ["outcome"], registry=r,
        )  # fmt: skip
        self._conflicts = Counter(
            "slotward_conflicts", "Refused claims (409 slot_conflict), once per kind they met",
            ["kind"], registry=r,
        )  # fmt: skip
        self._preemptions = Counter(
            "slotward_preemptions", "Holds preempted by a higher-priority claim", registry=r
        )
        self._storms = Counter(
            "slotward_retry_storms", "Workflows flagged as retry storms", registry=r
        )
        self._purged = Counter(
            "slotward_ledger_purged", "Ledger records deleted after their retention", registry=r
        )
        self._deliveries = Counter(
            "slotward_webhook_deliveries",
            "Webhook delivery attempts by outcome (delivered, failed: to be retried, dead)",
            ["outcome"], registry=r,
        )  # fmt: skip
        self._disabled = Counter(
            "slotward_webhooks_disabled", "Subscriptions the relay disabled", registry=r
        )
        self._calendar_writes = Counter(
            "slotward_calendar_writes",
            "Writes of slotward's own events to bound calendars by outcome "
            "(delivered, failed: to be retried, dead)",
            ["outcome"], registry=r,
        )  # fmt: skip
        self._handovers = Counter(
            "slotward_front_handovers",
            "Connections the front handed to aiohttp, by why: a request it does not serve "
            "(foreign) or one not whole when it looked (incomplete)",
            ["reason"], registry=r,
        )  # fmt: skip
        self._handed = {why: self._handovers.labels(why) for why in HANDOVER_REASONS}
        for outcome in DELIVERY_OUTCOMES:
            self._deliveries.labels(outcome)
            self._calendar_writes.labels(outcome)
        self.store_figures = StoreFigures()
        r.register(self.store_figures)
        # Present at 0, so rates work from the start; kept, as the requests' children are.
        self._outcomes = {o: self._idempotency.labels(o) for o in IDEMPOTENCY_OUTCOMES}
        for kind in CONFLICT_KINDS:
            self._conflicts.labels(kind)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One answered request."""
        children = self._request_children.get((route, method, status))
        if children is None:
            children = self._request_children_of(route, method, status)
        children[0].inc()
        children[1].observe(seconds)

    def _request_children_of(
        self, route: str, method: str, status: int
    ) -> tuple[Counter, Histogram]:
        # labels() takes a lock and builds its key on every call; the children
        # are the same each time. Bounded: routes are templates, methods and
        # statuses few.
        shown = method if method in _METHODS else "other"
        children = (
            self._requests.labels(route, shown, str(status)),
            self._latency.labels(route, shown),
        )
        if method in _METHODS:  # an odd method is not a key to keep
            self._request_children[(route, method, status)] = children
        return children

    def answered(self, reply: Reply) -> None:
        """A mutating call's answer (fresh, replayed, taken over; a completion is none)."""
        counter = self._outcomes.get(reply.outcome)
        if counter is not None:
            counter.inc()
        if not reply.replayed and reply.preempted:
            self._preemptions.inc(reply.preempted)

    def refused(self, error: SlotwardError) -> None:
        """A call refused with ``error``: counted if it says something of the ledger."""
        outcome = _ERROR_OUTCOMES.get(error.code)
        if outcome is not None:
            self._idempotency.labels(outcome).inc()
        if isinstance(error, SlotConflict):
            met = {c.get("kind") for c in error.extra.get("conflicts", ()) if isinstance(c, dict)}
            for kind in met & set(CONFLICT_KINDS):
                self._conflicts.labels(kind).inc()

    def handed_over(self, reason: str) -> None:
        """The front handed a connection to aiohttp (api/http/front.py); ``reason``
        one of :data:`HANDOVER_REASONS`."""
        self._handed[reason].inc()

    def retry_storm(self) -> None:
        """A workflow was flagged as a retry storm."""
        self._storms.inc()

    def purged(self, count: int) -> None:
        """``count`` ledger records passed their retention and were deleted."""
        if count > 0:
            self._purged.inc(count)

    def delivered(self, delivered: int, failed: int, dead: int, disabled: int) -> None:
        """The outcomes of a batch of webhook deliveries the relay recorded."""
        for outcome, count in zip(DELIVERY_OUTCOMES, (delivered, failed, dead), strict=True):
            if count:
                self._deliveries.labels(outcome).inc(count)
        if disabled:
            self._disabled.inc(disabled)

    def calendar_writes(self, written: int, failed: int, dead: int) -> None:
        """The outcomes of a batch of calendar writes the writer recorded."""
        for outcome, count in zip(DELIVERY_OUTCOMES, (written, failed, dead), strict=True):
            if count:
                self._calendar_writes.labels(outcome).inc(count)

    def watch_relay(self, held: Callable[[], bool]) -> None:
        """Report, at each scrape, whether this process's relay may deliver now."""
        self.store_figures.relay_lease_held = held

    def set_gauges(self, gauges: Gauges, now: datetime) -> None:
        """Whole-store figures, refreshed at scrape time."""
        self.store_figures.update(gauges, now)

    def exposition(self) -> bytes:
        """The Prometheus text format: every process's counts, and the store's figures."""
        if self._shared_dir is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self._shared_dir)  # type: ignore[no-untyped-call]
        registry.register(self.store_figures)
        return generate_latest(registry)
