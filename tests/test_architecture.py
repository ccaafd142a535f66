"""Guardrails: the rules of DESIGN section 1 and STYLE, checked mechanically."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import slotward
import slotward.engine
import slotward.testing
from tests import transaction_rules as rules

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("engine", "adapters", "api", "testing")


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _calls(path: Path) -> set[str]:
    """Dotted names of everything called or referenced as an attribute chain."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                parts.append(value.id)
            found.add(".".join(reversed(parts)))
    return found


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_engine_imports_no_io_framework(path: Path) -> None:
    forbidden = ("aiohttp", "sqlalchemy", "alembic", "asyncio", "slotward.adapters", "slotward.api")
    bad = {name for name in _imports(path) if name.split(".")[0] in forbidden or
           any(name.startswith(f) for f in forbidden)}  # fmt: skip
    assert not bad, f"{path.name} imports {bad}"
    assert "os.environ" not in _calls(path)
    assert "os" not in _imports(path)


# Third-party packages engine/ may import: pure libraries, no I/O. A new one is
# a decision, made here. orjson: the canonical JSON of the common fingerprint
# (engine/rules/fingerprint.py), rfc8785 still the reference it is checked against.
ENGINE_LIBRARIES = frozenset({"pendulum", "rfc8785", "idna", "orjson"})


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_engine_imports_only_allowlisted_libraries(path: Path) -> None:
    tops = {name.split(".")[0] for name in _imports(path)}
    outside = tops - set(sys.stdlib_module_names) - ENGINE_LIBRARIES - {"slotward"}
    assert not outside, f"{path.name} imports {outside}: allowlist them in ENGINE_LIBRARIES"


@pytest.mark.parametrize("path", _modules("adapters"), ids=lambda p: p.name)
def test_adapters_do_not_import_the_api(path: Path) -> None:
    assert not {n for n in _imports(path) if n.startswith("slotward.api")}


_PACKAGED = ("engine", "adapters", "api", "testing", "benchmarks")


@pytest.mark.parametrize(
    "path", [p for folder in _PACKAGED for p in _modules(folder)], ids=lambda p: p.name
)
def test_the_package_never_imports_the_tests(path: Path) -> None:
    """An installed slotward has no tests package (benchmarks/processes.py once
    imported tests.pgserver; ``slotward bench`` would have failed installed)."""
    assert not {m for m in _imports(path) if m == "tests" or m.startswith("tests.")}, path


def test_only_the_clock_reads_the_time() -> None:
    clock = ROOT / "engine" / "clock.py"
    readers = {"datetime.now", "datetime.utcnow", "datetime.datetime.now", "time.time",
               "time.time_ns", "date.today"}  # fmt: skip
    for folder in SOURCE_DIRS:
        for path in _modules(folder):
            if path != clock:
                assert not readers & _calls(path), f"{path} reads the wall clock"


def test_policy_time_comes_from_the_service_clock() -> None:
    """Raw monotonic time only where it measures a real duration (request latency,
    a waiter's ``wait_ms``, an approval's ``wait``). Anything a rule decides by (a
    rate limit, an expiry, a cached key's lifetime) reads the service clock, so
    tests step it instead of sleeping: the rate limiter once counted by
    ``time.monotonic``, and its default could only be tested by racing; the key
    cache's tests once slept."""
    allowed = {ROOT / "api" / n for n in ("http/telemetry.py", "ledger.py", "approvals.py")}
    allowed.add(ROOT / "adapters" / "store" / "postgres" / "pool.py")  # a socket's idle time
    allowed.add(ROOT / "api" / "http" / "front.py")  # a connection's head and idle time, latency
    readers = {"time.monotonic", "time.monotonic_ns", "time.perf_counter", "loop.time"}
    for folder in SOURCE_DIRS:
        for path in _modules(folder):
            if path not in allowed:
                assert not readers & _calls(path), f"{path} reads monotonic time"


def test_only_config_and_cli_read_the_environment() -> None:
    allowed = {ROOT / "api" / "cli" / "main.py"}
    for folder in SOURCE_DIRS:
        for path in _modules(folder):
            if path not in allowed:
                assert "os.environ" not in _calls(path), f"{path} reads os.environ"
                assert "os.getenv" not in _calls(path), f"{path} reads the environment"


def test_no_module_is_past_four_hundred_lines() -> None:
    for folder in SOURCE_DIRS:
        for path in _modules(folder):
            lines = len(path.read_text().splitlines())
            assert lines <= 400, f"{path} has {lines} lines: split it"


