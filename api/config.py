"""Configuration: one frozen value, built once at start from a mapping.

Nothing else in slotward reads the environment.

``SLOTWARD_EVENT_LOOP`` chooses the event loop `slotward serve` runs on, in its
one process and in every ``--workers`` process: ``uvloop`` (the default; libuv,
cheaper per request) or ``asyncio`` (the standard library's own loop, the
fallback should uvloop misbehave on a platform; docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from slotward.adapters.store.waits import Waits
from slotward.api.keyhash import KeyHasher
from slotward.api.secretbox import split_old_keys
from slotward.engine.calendars import ProviderSettings
from slotward.engine.errors import ConfigError
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.delivery import DEFAULT_SCHEDULE, RelaySettings
from slotward.engine.rules.external import ExternalPolicy
from slotward.engine.rules.policy import Policy

__all__ = ["DEFAULT_DB", "Config", "ProviderConfig", "StreamSettings"]

DEFAULT_DB = "sqlite+aiosqlite:///./slotward.db"
_MAX_POOL_SIZE = 500  # connections per pool: beyond it, surely a typo
_MAX_SECONDS = 86400.0 * 365  # intervals and windows: anything longer is a typo
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_LOG_FORMATS = ("json", "text")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_EVENT_LOOPS = ("uvloop", "asyncio")


@dataclass(frozen=True)
class ProviderConfig:
    """The calendar providers' settings, checked (:meth:`Config.providers`)."""

    external: ExternalPolicy
    settings: ProviderSettings
    sync_interval: timedelta


@dataclass(frozen=True)
class StreamSettings:
    """How a server-sent event stream (``GET /v1/audit/stream``) runs.

    It reads the store every ``poll_seconds``, sends a comment after
    ``keepalive_seconds`` without an event (so proxies keep it open and a
    vanished client is noticed), and checks its caller's key or session again
    every ``recheck_seconds`` (a revoked key ends it).
    """

    poll_seconds: float = 1.0
    keepalive_seconds: float = 15.0
    recheck_seconds: float = 10.0


