"""The front's reader (api/http/front_parse.py): its subset, and nothing past it.

Whatever it does not take is FOREIGN and goes to aiohttp whole, so a request in
doubt must never be read here: each case below is one aiohttp would read in
its own way (or refuse), which the front must leave to it.
"""

from __future__ import annotations

import random
import re

import pytest

from slotward.api.http import hold_handlers
from slotward.api.http.front_parse import (
    FOREIGN,
    INCOMPLETE,
    MAX_HEAD,
    ROUTES,
    Parsed,
    answer_bytes,
    parse,
)
from slotward.api.http.table import ROUTES as TABLE

BODY = b'{"workflow_id":"wf-1"}'
HEAD = [
    b"POST /v1/holds HTTP/1.1",
    b"Host: 127.0.0.1:8080",
    b"Accept: */*",
    b"Accept-Encoding: gzip, deflate",
    b"User-Agent: Python/3.11 aiohttp/3.14.5",
    b"Content-Type: application/json",
    b"Authorization: Bearer sw_key_0123.secret",
    b"Content-Length: %d" % len(BODY),
]


def _request(head: list[bytes] = HEAD, body: bytes = BODY) -> bytes:
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _with(*lines: bytes) -> bytes:
    return _request([*HEAD, *lines])


def _without(name: bytes) -> list[bytes]:
    return [line for line in HEAD if not line.lower().startswith(name.lower() + b":")]


def test_a_clients_create_is_read_whole() -> None:
    wire = _request()
    found = parse(wire, 0, 65536)
    assert isinstance(found, Parsed)
    assert (found.method, found.route, found.hold_id) == ("POST", "/v1/holds", None)
    assert found.header(b"authorization") == "Bearer sw_key_0123.secret"
    assert found.header(b"user-agent") == "Python/3.11 aiohttp/3.14.5"
    assert found.header(b"idempotency-key") is None
    assert found.body == BODY
    assert found.end == len(wire)
    assert not found.close


def _line(line: bytes) -> bytes:
    return _request([line, *HEAD[1:]])


@pytest.mark.parametrize(("action", "route"), [(b"commit", ROUTES[1]), (b"release", ROUTES[2])])
def test_a_holds_commit_and_release_are_read_with_its_id(action: bytes, route: str) -> None:
    found = parse(_line(b"POST /v1/holds/hold_01AB-c~9/%s HTTP/1.1" % action), 0, 65536)
    assert isinstance(found, Parsed)
    assert (found.route, found.hold_id) == (route, "hold_01AB-c~9")


@pytest.mark.parametrize(
    "line",
    [
        b"POST /v1/holds/h%2F1/commit HTTP/1.1",  # percent-decoded by the router
        b"POST /v1/holds/../commit HTTP/1.1",  # dot segments, normalized away
        b"POST /v1/holds/h.1/commit HTTP/1.1",
        b"POST /v1/holds//commit HTTP/1.1",
        b"POST /v1/holds/h1/commit/ HTTP/1.1",
        b"POST /v1/holds/h1/commit?x=1 HTTP/1.1",
        b"POST /v1/holds/h1/extend HTTP/1.1",
        b"POST /v1/holds/h1 HTTP/1.1",
        b"GET /v1/holds/h1/commit HTTP/1.1",
        b"POST /v1/holds/%s/commit HTTP/1.1" % (b"h" * 201),
    ],
)
def test_a_hold_path_the_router_could_read_otherwise_is_foreign(line: bytes) -> None:
    assert parse(_line(line), 0, 65536) == FOREIGN


def test_pipelined_requests_are_read_one_after_another() -> None:
    second = _with(b"Idempotency-Key: k-2")
    wire = _request() + second
    first = parse(wire, 0, 65536)
    assert isinstance(first, Parsed)
    then = parse(wire, first.end, 65536)
    assert isinstance(then, Parsed)
    assert then.header(b"idempotency-key") == "k-2"
    assert then.end == len(wire)


def test_connection_close_is_read_and_spaces_around_a_value_are_not_part_of_it() -> None:
    found = parse(_with(b"Connection:   Close  "), 0, 65536)
    assert isinstance(found, Parsed)
    assert found.close
    assert parse(_with(b"Connection: keep-alive"), 0, 65536) != FOREIGN


