"""Strict I-JSON decoding of request bodies (api/http/jsonbody.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from hypothesis import given
from hypothesis import strategies as st

from slotward.api.http.jsonbody import MAX_BODY_BYTES, decode_json, read_json
from slotward.api.http.statuses import status_of
from slotward.engine.errors import BodyTooLarge, MalformedBody, SlotwardError

MAX_SAFE = 2**53 - 1


def _code(raw: bytes, **kwargs: int) -> str:
    with pytest.raises(SlotwardError) as info:
        decode_json(raw, **kwargs)
    return info.value.code


# -- accepted -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"a": [1, 2.5, "x", null, true, false]}', {"a": [1, 2.5, "x", None, True, False]}),
        (b" \r\n\t[] ", []),
        (b'"\\ud83d\\ude00 \\u00e9"', "\U0001f600 \u00e9"),
        ("\u00e9\U0001f600".join('""').encode(), "\u00e9\U0001f600"),
        (str(MAX_SAFE).encode(), MAX_SAFE),
        (str(-MAX_SAFE).encode(), -MAX_SAFE),
        (b"1e300", 1e300),
        (b"1e-400", 0.0),
        (b'"\\\\ud800"', "\\ud800"),  # an escaped backslash, not a surrogate escape
    ],
)
def test_accepts_i_json(raw: bytes, expected: object) -> None:
    assert decode_json(raw) == expected


def test_objects_keep_document_order() -> None:
    value = decode_json(b'{"b": 1, "a": 2, "c": 3}')
    assert isinstance(value, dict)
    assert list(value) == ["b", "a", "c"]


def test_same_key_in_sibling_objects_is_not_a_duplicate() -> None:
    assert decode_json(b'[{"a": 1}, {"a": 2}, {"b": {"a": 3}}]') == [
        {"a": 1},
        {"a": 2},
        {"b": {"a": 3}},
    ]


# -- size -----------------------------------------------------------------------


def test_body_over_the_limit_is_too_large() -> None:
    with pytest.raises(BodyTooLarge) as info:
        decode_json(b"[" + b"1," * 40_000 + b"1]")
    assert info.value.code == "body_too_large"
    assert info.value.extra["max_bytes"] == MAX_BODY_BYTES


def test_body_at_the_limit_is_accepted() -> None:
    raw = b'"' + b"x" * (MAX_BODY_BYTES - 2) + b'"'
    assert len(raw) == MAX_BODY_BYTES
    assert decode_json(raw) == "x" * (MAX_BODY_BYTES - 2)
    assert _code(raw, max_bytes=MAX_BODY_BYTES - 1) == "body_too_large"


# -- encoding -------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":"\xff"}',
        b'{"a":"\xc3"}',  # truncated sequence
        b'{"a":"\xc0\xaf"}',  # overlong encoding of "/"
        b'{"a":"\xed\xa0\x80"}',  # a UTF-8-encoded surrogate (CESU-8)
        b'"\xfe\xff"',
    ],
)
def test_invalid_utf8_is_refused(raw: bytes) -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(raw)
    assert info.value.code == "invalid_utf8"
    assert "offset" in info.value.detail


def test_invalid_utf8_names_the_byte_and_offset() -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(b'{"a":"\xff"}')
    assert "0xff" in info.value.detail
    assert info.value.extra == {"offset": 6}


def test_byte_order_mark_is_refused() -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(b'\xef\xbb\xbf{"a": 1}')
    assert info.value.code == "invalid_json"
    assert "byte order mark" in info.value.detail


def test_utf16_is_refused() -> None:
    assert _code('{"a": 1}'.encode("utf-16")) == "invalid_utf8"


# -- syntax ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"   ",
        b"{",
        b'{"a": 1,}',
        b"[1 2]",
        b"{'a': 1}",
        b'{"a": 1} {"b": 2}',
        b"01",
        b'"tab\there"',
        b"undefined",
        b"+1",
        b".5",
    ],
)
def test_invalid_json_is_refused(raw: bytes) -> None:
    assert _code(raw) == "invalid_json"


def test_invalid_json_detail_has_line_and_column() -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(b'{\n  "a": 1,\n  "b" 2\n}')
    assert "line 3, column 7" in info.value.detail
    assert info.value.extra == {"line": 3, "column": 7}


def test_empty_body_says_so() -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(b"")
    assert info.value.code == "invalid_json"
    assert "empty" in info.value.detail
    assert "line 1, column 1" in info.value.detail


@pytest.mark.parametrize(
    "raw",
    [
        b'["\\ud800"]',
        b'["\\uDFFF"]',
        b'{"\\udc00": 1}',
        b'["\\ude00\\ud83d"]',  # a low surrogate before a high one is two lone ones
        b'{"a": [{"b": "ok \\ud83d then"}]}',
    ],
)
def test_lone_surrogate_is_refused(raw: bytes) -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(raw)
    assert info.value.code == "invalid_json"
    assert "surrogate" in info.value.detail


# -- duplicate keys ---------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"step": 1, "step": 2}',
        b'{"a": {"b": {"step": 1, "x": 0, "step": 1}}}',
        b'[1, [{"ok": 1}, {"step": null, "step": null}]]',
    ],
)
def test_duplicate_key_is_refused_at_any_depth(raw: bytes) -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(raw)
    assert info.value.code == "duplicate_key"
    assert '"step"' in info.value.detail


def test_keys_equal_after_unescaping_are_duplicates() -> None:
    assert _code(b'{"a": 1, "\\u0061": 2}') == "duplicate_key"


# -- numbers --------------------------------------------------------------------


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_literals_are_refused(literal: bytes) -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(b'{"a": [' + literal + b"]}")
    assert info.value.code == "non_finite_number"
    assert literal.decode() in info.value.detail


@pytest.mark.parametrize(
    "raw",
    [
        str(2**53).encode(),
        str(-(2**53)).encode(),
        b'{"n": 123456789012345678901234567890}',
        b"9" * 5000,  # past int()'s 4300-digit limit: must not be a ValueError
        b"1e400",
        b"-1e400",
        b"[1.8e308]",
    ],
)
def test_numbers_outside_i_json_are_refused(raw: bytes) -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(raw)
    assert info.value.code == "number_out_of_range"
    assert len(info.value.detail) < 200


# -- nesting --------------------------------------------------------------------


def test_nesting_up_to_the_limit_is_accepted() -> None:
    assert decode_json(b"[" * 32 + b"]" * 32) is not None
    assert decode_json(b'{"a":' * 3 + b"{}" + b"}" * 3, max_depth=4) == {"a": {"a": {"a": {}}}}


@pytest.mark.parametrize(
    "raw",
    [b"[" * 33 + b"]" * 33, b'{"a":' * 32 + b"[]" + b"}" * 32],
)
def test_nesting_past_the_limit_is_refused(raw: bytes) -> None:
    with pytest.raises(MalformedBody) as info:
        decode_json(raw)
    assert info.value.code == "nesting_too_deep"
    assert "32" in info.value.detail


def test_very_deep_nesting_is_refused_without_recursion() -> None:
    # Deeper than the interpreter's recursion limit: a recursive check would
    # raise RecursionError instead of the stable code.
    raw = b'{"a":' * 50_000 + b"[" * 100_000 + b"]" * 100_000 + b"}" * 50_000
    with pytest.raises(MalformedBody) as info:
        decode_json(raw, max_bytes=len(raw))
    assert info.value.code == "nesting_too_deep"


def test_unclosed_deep_nesting_is_refused_as_too_deep() -> None:
    raw = b"[" * 100_000
    assert _code(raw, max_bytes=len(raw)) == "nesting_too_deep"


def test_brackets_inside_strings_do_not_count() -> None:
    raw = b'{"a": "[[[[{{{{", "b": ["\\"[[[[\\\\", "]]]]"]}'
    assert decode_json(raw, max_depth=2) == {"a": "[[[[{{{{", "b": ['"[[[[\\', "]]]]"]}


# -- round trip -----------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"))
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE, max_value=MAX_SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children) | st.dictionaries(_text, children),
    max_leaves=25,
)


@given(value=_json_values, ensure_ascii=st.booleans())
def test_any_i_json_value_round_trips(value: object, ensure_ascii: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8")
    decoded = decode_json(raw, max_bytes=len(raw), max_depth=10_000)
    assert decoded == value
    assert json.dumps(decoded) == json.dumps(value)  # also tells 1 from 1.0 and -0.0 from 0.0


# -- read_json over a real server -----------------------------------------------


async def _echo(request: web.Request) -> web.Response:
    """Decode the body; answer the decoded value, or the error code as text."""
    limit = int(request.query.get("max", str(MAX_BODY_BYTES)))
    try:
        value = await read_json(request, max_bytes=limit, allow_empty="empty" in request.query)
    except SlotwardError as exc:
        return web.Response(status=status_of(exc), text=exc.code)
    return web.json_response(value)


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = web.Application()
    app.router.add_post("/", _echo)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def test_read_json_decodes_any_content_type(
    client: TestClient[web.Request, web.Application],
) -> None:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    response = await client.post("/", data=b'{"step": 3}', headers=headers)
    assert response.status == 200
    assert await response.json() == {"step": 3}


async def test_read_json_refuses_a_large_declared_body(
    client: TestClient[web.Request, web.Application],
) -> None:
    response = await client.post("/?max=100", data=b"[" + b"1," * 100 + b"1]")
    assert (response.status, await response.text()) == (413, "body_too_large")


async def test_read_json_caps_a_chunked_body_without_content_length(
    client: TestClient[web.Request, web.Application],
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'["'
        for _ in range(20):
            yield b"x" * 1000
        yield b'"]'

    response = await client.post("/?max=5000", data=chunks())
    assert response.request_info.headers.get("Content-Length") is None
    assert (response.status, await response.text()) == (413, "body_too_large")


async def test_read_json_reads_a_chunked_body_within_the_limit(
    client: TestClient[web.Request, web.Application],
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"a": "'
        yield b"y" * 3000
        yield b'"}'

    response = await client.post("/?max=5000", data=chunks())
    assert await response.json() == {"a": "y" * 3000}


async def test_read_json_maps_malformed_bodies(
    client: TestClient[web.Request, web.Application],
) -> None:
    response = await client.post("/", data=b'{"a": 1, "a": 2}')
    assert (response.status, await response.text()) == (400, "duplicate_key")


async def test_read_json_empty_body(client: TestClient[web.Request, web.Application]) -> None:
    refused = await client.post("/", data=b"")
    assert (refused.status, await refused.text()) == (400, "invalid_json")
    allowed = await client.post("/?empty", data=b"")
    assert await allowed.json() == {}


async def test_read_json_refuses_by_content_length_before_reading() -> None:
    # The payload is empty: had read_json read it, allow_empty would answer {}.
    request = make_mocked_request("POST", "/", headers={"Content-Length": "1000000"})
    with pytest.raises(BodyTooLarge) as info:
        await read_json(request, allow_empty=True)
    assert "Content-Length 1000000" in info.value.detail