@dataclass(frozen=True)
class Config:
    db_url: str = DEFAULT_DB
    host: str = "127.0.0.1"
    port: int = 8080
    sweep_interval_seconds: float = 1.0
    allow_unknown_attendees: bool = True
    retention_hours: int = 72
    key_cache_seconds: float = 10.0
    inflight_wait_ms: int = 1000
    # A caller waiting (wait_ms) for a completion that no signal announced (SQLite
    # across processes, a lost PostgreSQL listener) looks again this often.
    wait_poll_seconds: float = 1.0
    store_timeout_seconds: float = 30.0  # longest wait in line for the store; a statement's run
    lock_timeout_seconds: float = 5.0  # longest wait for a lock another transaction holds
    # PostgreSQL: the connections each of a process's two pools (writes, reads)
    # keeps open, at most. A server of W workers opens up to 2 x W x this, plus
    # one listener per worker: keep that below the server's max_connections
    # (100 by default). More lets more of one process's transactions run at
    # once; past the database's cores it only adds waiting inside it.
    db_pool_size: int = 10
    rate_limit: float = 50.0  # requests per second per agent and process; 0: off
    rate_burst: int = 0  # 0: twice the rate
    key_pepper: str | None = field(default=None, repr=False)  # a secret: never printed
    storm_replays: int = 20
    storm_window_seconds: float = 60.0
    log_format: str = "json"
    log_level: str = "INFO"
    event_loop: str = "uvloop"  # or "asyncio": the loop `slotward serve` runs on
    # The edges (api/cli/serving.py): a request head must arrive within this time;
    # an idle keep-alive connection is closed after that; beyond this many
    # open connections a process refuses new ones.
    head_timeout_seconds: float = 10.0
    keepalive_seconds: float = 15.0
    max_connections: int = 1024
    # The audit chain is an HMAC chain under this key when set (docs/security.md).
    audit_key: str | None = field(default=None, repr=False)  # a secret: never printed
    # Webhook signing secrets (and, later, provider credentials) are sealed
    # under this key at rest (docs/security.md); without it none are taken.
    secret_key: str | None = field(default=None, repr=False)  # a secret: never printed
    # Former secret keys, comma-separated: they still open what they sealed, never seal.
    secret_key_old: str | None = field(default=None, repr=False)  # secrets: never printed
    # Outbound URLs (webhooks) on loopback or private networks are refused
    # unless this is set; link-local, multicast and unspecified ones always are.
    allow_private_urls: bool = False
    relay_schedule: tuple[float, ...] = DEFAULT_SCHEDULE
    relay_timeout_seconds: float = 15.0
    relay_interval_seconds: float = 0.2
    webhook_disable_after_hours: float = 120.0
    # Calendar providers (docs/providers.md): a mirror older than this is read
    # again before a decision; one request to a calendar may take this long;
    # mirrors read this far ahead; the sync worker reads each binding this often.
    provider_max_staleness_seconds: float = 60.0
    provider_timeout_seconds: float = 10.0
    provider_horizon_days: float = 60.0
    provider_sync_interval_seconds: float = 30.0
    # Set by `serve --workers N` for its worker processes, never from the
    # environment: the directory where they pool their metrics.
    metrics_dir: str | None = None
    # The dashboard's live stream (GET /v1/audit/stream): how often it reads the
    # store, and how long it stays silent before a keep-alive comment.
    stream_poll_seconds: float = 1.0
    stream_keepalive_seconds: float = 15.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Config:
        """Read ``SLOTWARD_*`` variables; anything unset keeps its default."""
        base = cls()
        return cls(
            db_url=env.get("SLOTWARD_DB", base.db_url),
            host=env.get("SLOTWARD_HOST", base.host),
            port=_int(env, "SLOTWARD_PORT", base.port),
            sweep_interval_seconds=_float(
                env, "SLOTWARD_SWEEP_INTERVAL", base.sweep_interval_seconds
            ),
            allow_unknown_attendees=_bool(
                env, "SLOTWARD_ALLOW_UNKNOWN_ATTENDEES", base.allow_unknown_attendees
            ),
            retention_hours=_int(env, "SLOTWARD_RETENTION_HOURS", base.retention_hours),
            inflight_wait_ms=_int(env, "SLOTWARD_INFLIGHT_WAIT_MS", base.inflight_wait_ms),
            wait_poll_seconds=_float(env, "SLOTWARD_WAIT_POLL_SECONDS", base.wait_poll_seconds),
            key_cache_seconds=_float(env, "SLOTWARD_KEY_CACHE_SECONDS", base.key_cache_seconds),
            store_timeout_seconds=_float(env, "SLOTWARD_STORE_TIMEOUT", base.store_timeout_seconds),
            lock_timeout_seconds=_float(env, "SLOTWARD_LOCK_TIMEOUT", base.lock_timeout_seconds),
            db_pool_size=_int(env, "SLOTWARD_DB_POOL_SIZE", base.db_pool_size),
            rate_limit=_rate(env),
            rate_burst=_int(env, "SLOTWARD_RATE_BURST", base.rate_burst),
            key_pepper=env.get("SLOTWARD_KEY_PEPPER") or None,
            storm_replays=_int(env, "SLOTWARD_RETRY_STORM_REPLAYS", base.storm_replays),
            storm_window_seconds=_float(
                env, "SLOTWARD_RETRY_STORM_WINDOW", base.storm_window_seconds
            ),
            log_format=env.get("SLOTWARD_LOG_FORMAT", base.log_format),
            log_level=env.get("SLOTWARD_LOG_LEVEL", base.log_level),
            event_loop=env.get("SLOTWARD_EVENT_LOOP", base.event_loop).strip().lower(),
            head_timeout_seconds=_float(env, "SLOTWARD_HEAD_TIMEOUT", base.head_timeout_seconds),
            keepalive_seconds=_float(env, "SLOTWARD_KEEPALIVE_TIMEOUT", base.keepalive_seconds),
            max_connections=_int(env, "SLOTWARD_MAX_CONNECTIONS", base.max_connections),
            audit_key=env.get("SLOTWARD_AUDIT_KEY") or None,
            secret_key=env.get("SLOTWARD_SECRET_KEY") or None,
            secret_key_old=env.get("SLOTWARD_SECRET_KEY_OLD") or None,
            allow_private_urls=_bool(env, "SLOTWARD_ALLOW_PRIVATE_URLS", base.allow_private_urls),
            relay_schedule=_schedule(env, base.relay_schedule),
            relay_timeout_seconds=_float(env, "SLOTWARD_RELAY_TIMEOUT", base.relay_timeout_seconds),
            relay_interval_seconds=_float(
                env, "SLOTWARD_RELAY_INTERVAL", base.relay_interval_seconds
            ),
            webhook_disable_after_hours=_float(
                env, "SLOTWARD_WEBHOOK_DISABLE_AFTER_HOURS", base.webhook_disable_after_hours
            ),
            provider_max_staleness_seconds=_float(
                env,
                "SLOTWARD_PROVIDER_MAX_STALENESS",
                base.provider_max_staleness_seconds,
                zero=True,  # 0: every decision reads the calendars first
            ),
            provider_timeout_seconds=_float(
                env, "SLOTWARD_PROVIDER_TIMEOUT", base.provider_timeout_seconds
            ),
            provider_horizon_days=_float(
                env, "SLOTWARD_PROVIDER_HORIZON_DAYS", base.provider_horizon_days
            ),
            provider_sync_interval_seconds=_float(
                env, "SLOTWARD_PROVIDER_SYNC_INTERVAL", base.provider_sync_interval_seconds
            ),
            stream_poll_seconds=_float(
                env, "SLOTWARD_STREAM_POLL_SECONDS", base.stream_poll_seconds
            ),
            stream_keepalive_seconds=_float(
                env, "SLOTWARD_STREAM_KEEPALIVE_SECONDS", base.stream_keepalive_seconds
            ),
        )

    def check_logging(self) -> None:
        """Refuse a log format, log level or event loop slotward does not know (invalid_config)."""
        if self.log_format not in _LOG_FORMATS:
            raise ConfigError(f"SLOTWARD_LOG_FORMAT must be json or text, got {self.log_format!r}")
        if self.log_level.upper() not in _LOG_LEVELS:
            raise ConfigError(
                f"SLOTWARD_LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)}, "
                f"got {self.log_level!r}"
            )
        if self.event_loop not in _EVENT_LOOPS:
            raise ConfigError(
                f"SLOTWARD_EVENT_LOOP must be uvloop or asyncio, got {self.event_loop!r}"
            )

    def waits(self) -> Waits:
        """How long a request may wait for the store (adapters/store/waits.py)."""
        statement = max(self.store_timeout_seconds, 30.0)  # audit verification reads in batches
        return Waits(self.store_timeout_seconds, self.lock_timeout_seconds, statement)

    def key_hasher(self) -> KeyHasher:
        return KeyHasher(None if self.key_pepper is None else self.key_pepper.encode())

    def on_postgres(self) -> bool:
        return self.db_url.startswith(("postgresql", "postgres"))

    def relay(self) -> RelaySettings:
        """How the outbox relay delivers (api/workers/relay.py)."""
        if not 1 <= len(self.relay_schedule) <= 50:
            raise ConfigError("SLOTWARD_RELAY_SCHEDULE must list 1 to 50 delays")
        if not 0.5 <= self.relay_timeout_seconds <= 120:
            raise ConfigError("SLOTWARD_RELAY_TIMEOUT must be 0.5 to 120 seconds")
        if not 0.01 <= self.relay_interval_seconds <= 60:
            raise ConfigError("SLOTWARD_RELAY_INTERVAL must be 0.01 to 60 seconds")
        return RelaySettings(
            schedule=self.relay_schedule,
            timeout=self.relay_timeout_seconds,
            disable_after=timedelta(hours=self.webhook_disable_after_hours),
            interval=self.relay_interval_seconds,
        )

    def providers(self) -> ProviderConfig:
        """How calendars are read and written (api/providers.py, api/workers/providers.py)."""
        if not 0 <= self.provider_max_staleness_seconds <= 86400:
            raise ConfigError("SLOTWARD_PROVIDER_MAX_STALENESS must be 0 to 86400 seconds")
        if not 0.5 <= self.provider_timeout_seconds <= 120:
            raise ConfigError("SLOTWARD_PROVIDER_TIMEOUT must be 0.5 to 120 seconds")
        if not 1 <= self.provider_horizon_days <= 400:
            raise ConfigError("SLOTWARD_PROVIDER_HORIZON_DAYS must be 1 to 400 days")
        if not 0.05 <= self.provider_sync_interval_seconds <= 86400:
            raise ConfigError("SLOTWARD_PROVIDER_SYNC_INTERVAL must be 0.05 to 86400 seconds")
        return ProviderConfig(
            external=ExternalPolicy(
                max_staleness=timedelta(seconds=self.provider_max_staleness_seconds),
                horizon=timedelta(days=self.provider_horizon_days),
            ),
            settings=ProviderSettings(
                timeout=self.provider_timeout_seconds, allow_private_urls=self.allow_private_urls
            ),
            sync_interval=timedelta(seconds=self.provider_sync_interval_seconds),
        )

    def stream(self) -> StreamSettings:
        """How the dashboard's event stream runs (api/dashboard.py)."""
        if not 0.01 <= self.stream_poll_seconds <= 60:
            raise ConfigError("SLOTWARD_STREAM_POLL_SECONDS must be 0.01 to 60 seconds")
        if not 0.05 <= self.stream_keepalive_seconds <= 3600:
            raise ConfigError("SLOTWARD_STREAM_KEEPALIVE_SECONDS must be 0.05 to 3600 seconds")
        return StreamSettings(
            poll_seconds=self.stream_poll_seconds,
            keepalive_seconds=self.stream_keepalive_seconds,
            recheck_seconds=self.key_cache_seconds,
        )

    def policy(self) -> Policy:
        self.check_logging()  # every way in refuses a bad setting, not only `serve`
        if not 1 <= self.retention_hours <= 24 * 30:
            raise ConfigError("retention must be 1 hour to 30 days")
        if self.storm_window_seconds < 2:  # replays are counted by whole seconds
            raise ConfigError("the retry-storm window must be at least 2 seconds")
        if self.sweep_interval_seconds > self.storm_window_seconds / 2:
            # Replay counts travel between processes at each sweep: a sweep
            # slower than half the window lets a shared storm leave it unseen.
            raise ConfigError("the sweep interval may be at most half the retry-storm window")
        if not 0.1 <= self.store_timeout_seconds <= 300:
            raise ConfigError("the store timeout must be 0.1 to 300 seconds")
        if not 0.1 <= self.lock_timeout_seconds <= min(60, self.store_timeout_seconds):
            raise ConfigError(
                "the lock timeout must be 0.1 to 60 seconds, and at most the store timeout"
            )
        if not 1 <= self.db_pool_size <= _MAX_POOL_SIZE:
            raise ConfigError(f"SLOTWARD_DB_POOL_SIZE must be 1 to {_MAX_POOL_SIZE}")
        if not 0.05 <= self.wait_poll_seconds <= 300:
            raise ConfigError("the wait poll interval must be 0.05 to 300 seconds")
        if self.rate_burst < 0:
            raise ConfigError("the rate burst may not be negative")
        if not 0.1 <= self.head_timeout_seconds <= 300:
            raise ConfigError("the request head timeout must be 0.1 to 300 seconds")
        if not 0.1 <= self.keepalive_seconds <= 3600:
            raise ConfigError("the keep-alive timeout must be 0.1 to 3600 seconds")
        if not 1 <= self.max_connections <= 1_000_000:
            raise ConfigError("the connection cap must be 1 to 1000000")
        if self.audit_key is not None and len(self.audit_key.encode()) < 16:
            raise ConfigError("SLOTWARD_AUDIT_KEY must be at least 16 bytes")
        if self.secret_key is not None and len(self.secret_key.encode()) < 16:
            raise ConfigError("SLOTWARD_SECRET_KEY must be at least 16 bytes")
        if any(len(old.encode()) < 16 for old in split_old_keys(self.secret_key_old)):
            raise ConfigError("each key of SLOTWARD_SECRET_KEY_OLD must be at least 16 bytes")
        if self.storm_replays < 1:
            raise ConfigError("the retry-storm threshold must be at least 1")
        return Policy(
            allow_unknown_attendees=self.allow_unknown_attendees,
            retention=timedelta(hours=self.retention_hours),
            storm_replays=self.storm_replays,
            storm_window=timedelta(seconds=self.storm_window_seconds),
            audit_key=None if self.audit_key is None else AuditKey.derive(self.audit_key.encode()),
        )


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None


