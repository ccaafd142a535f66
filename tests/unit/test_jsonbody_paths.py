"""decode_json's two parsers give one verdict (api/http/jsonbody.py).

orjson reads a body first and the strict parser (the standard library's, with
its hooks) decides whatever orjson's value does not settle. Whatever the body,
decode_json must accept what the strict parser accepts, with the same value,
and refuse what it refuses, with the same code and words.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotward.api.http.jsonbody import _strict, decode_json
from slotward.engine.errors import SlotwardError

_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**53 - 1, 2**53, -(2**53 - 1), -(2**53), 2**63, 2**64, -(2**63) - 1]),
    st.floats(allow_nan=False, allow_infinity=False),
)
_strings = st.text(max_size=6) | st.sampled_from(["", "a", '":', "\\", "\u2028", "x\ny"])
_scalars = st.none() | st.booleans() | _numbers | _strings
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(st.tuples(st.sampled_from(["a", "b", "", '"', "a:"]), inner), max_size=4)
    ),
    max_leaves=20,
)


def _text(value: Any, spaced: bool) -> str:
    """JSON text of ``value``; a list of pairs is an object, duplicate keys kept."""
    colon, comma = (" : ", " ,\n") if spaced else (":", ",")
    if isinstance(value, list) and value and all(isinstance(p, tuple) for p in value):
        return "{" + comma.join(json.dumps(k) + colon + _text(v, spaced) for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + comma.join(_text(v, spaced) for v in value) + "]"
    return json.dumps(value)


def _verdict(decode: Any, raw: bytes, max_depth: int) -> tuple[str, Any]:
    try:
        return "accepted", decode(raw, max_depth=max_depth)
    except SlotwardError as exc:
        return exc.code, exc.detail


def _same(raw: bytes, max_depth: int = 32) -> None:
    fast = _verdict(decode_json, raw, max_depth)
    strict = _verdict(lambda r, max_depth: _strict(r, max_depth), raw, max_depth)
    assert fast == strict
    if fast[0] == "accepted":  # equal and of the same types (1 is not 1.0 here)
        assert json.dumps(fast[1]) == json.dumps(strict[1])


@given(value=_values, spaced=st.booleans(), max_depth=st.integers(min_value=0, max_value=4))
def test_both_paths_agree_on_generated_bodies(value: Any, spaced: bool, max_depth: int) -> None:
    _same(_text(value, spaced).encode(), max_depth)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,"a":2}',
        b'{"a":{"b":1,"b":1}}',
        b'[{"x":1},{"x":1,"x":2}]',
        b'{"a":"\\":","a":1}',  # a value that reads like a key
        b'{"a" \n: 1, "a"\t:2}',
        b'{"a" :1,"a":2}',
        b'{"a":"x\\":","a":1}',
        b'{"a":"x\\":","b":1}',
        b'{"a": "x", "b": ["y", {"c": 1, "c": 2}]}',
        b"18446744073709551616",
        b"[9223372036854775808]",
        b"[-9223372036854775809]",
        b"9007199254740992",
        b"1e400",
        b"[1e20]",
        b"NaN",
        b"[Infinity]",
        b'"\\ud800"',
        b'"\\ud83d\\ude00"',
        b'"\\uDBFF\\uDFFF"',
        b"\xef\xbb\xbf{}",
        b'{"a":"\xff"}',
        b"[" * 40 + b"]" * 40,
        b"[" * 2000 + b"]" * 2000,
        b"",
        b"[1,]",
        b'"a\x01"',
        b" {} ",
        b"-0",
        b"-0.0",
        b"[true,false,null]",
    ],
)
def test_both_paths_agree_on_the_edges(raw: bytes) -> None:
    _same(raw)