def test_tests_serve_the_app_as_production_does() -> None:
    """aiohttp's TestServer cancels a handler whose client hangs up; `slotward serve`
    does not. On TestServer a test once hid a handler that went on after its client
    left (a lease taken over for nobody). End-to-end tests serve the app with
    tests/e2e/conftest.py ``serving``; unit tests of a bare decoder may use it."""
    for path in sorted((ROOT / "tests" / "e2e").rglob("*.py")):
        used = _imports(path) | _calls(path)
        assert "aiohttp.test_utils" not in used, f"{path} uses aiohttp.test_utils: use serving()"


def test_the_app_is_served_only_through_the_edge() -> None:
    """api/http/edges.py holds the protection a bare aiohttp runner lacks (parser refusals
    that log no key, head timeout, connection cap); tests/e2e/conftest.py ``serving``
    uses it. A second runner of the app once served tests without it."""
    runners = {"web.AppRunner", "web.ServerRunner", "web.Server", "web.run_app"}
    edge = ROOT / "api" / "http" / "edges.py"
    for path in [*_modules("api"), *sorted((ROOT / "tests").rglob("*.py"))]:
        if path != edge:
            assert not runners & _calls(path), f"{path} serves without api/http/edges.py"


def _all_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(slotward.__path__, "slotward."):
        if ".migrations" not in info.name:
            names.append(info.name)
    return names


@pytest.mark.parametrize("name", _all_modules())
def test_every_module_declares_a_resolvable_all(name: str) -> None:
    module = importlib.import_module(name)
    if not hasattr(module, "__all__"):
        assert name.count(".") == 1 or (module.__file__ or "").endswith("__init__.py"), (
            f"{name} has no __all__"
        )
        return
    for exported in module.__all__:
        assert hasattr(module, exported), f"{name}.__all__ names missing {exported}"


def test_the_engine_public_api_is_pinned() -> None:
    assert sorted(slotward.engine.__all__) == [
        "BodyTooLarge", "Clock", "Conflict", "FixedClock", "Forbidden", "Hold", "HoldAction",
        "HoldRequest", "HoldStatus", "IdGenerator", "InMemoryStore", "InMemoryUnitOfWork",
        "InProgress", "InvalidRequest", "LedgerRecord", "MalformedBody", "NotFound", "Policy",
        "Principal", "Reply", "SequentialIds", "SlotConflict", "SlotwardError", "Store",
        "SystemClock", "TimeOrderedIds", "Unauthenticated", "Unavailable", "UnitOfWork",
        "ValidationFailed",
        "commit_hold", "expire_due", "lookup_replay", "place_hold", "release_hold",
    ]  # fmt: skip


def test_the_testing_public_api_is_pinned() -> None:
    assert sorted(slotward.testing.__all__) == [
        "Call", "Op", "RULES", "Snapshot", "Violation",
        "acknowledged_writes_present", "check", "check_store", "commits_with_current_token",
        "load_snapshot", "no_overlap", "one_effect_per_key", "one_key_per_intent",
        "preemption_by_higher_priority", "replays_identical", "sync_url",
    ]  # fmt: skip


_OWN = ("slotward", "tests", "engine", "adapters", "api", "testing", "benchmarks")


@pytest.mark.parametrize("path", _modules("testing"), ids=lambda p: p.name)
def test_testing_imports_only_the_engine_and_the_adapters(path: Path) -> None:
    """slotward.testing ships to users' tests: it speaks the engine's values and reads
    a store through the adapters' tables; it never needs the api (a server's
    wiring) nor the tests (not installed)."""
    allowed = ("slotward.engine", "slotward.adapters", "slotward.testing")
    own = {name for name in _imports(path) if name.split(".")[0] in _OWN}
    bad = {n for n in own if not any(n == a or n.startswith(a + ".") for a in allowed)}
    assert not bad, f"{path.name} imports {bad}"


def test_importing_slotward_testing_loads_no_api_and_no_tests() -> None:
    """The import rule above, through every module slotward.testing loads."""
    shown = "import sys, slotward.testing; print(*sorted(sys.modules))"
    run = subprocess.run([sys.executable, "-c", shown], capture_output=True, text=True, check=True)
    loaded = run.stdout.split()
    assert "slotward.testing.snapshot" in loaded
    assert [m for m in loaded if m.split(".")[0] in _OWN[1:] or m.startswith("slotward.api")] == []


