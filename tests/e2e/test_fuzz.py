"""Schemathesis against /openapi.json: every operation, generated and mutated inputs.

A real `slotward serve` subprocess (the tests here are synchronous: schemathesis
calls with requests, which must not block the server's own event loop), on
SQLite and on PostgreSQL. Every answer must conform to the document (status
documented, body valid against its schema, content type right) and none may be
a 5xx; data that breaks the document must be refused. One check is left out:
"schema-valid data must be accepted". The document cannot say everything the
server refuses on purpose (an unparseable time, a start in the past, a DST gap),
so such data is refused with a 4xx, as it should be. Bounded: a fixed number of
examples per operation, derandomized.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.specs.openapi.schemas import OpenApiSchema

from slotward.api.http.routes import Route
from slotward.api.http.table import ROUTES
from tests.conftest import TEMPLATE
from tests.e2e.test_cli import _free_port
from tests.pgserver import PgServer

CLI = [sys.executable, "-m", "slotward.api.cli.main"]
EXAMPLES = 40  # per operation, mode and store: bounded CI time
_DATABASES = iter(range(10_000))


def _serve(url: str, log: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    made = subprocess.run(
        [*CLI, "--db", url, "keys", "create", "--tenant", "fuzz", "--agent", "fuzzer",
         "--role", "admin"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    key = made.stdout.strip().splitlines()[-1]
    port = _free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*CLI, "--db", url, "serve", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
            # One fuzzing agent sends far past the default per-agent rate; the
            # limiter has its own tests (test_ratelimit.py).
            env={**os.environ, "SLOTWARD_LOG_LEVEL": "WARNING", "SLOTWARD_RATE_LIMIT": "0"},
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # readiness, bounded
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=1).close()
            return proc, base, key
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(log.read_text()) from None
            time.sleep(0.05)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OpenApiSchema, str, str]]:
    """One server per store for the module: the fuzzer's writes pile up, as in life."""
    tmp_path = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'fuzz.db'}"
    else:
        pg: PgServer = request.getfixturevalue("postgres")
        url = pg.create_database(f"fuzz_{next(_DATABASES)}", template=TEMPLATE)
    log = tmp_path / "server.log"
    proc, base, key = _serve(url, log)
    try:
        schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
        schema.hook(_no_long_polls)
        schema.hook(_nothing_lapses)
        yield schema, key, base
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]  # nothing unhandled


def map_query(context: Any, query: dict[str, Any] | None) -> dict[str, Any] | None:
    """A valid ``wait`` (an approval's long poll, up to 60 s) is sent as 0.

    Every approval the fuzzer opens stays pending, so each read of it with a
    wait would hold the example for up to a minute: the fuzz run would measure
    patience, and a replayed example would see another state of the server.
    The long poll has its own tests (tests/e2e/test_approvals.py); a wait out of
    bounds is still sent as generated, to be refused.
    """
    wait = None if query is None else query.get("wait")
    if isinstance(wait, int) and not isinstance(wait, bool) and 0 < wait <= 60:
        return {**(query or {}), "wait": 0}
    return query


_no_long_polls = map_query  # registered on each schema (schemathesis knows hooks by name)

# Valid lifetimes the fuzzer may draw, and what they are sent as: the longest.
_LIFETIMES = {"hold_ttl_seconds": (10, 3600), "expires_in_seconds": (60, 7 * 24 * 3600)}


def map_body(context: Any, body: Any) -> Any:
    """A valid hold TTL or approval expiry is sent as the longest there is.

    The server runs on the wall clock for the whole module, for minutes on a
    loaded machine: a hold drawn with a 10 s TTL or an approval with a 60 s
    expiry would lapse between an example and its replay, and the replay would
    see another state of the server (a pending list emptied, a commit refused):
    hypothesis then stops with FlakyStrategyDefinition, as a run of `make test`
    on two busy workers did. Expiry has its own tests, on a clock the test
    moves; a lifetime out of bounds is still sent as generated, to be refused.
    """
    if not isinstance(body, dict):
        return body
    changed = dict(body)
    for name, (low, high) in _LIFETIMES.items():
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            changed[name] = high
    return changed


