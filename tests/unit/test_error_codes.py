"""One catalogue of error codes (engine/codes.py), and nothing answered outside it.

The shipped source is read (tests/unit/codescan.py) for every code it can
produce; each must be catalogued, with the family it is raised with, and have
an HTTP status and a line in the README. Whether the OpenAPI document lists
them all is checked over HTTP (tests/e2e/test_error_codes_published.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pytest

import slotward
from slotward.api.http.statuses import STATUSES, family_status, status_of
from slotward.engine import errors
from slotward.engine.codes import CODES, ErrorCode
from tests.unit.codescan import Scan, Site, scan

PACKAGE = Path(slotward.__file__).parent
README = Path(__file__).parents[2] / "README.md"

SHIPPED = scan(PACKAGE)


def _unknown(sites: Iterable[Site]) -> list[str]:
    return sorted(f"{s.where}: {s.code}" for s in sites if s.code not in CODES)


def _wrong_family(sites: Iterable[Site]) -> list[str]:
    """Sites raising a catalogued code with another class than its catalogued family."""
    out = []
    for site in sites:
        code = CODES.get(site.code)
        made = getattr(errors, site.made_by) if site.made_by else None
        if code is not None and made is not None and made is not code.family:
            family = code.family.__name__ if code.family else "the edge"
            out.append(f"{site.where}: {site.code} raised as {site.made_by}, not {family}")
    return sorted(out)


def _readme_errors() -> str:
    text = README.read_text()
    start = text.index("\n## Errors\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_scan_sees_what_it_must() -> None:
    """A floor: the scan still finds each way codes are produced today."""
    codes = SHIPPED.codes()
    assert {"hold_not_found", "invalid_field"} <= codes  # code="..." (also a Field's)
    assert {"slot_conflict", "store_unavailable"} <= codes  # default_code
    assert {"malformed_request", "unsupported_expectation", "too_many_connections"} <= codes
    assert {"route_not_found", "method_not_allowed", "http_error"} <= codes  # a dict's .get
    assert {"hold_preempted", "hold_committed", "invalid_transition"} <= codes  # tuple unpacking
    assert {"request_in_progress", "lease_lost"} <= {s.code for s in SHIPPED.read}


def test_every_code_produced_is_catalogued() -> None:
    assert SHIPPED.unreadable == [], "codes the scan cannot follow: teach tests/unit/codescan.py"
    assert _unknown(SHIPPED.produced) == []


def test_every_code_read_is_catalogued() -> None:
    assert _unknown(SHIPPED.read) == []


def test_every_code_is_raised_with_its_family() -> None:
    """The status comes from the family: a code raised as another class would lie."""
    assert _wrong_family(SHIPPED.produced) == []


def test_every_catalogued_code_is_produced() -> None:
    assert sorted(set(CODES) - SHIPPED.codes()) == []


def test_every_code_has_a_status() -> None:
    assert set(STATUSES) == set(CODES)
    assert all(400 <= status <= 599 for status in STATUSES.values())


@pytest.mark.parametrize("code", CODES.values(), ids=lambda c: c.name)
def test_an_error_answers_with_its_codes_status(code: ErrorCode) -> None:
    if code.family is not None:
        error = code.family("x", code=code.name)
        assert status_of(error) == STATUSES[code.name] == family_status(code.family)


def test_the_statuses_are_todays() -> None:
    """The answers keep their status: a sample of each family and of the edge."""
    assert {
        name: STATUSES[name]
        for name in (
            "invalid_json", "body_too_large", "body_timeout", "invalid_db_url", "missing_field",
            "invalid_api_key", "role_forbidden", "hold_not_found", "hold_expired",
            "slot_conflict", "request_in_progress", "lease_lost", "rate_limited",
            "store_unavailable", "audit_key_required", "internal_error", "malformed_request",
            "unsupported_expectation", "too_many_connections", "route_not_found",
            "method_not_allowed",
        )
    } == {
        "invalid_json": 400, "body_too_large": 413, "body_timeout": 408, "invalid_db_url": 422,
        "missing_field": 422, "invalid_api_key": 401, "role_forbidden": 403,
        "hold_not_found": 404, "hold_expired": 409, "slot_conflict": 409,
        "request_in_progress": 409, "lease_lost": 409, "rate_limited": 429,
        "store_unavailable": 503, "audit_key_required": 503, "internal_error": 500,
        "malformed_request": 400, "unsupported_expectation": 417, "too_many_connections": 503,
        "route_not_found": 404, "method_not_allowed": 405,
    }  # fmt: skip


def test_an_uncatalogued_code_answers_with_its_family() -> None:
    assert status_of(errors.NotFound("x", code="not_in_the_catalogue")) == 404


def test_a_familys_own_code_has_its_retryability() -> None:
    for code in CODES.values():
        if code.family is not None and code.family.default_code == code.name:
            assert code.retryable is code.family.default_retryable or code.name == "internal_error"


def test_every_code_is_in_the_readme() -> None:
    listed = set(re.findall(r"`([a-z0-9_]+)`", _readme_errors()))
    assert sorted(set(CODES) - listed) == []


def test_every_code_has_a_meaning() -> None:
    for code in CODES.values():
        assert code.meaning, code.name
        assert "\n" not in code.meaning, code.name
        assert re.fullmatch(r"[a-z][a-z0-9_]*", code.name), code.name


# -- the scan refuses what it must ------------------------------------------------------


def _planted(tmp_path: Path, source: str) -> Scan:
    (tmp_path / "planted.py").write_text(source)
    return scan(tmp_path)


def test_a_planted_unknown_code_is_found(tmp_path: Path) -> None:
    found = _planted(
        tmp_path,
        "from slotward.engine.errors import NotFound\n"
        "def f():\n"
        "    raise NotFound('gone', code='hold_vanished')\n",
    )
    assert _unknown(found.produced) == ["planted.py:3: hold_vanished"]


@pytest.mark.parametrize(
    "source",
    [
        "def problem_response(status, title, code, detail): ...\n"
        "problem_response(418, 'Teapot', 'teapot', 'short and stout')\n",
        "class Refusal(Exception):\n    default_code = 'teapot'\n",
        "def refuse(detail, code='teapot'): ...\n",
        "from slotward.engine.errors import Conflict\n"
        "_WHY = {1: ('teapot', 'short')}\n"
        "def f(n):\n"
        "    code, detail = _WHY.get(n, ('kettle', 'stout'))\n"
        "    raise Conflict(detail, code=code)\n",
    ],
    ids=["positional", "default_code", "parameter_default", "unpacked_from_a_table"],
)
def test_every_way_of_producing_a_code_is_seen(tmp_path: Path, source: str) -> None:
    assert "teapot" in _planted(tmp_path, source).codes()


def test_a_code_the_scan_cannot_follow_is_refused(tmp_path: Path) -> None:
    found = _planted(
        tmp_path,
        "from slotward.engine.errors import NotFound\n"
        "def f(kind):\n"
        "    raise NotFound('gone', code=kind + '_not_found')\n",
    )
    assert found.unreadable == ["planted.py:3"]


def test_a_code_read_is_seen(tmp_path: Path) -> None:
    found = _planted(
        tmp_path,
        "_COUNTED = {'teapot': 'brewed'}\n"
        "def f(error):\n"
        "    return error.code == 'kettle' or _COUNTED.get(error.code)\n",
    )
    assert {s.code for s in found.read} == {"teapot", "kettle"}


def test_a_code_raised_as_another_family_is_refused(tmp_path: Path) -> None:
    found = _planted(
        tmp_path,
        "from slotward.engine.errors import ValidationFailed\n"
        "raise ValidationFailed('gone', code='hold_not_found')\n",
    )
    assert _wrong_family(found.produced) == [
        "planted.py:2: hold_not_found raised as ValidationFailed, not NotFound"
    ]