def test_errors_become_responses_in_one_place() -> None:
    """Only api/http/problems.py builds problem+json; handlers raise SlotwardError."""
    for path in _modules("api"):
        if path.name not in ("problems.py", "openapi.py"):  # openapi.py only documents it
            tree = ast.parse(path.read_text())
            literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
            assert "application/problem+json" not in literals, f"{path} builds problems itself"
            # app.py installs the middleware; edges.py answers before it runs;
            # front.py answers the calls it serves as the middleware would (its
            # problem_of); tool_handlers.py puts each call's problem of a batch in
            # its body, and mcp/results.py each MCP tool error's, as
            # problems.problem_document builds it.
            allowed = ("http/app.py", "http/edges.py", "http/front.py", "http/tool_handlers.py",
                       "mcp/results.py")  # fmt: skip
            if f"{path.parent.name}/{path.name}" not in allowed:
                assert "slotward.api.http.problems" not in _imports(path), f"{path} builds problems"


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_use_cases_read_the_clock_inside_their_transaction(path: Path) -> None:
    """A writer that waited for the lock must not decide on a time from before it.

    (Found in review: a late commit decided with a stale `now` could overlap a
    hold another process placed meanwhile.)
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    assert rules.clock_reads_outside_a_transaction(tree) == [], path.name


def test_the_clock_rule_catches_a_read_before_the_transaction() -> None:
    stale = (
        "def f(work: UnitOfWork, time: Clock):\n    now = time.now()\n    with work:\n        ...\n"
    )
    fresh = "def f(work: UnitOfWork, time: Clock):\n    with work:\n        now = time.now()\n"
    late = "async def f(w: 'UnitOfWork', t: Clock | None):\n    t.now()\n    async with w: ...\n"
    untyped = "def f(uow, clock):\n    now = clock.now()\n    with uow:\n        pass\n"
    assert rules.clock_reads_outside_a_transaction(ast.parse(stale)) == [2]
    assert rules.clock_reads_outside_a_transaction(ast.parse(fresh)) == []
    assert rules.clock_reads_outside_a_transaction(ast.parse(late)) == [2]
    assert rules.clock_reads_outside_a_transaction(ast.parse(untyped)) == []  # the types decide


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_write_use_cases_lock_their_tenant(path: Path) -> None:
    """On PostgreSQL the tenant lock is what serializes a tenant's writers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    assert rules.commits_without_tenant_lock(tree) == [], path.name


def test_the_tenant_lock_rule_catches_a_write_without_it() -> None:
    bare = "def f(work: UnitOfWork):\n    with work:\n        work.commit()\n"
    locked = (
        "def f(work: UnitOfWork):\n    with work:\n        work.lock_tenant(t); work.commit()\n"
    )
    nested = (
        "def f(work: UnitOfWork):\n    def g():\n        with work:\n            work.commit()\n"
    )
    assert rules.commits_without_tenant_lock(ast.parse(bare)) == ["f"]
    assert rules.commits_without_tenant_lock(ast.parse(locked)) == []
    assert rules.commits_without_tenant_lock(ast.parse(nested)) == ["f", "g"]
    excused = (
        'def f(work: UnitOfWork):\n    """Do it.\n\n    No tenant lock: a lease row."""\n'
        "    with work:\n        work.commit()\n"
    )
    mentioned = (
        'def f(work: UnitOfWork):\n    """Takes no tenant lock: why not."""\n'
        "    with work:\n        work.commit()\n"
    )
    assert rules.commits_without_tenant_lock(ast.parse(excused)) == []
    assert rules.commits_without_tenant_lock(ast.parse(mentioned)) == ["f"]


@pytest.mark.parametrize(
    "path", [*_modules("engine"), ROOT / "api" / "keys.py"], ids=lambda p: p.name
)
def test_a_use_case_touches_nothing_after_its_commit(path: Path) -> None:
    """On SQLite a call may run in a group (adapters/store/sqlite/writer.py): work
    after ``commit()`` would sit in its next savepoint there but commit on its
    own alone. No use case does any, so a call means the same in both."""
    tree = ast.parse(path.read_text(), filename=str(path))
    assert rules.touch_after_commit(tree) == [], path.name


def test_the_after_commit_rule_catches_a_write_after_it() -> None:
    late = (
        "def f(work: UnitOfWork):\n    with work:\n        if x:\n            work.commit()\n"
        "        work.audit.append(e)\n"
    )
    early = (
        "def f(work: UnitOfWork):\n    with work:\n        if x:\n            work.commit()\n"
        "            raise E\n        work.commit()\n    return 1\n"
    )
    assert rules.touch_after_commit(ast.parse(late)) == [4]
    assert rules.touch_after_commit(ast.parse(early)) == []