@pytest.mark.parametrize(
    "wire",
    [
        _request([b"POST", *HEAD[1:]]),
        _request(b"\r\n".join(HEAD).replace(b"/v1/holds", b"/v1/holds?x=1").split(b"\r\n")),
        _request(b"\r\n".join(HEAD).replace(b"/v1/holds", b"/v1/holds/").split(b"\r\n")),
        _request(b"\r\n".join(HEAD).replace(b"/v1/holds", b"/v1/%68olds").split(b"\r\n")),
        _request(b"\r\n".join(HEAD).replace(b"HTTP/1.1", b"HTTP/1.0").split(b"\r\n")),
        _request(b"\r\n".join(HEAD).replace(b"POST", b"post").split(b"\r\n")),
        _request([b"GET /healthz HTTP/1.1", *HEAD[1:]]),
        _with(b"Transfer-Encoding: chunked"),
        _with(b"Content-Encoding: gzip"),
        _with(b"Expect: 100-continue"),
        _with(b"Upgrade: websocket"),
        _with(b"Cookie: sw_session=abc"),
        _with(b"Connection: upgrade"),
        _with(b"Content-Length: %d" % len(BODY)),  # a header twice
        _with(b"authorization: Bearer other"),  # twice, in another case
        _with(b"X-Folded: a", b" folded"),  # obs-fold
        _with(b"X-Bad : a"),  # a space before the colon
        _with(b"X-Bad\tname: a"),
        _with(b"X-Ctl: a\x01b"),
        _with(b"X-Nul: a\x00b"),
        _with(b"X-Del: a\x7fb"),
        _with("X-Latin: caf\u00e9".encode()),
        _with(b"X-Bare-CR: a\rb"),
        _with(b"no colon at all"),
        _request(_without(b"Content-Length")),
        _request(_without(b"Authorization")),
        _request([*_without(b"Content-Length"), b"Content-Length: +22"]),
        _request([*_without(b"Content-Length"), b"Content-Length: 0x16"]),
        _request([*_without(b"Content-Length"), b"Content-Length: 22, 22"]),
        _request([*_without(b"Content-Length"), b"Content-Length: 99999999999"]),
        _with(b"X-Long: " + b"a" * MAX_HEAD),
    ],
)
def test_anything_outside_the_subset_is_foreign(wire: bytes) -> None:
    assert parse(wire, 0, 65536) == FOREIGN


def test_a_body_over_the_limit_is_left_to_the_app_that_answers_413() -> None:
    assert parse(_request(), 0, len(BODY) - 1) == FOREIGN
    assert isinstance(parse(_request(), 0, len(BODY)), Parsed)


@pytest.mark.parametrize("cut", [1, 10, 24, 60, -len(BODY) - 1, -1])
def test_the_start_of_a_subset_request_is_incomplete(cut: int) -> None:
    assert parse(_request()[:cut], 0, 65536) == INCOMPLETE


def test_the_start_of_another_request_is_foreign_as_soon_as_its_line_is_whole() -> None:
    assert parse(b"GET /healthz HTTP/1.1\r\nHost", 0, 65536) == FOREIGN
    assert parse(b"GET /hea", 0, 65536) == FOREIGN  # its start is none of ours
    assert parse(b"POST /v1/hol", 0, 65536) == INCOMPLETE  # not known yet: could be ours
    assert parse(b"POST /v1/holds/h1/com", 0, 65536) == INCOMPLETE
    assert parse(b"POST /v1/holdsX", 0, 65536) == INCOMPLETE  # its line decides, once whole
    assert parse(b"POST /v1/holdsX HTTP/1.1\r\n", 0, 65536) == FOREIGN
    assert parse(b"POST /v1/holds/" + b"h" * 300, 0, 65536) == FOREIGN  # longer than ours


def test_a_head_that_never_ends_is_foreign_past_the_head_limit() -> None:
    start = b"POST /v1/holds HTTP/1.1\r\nX-Slow: "
    assert parse(start + b"a" * 100, 0, 65536) == INCOMPLETE
    assert parse(start + b"a" * MAX_HEAD, 0, 65536) == FOREIGN