def _float(env: Mapping[str, str], name: str, default: float, *, zero: bool = False) -> float:
    """A positive number of seconds (``zero``: or 0) from the environment."""
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if zero and value == 0:
        return value
    if not 0 < value < _MAX_SECONDS:  # also refuses nan and inf
        raise ConfigError(
            f"{name} must be a positive number of seconds below {_MAX_SECONDS:g}, got {raw!r}"
        )
    return value


def _schedule(env: Mapping[str, str], default: tuple[float, ...]) -> tuple[float, ...]:
    raw = env.get("SLOTWARD_RELAY_SCHEDULE")
    if raw is None:
        return default
    delays: list[float] = []
    for part in raw.split(","):
        try:
            delay = float(part.strip())
        except ValueError:
            delay = -1.0
        if not 0 <= delay < _MAX_SECONDS:  # also refuses nan and inf
            raise ConfigError(
                "SLOTWARD_RELAY_SCHEDULE must be comma-separated seconds >= 0 "
                f"(the first is the wait before the first attempt), got {raw!r}"
            )
        delays.append(delay)
    return tuple(delays)


def _rate(env: Mapping[str, str]) -> float:
    raw = env.get("SLOTWARD_RATE_LIMIT")
    if raw is None:
        return Config.rate_limit
    try:
        off = float(raw) == 0
    except ValueError:
        off = False  # refused below, with the usual message
    return 0.0 if off else _float(env, "SLOTWARD_RATE_LIMIT", Config.rate_limit)


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")