@pytest.mark.parametrize(
    "path", [*_modules("engine"), ROOT / "api" / "keys.py"], ids=lambda p: p.name
)
def test_the_rules_see_every_transaction(path: Path) -> None:
    """Every ``with name:`` there is over a typed unit of work, so none escapes the
    rules above by a lost annotation."""
    assert rules.unseen_transactions(ast.parse(path.read_text())) == [], path.name


def test_the_transaction_finder_catches_an_untyped_one() -> None:
    code = (
        "def f(uow, work: UnitOfWork):\n    with work:\n        pass\n    with uow:\n        pass\n"
    )
    assert rules.unseen_transactions(ast.parse(code)) == [4]


def _keyed() -> frozenset[str]:
    return rules.keyed_use_cases([p.read_text() for p in _modules("engine")])


def test_the_production_code_passes_the_audit_key() -> None:
    keyed = _keyed()
    missing = {
        str(path.relative_to(ROOT)): bad
        for folder in SOURCE_DIRS
        for path in _modules(folder)
        if (bad := rules.calls_without_audit_key(path.read_text(), keyed))
    }
    assert not missing, f"called without audit_key: {missing}"


def test_the_audit_key_rule_finds_its_use_cases_by_their_signature() -> None:
    assert {"expire_due", "flag_retry_storm"} <= _keyed()  # the two it once listed by name
    planted = (
        "def sweep(work: UnitOfWork, now: Clock, *, audit_key: AuditKey | None = None): ...\n"
        "def verify(work: UnitOfWork, audit_key: AuditKey | None = None): ...\n"
        "def keyed(work: UnitOfWork, audit_key: AuditKey): ...\n"
        "def chain(entry: Entry, audit_key: AuditKey | None = None): ...\n"
    )
    assert rules.keyed_use_cases([planted]) == {"sweep", "verify"}


def test_the_audit_key_rule_catches_a_call_without_it() -> None:
    keyed = frozenset({"sweep"})
    assert rules.calls_without_audit_key("sweep(work, t, ids, 10)", keyed) == ["sweep (line 1)"]
    assert rules.calls_without_audit_key("svc.sweep(work, t)", keyed) == ["sweep (line 1)"]
    assert rules.calls_without_audit_key("sweep(work, t, ids, audit_key=k)", keyed) == []
    # Handed to the store as a partial, it is still a call of the use case.
    assert rules.calls_without_audit_key("read(partial(m.sweep, t=t))", keyed) == ["sweep (line 1)"]
    assert rules.calls_without_audit_key("read(partial(sweep, audit_key=k))", keyed) == []


# iCalendar is read in one module: adapters/providers/ical.py clears icalendar's
# process-wide VTIMEZONE cache around every parse under one lock (one tenant's
# calendar must not define another's zones) and runs parses on calendar threads
# of their own. A parse anywhere else would break both (the CalDAV adapter once
# parsed a stored event on the event loop, outside the lock).
_ICAL_LIBRARIES = ("icalendar", "recurring_ical_events")
_SHIPPED = [p for d in SOURCE_DIRS for p in _modules(d)] + _modules("benchmarks")


@pytest.mark.parametrize("path", _SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_ical_module_reads_icalendar(path: Path) -> None:
    if path == ROOT / "adapters" / "providers" / "ical.py":
        return
    used = {name for name in _imports(path) if name.split(".")[0] in _ICAL_LIBRARIES}
    assert not used, f"{path.name} imports {used}: read iCalendar through providers/ical.py"


@pytest.mark.parametrize("path", _modules("adapters/providers"), ids=lambda p: p.name)
def test_providers_parse_on_the_calendar_threads(path: Path) -> None:
    """Not asyncio.to_thread: the default executor is shared with key checks, and a
    hostile calendar's parse must not make requests wait (ical.in_parser)."""
    assert "asyncio.to_thread" not in _calls(path), f"{path.name}: use ical.in_parser"


def test_the_command_line_imports_mcp_only_for_slotward_mcp() -> None:
    """Every `slotward` start (serve, keys, every test's server) imports the CLI; the
    mcp package is a second of CPU there (issue 18 moved its import into the command)."""
    probe = (
        "import sys, slotward.api.cli.main; "
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