def test_an_answer_is_whole_and_says_its_length_date_and_server() -> None:
    out = answer_bytes(201, [("Content-Type", "application/json"), ("Idempotency-Key", "k")],
                       b"{}", date="Thu, 03 Dec 2026 12:00:00 GMT", server="slotward",
                       close=False)  # fmt: skip
    assert out == (
        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nIdempotency-Key: k\r\n"
        b"Content-Length: 2\r\nDate: Thu, 03 Dec 2026 12:00:00 GMT\r\nServer: slotward\r\n"
        b"\r\n{}"
    )
    closing = answer_bytes(409, [], b"", date="d", server="s", close=True)
    assert closing.startswith(b"HTTP/1.1 409 Conflict\r\n")
    assert b"\r\nConnection: close\r\n\r\n" in closing


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb"])
def test_an_answer_header_that_could_split_the_answer_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="line break"):
        answer_bytes(200, [("Idempotency-Key", value)], b"", date="d", server="s", close=False)


def test_the_front_serves_only_routes_the_app_has_and_serves_them_alike() -> None:
    """A route renamed or changed in the table (api/http/table.py) cannot leave the
    front serving the old one: each of the front's routes is a POST of the table,
    behind a key, with no query parameter (the front takes none), answered by the
    handler whose ``answer_*`` the front calls."""
    by_path = {(r.method, r.path): r for r in TABLE}
    handlers = [hold_handlers.create_hold, hold_handlers.commit_hold, hold_handlers.release_hold]
    for path, handler in zip(ROUTES, handlers, strict=True):
        route = by_path[("POST", path)]
        assert route.handler is handler
        assert route.auth
        assert [p.where for p in route.params] == ["path"] * path.count("{")


# The header grammar of the subset, written plainly: a head is read only if its
# lines are all of it. The reader checks this in one scan (front_parse._FIELD);
# the two must agree on every head.
_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_VISIBLE = rb"(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?"
_GRAMMAR = re.compile(rb"(?:(%s):[ \t]*(%s)[ \t]*\r\n)*" % (_TOKEN, _VISIBLE))
_PIECES = [b"X-A", b"x-b", b":", b" ", b"\t", b"v", b"1", b"\r\n", b"\r", b"\n", b"\x00",
           b"\x7f", b"\xc3\xa9", b"(", b"\"", b"Idempotency-Key", b"  "]  # fmt: skip


def test_the_one_scan_reads_exactly_the_heads_of_the_plain_grammar() -> None:
    rng = random.Random(16)
    checked = 0
    for _ in range(4000):
        lines = []
        for n in range(rng.randint(0, 3)):
            if rng.random() < 0.5:  # a well-formed line, perhaps mangled below
                line = b"X-H%d: %s\r\n" % (n, rng.choice([b"v", b"a b", b"", b"x\t"]))
            else:
                line = b"".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 6)))
            lines.append(line)
        block = b"".join(lines)
        if block and not block.endswith(b"\r\n"):
            block += b"\r\n"  # the head's lines are what comes before its blank line
        if b"\r\n\r\n" in b"\r\n" + block:
            continue  # not a head: its end would come earlier
        plain = _GRAMMAR.fullmatch(block) is not None
        wire = b"POST /v1/holds HTTP/1.1\r\nAuthorization: Bearer k\r\nContent-Length: 0\r\n"
        found = parse(wire + block + b"\r\n", 0, 65536)
        # A plain head's lines each end in CRLF and hold none before: split, named.
        names = [line.split(b":", 1)[0].lower() for line in block.split(b"\r\n")[:-1]]
        given = {b"authorization", b"content-length", *names}
        if plain and len(given) == len(names) + 2:  # no header named twice
            assert isinstance(found, Parsed), block
        else:
            assert found == FOREIGN, block
        checked += 1
    assert checked > 3000


def test_a_head_of_stray_bytes_is_one_match_not_one_a_byte() -> None:
    # A client may send MAX_HEAD bytes of anything: the scan must not make a
    # match (a tuple, a copy) of each of them before it says foreign.
    from slotward.api.http.front_parse import _FIELD

    for block in (b"\x01" * MAX_HEAD, b"X-A: 1\r\n" + b"(\r\n" * 2000, b"a" * 500):
        strays = [m for m in _FIELD.findall(block) if m[2]]
        assert len(strays) == 1
