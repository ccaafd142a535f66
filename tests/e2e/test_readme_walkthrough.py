"""README.md's "A retry, step by step" is what the server answers, line by line.

The test reads the README when it runs, sends its curl commands as curl would
(tests/e2e/readme_walkthrough.py) to a real server, and checks every answer the
README shows; the README cannot drift from the server without this failing on the
README line that drifted. The key is the one `make run` prints (tenant ``demo``,
agent ``demo-agent``, api/cli/serving.py), so the README's key prefix is the
server's. The other tests prove the checker is not vacuous: a README changed in
one status, header, prefix or field fails on that line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.e2e.conftest import Server
from tests.e2e.readme_walkthrough import (
    README_BASE,
    Answer,
    Line,
    Step,
    Walk,
    WalkthroughError,
    Wire,
    check,
    parse,
    request_bytes,
    run,
    section,
)

README = Path(__file__).parents[2] / "README.md"
TITLE = "A retry, step by step"


def walkthrough() -> list[Line]:
    return section(README.read_text(encoding="utf-8"), TITLE)


async def walk(server: Server, lines: list[Line]) -> tuple[list[Step], Walk]:
    agent = await server.key("demo", "demo-agent", "agent", 50)  # `make run`'s demo key
    assert agent.secret is not None
    steps = parse(lines)
    return steps, await run(steps, server.base, {"KEY": agent.secret})


def report(problems: list[str]) -> str:
    return f"README.md's '{TITLE}' is not what the server answers:\n  " + "\n  ".join(problems)


async def test_the_readme_walkthrough_is_what_the_server_answers(server: Server) -> None:
    steps, walked = await walk(server, walkthrough())
    problems = check(steps, walked)
    assert problems == [], report(problems)
    assert len(walked.answers) >= 4  # the hold, its retry, the commit, the release
    assert server.counts()["holds"] == 1  # the retry landed on the first hold


# Each change touches one line of an answer block, so the commands (and the real
# answers) stay those of the README; the checker must name that line.
CHANGES = [
    pytest.param("HTTP/1.1 201 Created", "HTTP/1.1 200 OK", id="status code"),
    pytest.param("HTTP/1.1 201 Created", "HTTP/1.1 201 OK", id="reason"),
    pytest.param("Idempotent-Replayed: false", "Idempotent-Replayed: true", id="header value"),
    pytest.param("Idempotent-Replayed: true", "Idempotent-Replayed: false", id="retry header"),
    pytest.param("Idempotency-Key: idem_cbd9185a", "Idempotency-Key: idem_cbd9185b", id="key"),
    pytest.param(
        "Idempotency-Key: idem_cbd9185a...  ", "Idempotency-Key: idem_0...  ", id="retry key"
    ),
    pytest.param("Idempotent-Replayed: true", "Idempotent-Replays: true", id="header name"),
    pytest.param('"key":"idem_cbd9185a', '"key":"idem_cbd9185e', id="body key"),
    pytest.param('"id":"hold_', '"id":"held_', id="id kind"),
    pytest.param('"status":"held"', '"status":"committed"', id="status field"),
    pytest.param('"token":1', '"token":true', id="token type"),
    pytest.param('"end":"2030-10-14T14:30:00Z"', '"end":"2030-10-14T15:00:00Z"', id="end"),
    pytest.param('"expires_at":"...", ...}', '"expires_at":"..."}', id="every field"),
]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("old", "new"), CHANGES)
async def test_a_changed_answer_in_the_readme_fails_on_its_line(
    server: Server, old: str, new: str
) -> None:
    lines = walkthrough()
    steps, walked = await walk(server, lines)
    assert check(steps, walked) == []
    changed, number = change(lines, old, new)
    changed_steps = parse(changed)
    assert [commands(s) for s in changed_steps] == [commands(s) for s in steps]
    problems = check(changed_steps, walked)
    assert any(p.startswith(f"README.md:{number}:") for p in problems), problems


def change(lines: list[Line], old: str, new: str) -> tuple[list[Line], int]:
    """``lines`` with the first line holding ``old`` changed, and that line's number."""
    at = next(i for i, line in enumerate(lines) if old in line.text)
    edited = Line(lines[at].number, lines[at].text.replace(old, new, 1))
    return [*lines[:at], edited, *lines[at + 1 :]], edited.number


