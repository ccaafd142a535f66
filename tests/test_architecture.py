"""Guardrails: the rules of DESIGN section 1 and STYLE, checked mechanically."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import slotward
import slotward.engine

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
# a decision, made here.
ENGINE_LIBRARIES = frozenset({"pendulum", "rfc8785", "idna"})


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
    """Raw monotonic time only where it measures a real duration (request latency, a
    waiter's ``wait_ms``). Anything a rule decides by (a rate limit, an expiry, a
    cached key's lifetime) reads the service clock, so tests step it instead of
    sleeping: the rate limiter once counted by ``time.monotonic``, and its default
    could only be tested by racing; the key cache's tests once slept."""
    allowed = {ROOT / "api" / "http" / n for n in ("telemetry.py", "execution_handlers.py")}
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


def test_errors_become_responses_in_one_place() -> None:
    """Only api/http/problems.py builds problem+json; handlers raise SlotwardError."""
    for path in _modules("api"):
        if path.name not in ("problems.py", "openapi.py"):  # openapi.py only documents it
            tree = ast.parse(path.read_text())
            literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
            assert "application/problem+json" not in literals, f"{path} builds problems itself"
            # app.py installs the middleware; edges.py answers before it runs.
            if path.name not in ("app.py", "edges.py"):
                assert "slotward.api.http.problems" not in _imports(path), f"{path} builds problems"


def _clock_reads_outside_a_transaction(tree: ast.AST) -> list[int]:
    """Lines calling ``clock.now()`` that are not inside ``with uow:``."""
    bad: list[int] = []

    def visit(node: ast.AST, inside: bool) -> None:
        if isinstance(node, ast.With):
            opens = any(
                isinstance(item.context_expr, ast.Name) and item.context_expr.id == "uow"
                for item in node.items
            )
            inside = inside or opens
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "now"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "clock"
            and not inside
        ):
            bad.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return bad


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_use_cases_read_the_clock_inside_their_transaction(path: Path) -> None:
    """A writer that waited for the lock must not decide on a time from before it.

    (Found in review: a late commit decided with a stale `now` could overlap a
    hold another process placed meanwhile.)
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    assert _clock_reads_outside_a_transaction(tree) == [], path.name


def test_the_clock_rule_catches_a_read_before_the_transaction() -> None:
    stale = ast.parse("def f(uow, clock):\n    now = clock.now()\n    with uow:\n        pass\n")
    fresh = ast.parse("def f(uow, clock):\n    with uow:\n        now = clock.now()\n")
    assert _clock_reads_outside_a_transaction(stale) == [2]
    assert _clock_reads_outside_a_transaction(fresh) == []


def _commits_without_tenant_lock(tree: ast.AST) -> list[str]:
    """Functions that call ``uow.commit()`` but never ``uow.lock_tenant(...)``."""
    bad = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        calls = {
            node.func.attr
            for node in ast.walk(fn)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "uow"
        }
        opens = any(
            isinstance(node, ast.With)
            and any(isinstance(i.context_expr, ast.Name) and i.context_expr.id == "uow"
                    for i in node.items)
            for node in ast.walk(fn)
        )  # fmt: skip
        if opens and "commit" in calls and "lock_tenant" not in calls:
            bad.append(fn.name)
    return bad


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_write_use_cases_lock_their_tenant(path: Path) -> None:
    """On PostgreSQL the tenant lock is what serializes a tenant's writers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    assert _commits_without_tenant_lock(tree) == [], path.name


def test_the_tenant_lock_rule_catches_a_write_without_it() -> None:
    code = "def f(uow):\n    with uow:\n        uow.commit()\n"
    assert _commits_without_tenant_lock(ast.parse(code)) == ["f"]


def _uses_uow(nodes: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "uow" for stmt in nodes for n in ast.walk(stmt))


def _touch_after_commit(tree: ast.AST) -> list[int]:
    """Lines of ``uow.commit()`` calls after which the function touches ``uow`` again.

    What follows a commit, in its block and then in each enclosing block, until
    a return or raise ends the path.
    """
    parents: dict[int, tuple[list[ast.stmt], int, ast.AST]] = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                for i, stmt in enumerate(block):
                    parents[id(stmt)] = (block, i, node)
    bad = []
    for node in ast.walk(tree):
        call = node.value if isinstance(node, ast.Expr) else None
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "commit"
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "uow"
        ):
            continue
        here: ast.AST = node
        while id(here) in parents and not isinstance(here, ast.FunctionDef):
            block, i, owner = parents[id(here)]
            rest = block[i + 1 :]
            ends = next(
                (k for k, s in enumerate(rest) if isinstance(s, ast.Return | ast.Raise)), None
            )
            if _uses_uow(rest if ends is None else rest[: ends + 1]):
                bad.append(call.lineno)
                break
            if ends is not None or isinstance(owner, ast.FunctionDef):
                break
            here = owner
    return bad


@pytest.mark.parametrize(
    "path", [*_modules("engine"), ROOT / "api" / "http" / "auth.py"], ids=lambda p: p.name
)
def test_a_use_case_touches_nothing_after_its_commit(path: Path) -> None:
    """On SQLite a call may run in a group (adapters/store/sqlite/writer.py): work
    after ``commit()`` would sit in its next savepoint there but commit on its
    own alone. No use case does any, so a call means the same in both."""
    tree = ast.parse(path.read_text(), filename=str(path))
    assert _touch_after_commit(tree) == [], path.name


def test_the_after_commit_rule_catches_a_write_after_it() -> None:
    late = (
        "def f(uow):\n    with uow:\n        if x:\n            uow.commit()\n"
        "        uow.audit.append(e)\n"
    )
    early = (
        "def f(uow):\n    with uow:\n        if x:\n            uow.commit()\n"
        "            raise E\n        uow.commit()\n    return 1\n"
    )
    assert _touch_after_commit(ast.parse(late)) == [4]
    assert _touch_after_commit(ast.parse(early)) == []


# Use cases that may append to the audit chain, with an optional audit key:
# a caller outside the engine that leaves it out writes plain entries while
# the server has a key (and its chain then fails verification).
_KEYED_CALLS = {"expire_due", "flag_retry_storm"}


def _calls_without_audit_key(source: str) -> list[str]:
    missing = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name in _KEYED_CALLS and "audit_key" not in {k.arg for k in node.keywords}:
                missing.append(f"{name} (line {node.lineno})")
    return missing


def test_the_production_code_passes_the_audit_key() -> None:
    missing = {
        str(path.relative_to(ROOT)): bad
        for folder in SOURCE_DIRS
        for path in _modules(folder)
        if (bad := _calls_without_audit_key(path.read_text()))
    }
    assert not missing, f"called without audit_key: {missing}"


def test_the_audit_key_rule_catches_a_call_without_it() -> None:
    assert _calls_without_audit_key("expire_due(uow, clock, ids, 10)") == ["expire_due (line 1)"]
    assert _calls_without_audit_key("expire_due(uow, clock, ids, audit_key=k)") == []