_nothing_lapses = map_body


# Negative data needs something to break: operations without a body or parameters have none.
# An event stream never ends, so no call here could read its answer whole: its
# parameters, hostile ones included, have their own test
# (tests/e2e/test_dashboard_stream.py), which reads the head and closes.
CASES = [
    (route, mode) for route in ROUTES if not route.streams for mode in GenerationMode
    if mode is GenerationMode.POSITIVE or route.request is not None or route.params
]  # fmt: skip
STREAMS = [route.operation_id for route in ROUTES if route.streams]


@pytest.mark.parametrize(
    ("route", "mode"), CASES, ids=[f"{r.method} {r.path} {m.value}" for r, m in CASES]
)
def test_every_operation_conforms_and_never_fails(
    live: tuple[OpenApiSchema, str, str], route: Route, mode: GenerationMode
) -> None:
    schema, key, _ = live
    operation = schema[route.path][route.method]
    headers = {"Authorization": f"Bearer {key}"}

    @hypothesis.settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(case=operation.as_strategy(mode).filter(_sendable))
    def call(case: Any) -> None:
        case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])

    call()


def _sendable(case: Any) -> bool:
    """Whether every query parameter of ``case`` reaches the wire.

    A negative case may add a parameter whose value is null, an empty list or
    an empty object: the HTTP client sends nothing for it, so the request that
    goes out can be a valid one, rightly answered 200, which schemathesis then
    reports as "schema-violating request accepted" (it did, for
    GET /v1/outbox?state=dead&limit=28 with its extra parameter dropped). Such
    a case tests nothing of the server.
    """
    return all(v is not None and v != [] and v != {} for v in (case.query or {}).values())


def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


# Raw bodies a broken client or a hostile one sends: not JSON, invalid UTF-8,
# deep nesting, huge or non-finite numbers, duplicate keys, NUL, big bodies.
RAW_BODIES = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    st.integers(min_value=1, max_value=5000).map(_nested),
    st.integers(min_value=60, max_value=400).map(lambda n: b'{"step": 1' + b"0" * n + b"}"),
    st.sampled_from([b'{"step": NaN}', b'{"step": 1e999}', b'{"a": 1, "a": 2}',
                     b'{"workflow_id": "\\u0000"}', b"\xff\xfe{}", b"[" * 100000]),
    st.integers(min_value=60, max_value=80).map(lambda k: b'"' + b"x" * (k * 1024) + b'"'),
)  # fmt: skip


@pytest.mark.parametrize("path", ["/v1/holds", "/v1/executions", "/v1/tool-calls"])
def test_raw_bodies_never_fail_the_server(live: tuple[OpenApiSchema, str, str], path: str) -> None:
    _, key, base = live

    @hypothesis.settings(
        max_examples=EXAMPLES * 2,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(body=RAW_BODIES)
    def post(body: bytes) -> None:
        request = urllib.request.Request(
            base + path,
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                status, content_type = resp.status, resp.headers["Content-Type"]
        except urllib.error.HTTPError as err:
            status, content_type = err.code, err.headers["Content-Type"]
        assert status < 500
        if status >= 400:
            assert content_type.startswith("application/problem+json")

    post()


def test_stateful_sequences_conform(live: tuple[OpenApiSchema, str, str]) -> None:
    """Sequences along the links schemathesis infers: a created hold read, committed,
    released; an acquired execution completed and read; workflows and their holds."""
    schema, key, _ = live
    machine = schema.exclude(operation_id=STREAMS).as_state_machine()
    headers = {"Authorization": f"Bearer {key}"}

    class Sequences(machine):  # type: ignore[misc,valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            if _sendable(case):  # else what went out may be valid (_sendable): nothing to judge
                case.validate_response(response, excluded_checks=[positive_data_acceptance])

    Sequences.run(
        settings=hypothesis.settings(
            max_examples=EXAMPLES,
            stateful_step_count=8,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(hypothesis.HealthCheck),
        )
    )