def commands(step: Step) -> object:
    return step.command if isinstance(step, Answer) else step


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_the_claims_in_comments_are_checked(server: Server) -> None:
    """A retry under another key, a replay not byte for byte, a refused commit: each fails."""
    lines = walkthrough()
    steps, walked = await walk(server, lines)
    _, retry, commit = walked.answers[:3]
    key = retry.header("Idempotency-Key")
    assert key is not None
    other_key = key[:-1] + ("0" if key[-1] != "0" else "1")  # the shown prefix still holds
    cases = [
        (1, with_header(retry, "Idempotency-Key", other_key), "<- the same key"),
        (1, dataclasses.replace(retry, body=retry.body + b" "), "byte for byte"),
        (2, dataclasses.replace(commit, status="HTTP/1.1 409 Conflict"), "/commit"),
    ]
    for index, wire, marker in cases:
        answers = list(walked.answers)
        answers[index] = wire
        problems = check(steps, Walk(answers, walked.variables))
        number = next(line.number for line in lines if marker in line.text)
        assert any(p.startswith(f"README.md:{number}:") for p in problems), (marker, problems)


def with_header(wire: Wire, name: str, value: str) -> Wire:
    headers = tuple((n, value if n.lower() == name.lower() else v) for n, v in wire.headers)
    return dataclasses.replace(wire, headers=headers)


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("<- the same key", "<- a fresh key", "a claim the test cannot check"),
        ("curl -si -X POST", "curl -si -k -X POST", "a curl word this test cannot send"),
        ("HTTP/1.1 201 Created", "201 Created", "a block the walk-through cannot read"),
        ('"token":1,', '"token":{"n":1},', "a body sketch the test cannot read"),
    ],
)
def test_a_readme_the_checker_cannot_read_is_a_failure_not_a_pass(
    old: str, new: str, says: str
) -> None:
    changed, number = change(walkthrough(), old, new)
    with pytest.raises(WalkthroughError, match=f"README.md:{number}: {says}"):
        parse(changed)


def test_a_section_without_answers_is_a_failure_not_a_pass() -> None:
    lines = walkthrough()
    answer = next(i for i, line in enumerate(lines) if line.text.startswith("HTTP/"))
    with pytest.raises(WalkthroughError, match="shows no answer: nothing would be checked"):
        parse(lines[: answer - 1])  # the key and the first command, before its answer
    with pytest.raises(WalkthroughError, match="no section"):
        section(README.read_text(encoding="utf-8"), "A section nobody wrote")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_the_requests_are_the_bytes_curl_sends() -> None:
    """The emulation in readme_walkthrough.py against the real curl, command by command."""
    variables = {"KEY": "sw_key_x.secret", "HOLD": "hold_01a2x"}
    for step in parse(walkthrough()):
        if not isinstance(step, Answer):
            continue
        base, received = await curl_sends(step.command.words, variables)
        expected = request_bytes(step.command, base, variables)
        assert without_agent(received) == without_agent(expected), f"README.md:{step.command.line}"


async def curl_sends(words: tuple[str, ...], variables: dict[str, str]) -> tuple[str, bytes]:
    """What curl sends for ``words`` (variables expanded) to a listener that answers 204."""
    got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        got.set_result(head + await reader.readexactly(int(length[1]) if length else 0))
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(listen, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    argv = [expand(word, variables).replace(README_BASE, base) for word in words]
    argv.insert(1, "-q")  # first, so no ~/.curlrc adds to the request
    try:
        curl = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "no_proxy": "*"},  # straight to the listener
        )
        assert await asyncio.wait_for(curl.wait(), 15) == 0
        return base, await asyncio.wait_for(got, 15)
    finally:
        listener.close()
        await listener.wait_closed()


def expand(word: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        word = word.replace(f"${name}", value)
    return word


def without_agent(request: bytes) -> bytes:
    """The request without its User-Agent line: it names curl's version."""
    return b"\r\n".join(h for h in request.split(b"\r\n") if not h.startswith(b"User-Agent:"))
