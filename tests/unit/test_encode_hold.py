"""encode_hold writes a hold's answer byte for byte as encode does.

Stored answers are replayed as they were written, and clients compare them:
the fast encoder may only be used where its bytes are encode's. It is for
documents without floats (orjson writes 1e-05 as 0.00001), which a hold's
answer never has.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from slotward.engine.model import Hold, HoldStatus
from slotward.engine.rules.documents import encode, encode_hold, hold_document

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)

# Every character a string may hold (no lone surrogate: no JSON text has one),
# the controls, quotes, backslashes, DEL, U+2028 and astral ones included.
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
_INT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_LEAF = st.none() | st.booleans() | _INT | _TEXT
_DOC = st.recursive(
    _LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(_TEXT, _DOC, max_size=8))
def test_a_document_without_floats_is_written_as_encode_writes_it(doc: dict[str, Any]) -> None:
    assert encode_hold(doc) == encode(doc)


@given(
    title=_TEXT,
    description=st.none() | _TEXT,
    attendees=st.lists(
        st.from_regex(r"att_[a-z0-9]{1,12}", fullmatch=True), min_size=1, max_size=4
    ),
    status=st.sampled_from(list(HoldStatus)),
    minutes=st.integers(min_value=-600, max_value=600),
    micros=st.integers(min_value=0, max_value=999_999),
)
def test_a_holds_answer_is_written_as_encode_writes_it(
    title: str,
    description: str | None,
    attendees: list[str],
    status: HoldStatus,
    minutes: int,
    micros: int,
) -> None:
    at = T0 + timedelta(minutes=minutes, microseconds=micros)
    hold = Hold(
        id="hold_1", key="idem_" + "1" * 64, tenant="acme", workflow_id="wf", agent_id="a",
        attendees=tuple(attendees), start=at, end=at + timedelta(minutes=30), title=title,
        description=description, priority=50, status=status, expires_at=at, token=7,
        intent_fp="f", created_at=T0, updated_at=T0, audit_seq=1,
    )  # fmt: skip
    doc = {**hold_document(hold, T0), "external_as_of": None, "external_stale": True}
    assert encode_hold(doc) == encode(doc)


def test_floats_are_why_it_is_for_holds_only() -> None:
    """The case the docstring names: were it used for any document, this would differ."""
    assert encode({"x": 1e-05}) == b'{"x":1e-05}'
    assert encode_hold({"x": 1e-05}) != encode({"x": 1e-05})
