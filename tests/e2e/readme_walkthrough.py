"""The README's walk-through read as a script: its curl commands and the answers it shows.

``parse`` turns a README section into steps (shell assignments, curl commands, the
answer shown after a command); ``run`` sends each command as curl would send it,
byte for byte, to a real server; ``check`` compares every shown answer with the
real one and names the README line of each difference. Parsing and checking are
separate from running so a test can check a changed README against real answers.

What a shown answer claims (anything the reader can read as a fact is checked,
anything this module cannot read is a problem, never skipped):
- the status line, code and reason;
- each header shown, with its value; a value ending in ``...`` is a prefix;
- the body sketch's fields given literally; ``"..."`` means "present", a string
  ending in ``...`` is a prefix, and a bare ``...`` means "more fields follow"
  (without one the sketch lists every field);
- ``<- comments`` on header lines are claims this module knows by their words
  (``CLAIMS``); comments in the body sketch are prose;
- a command shown without an answer (the commit, the release) is shown as one
  that works: its answer must be a 2xx.

One exception, on purpose: a hold's ``id`` is a time-ordered id (engine/clock.py,
``TimeOrderedIds``): after ``hold_`` come the wall clock's milliseconds in hex, so
the README's ``hold_01a2...`` is the prefix of an id made between 2026-11-21 and
2027-01-10, and a literal prefix check would fail on every other day. For the
fields in ``TIME_ORDERED`` the shown prefix's letters are checked (``hold_``) and
the digits after them must be hex, as in a real id.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tests.e2e.rawhttp import BOUND

__all__ = [
    "README_BASE",
    "Answer",
    "Assign",
    "Curl",
    "Line",
    "Shown",
    "Step",
    "Walk",
    "WalkthroughError",
    "Wire",
    "check",
    "parse",
    "request_bytes",
    "run",
    "section",
]

README_BASE = "http://127.0.0.1:8080"  # where the README's server listens (`make run`)
CURL_AGENT = "curl/7.88.1"  # the User-Agent of the curl the request bytes were checked with
ELLIPSIS = "..."
TIME_ORDERED = frozenset({"id"})
CLAIMS = {
    "the same key": "same_key",
    "the stored first answer, byte for byte": "first_body",
}


class WalkthroughError(Exception):
    """The README says something this module cannot read: a problem, not a skip."""


@dataclass(frozen=True)
class Line:
    number: int  # in README.md, from 1
    text: str


@dataclass(frozen=True)
class Assign:
    """``NAME=value`` in a shell block: the reader fills in ``value`` themselves."""

    line: int
    name: str
    placeholder: str


@dataclass(frozen=True)
class Curl:
    line: int
    words: tuple[str, ...]  # as the shell passes them to curl, variables not yet expanded
    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    data: str | None


@dataclass(frozen=True)
class Header:
    line: int
    name: str
    value: str
    claim: str | None  # a CLAIMS value


@dataclass(frozen=True)
class Field:
    line: int
    name: str
    literal: str  # JSON text as shown


@dataclass(frozen=True)
class Shown:
    """An answer block: what the README says the command before it gets."""

    line: int  # the status line's
    status: str
    headers: tuple[Header, ...]
    fields: tuple[Field, ...]
    partial: bool  # a bare ``...`` in the sketch: more fields follow
    has_body: bool


@dataclass(frozen=True)
class Answer:
    """A command and the answer the README shows for it (``None``: it shows none)."""

    command: Curl
    shown: Shown | None


Step = Assign | Answer


@dataclass(frozen=True)
class Wire:
    """A real answer as the server sent it."""

    status: str  # "HTTP/1.1 201 Created"
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for n, v in self.headers if n.lower() == name.lower()), None)


@dataclass
class Walk:
    """The real answers of one run, and the values the run filled in."""

    answers: list[Wire] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)


def section(readme: str, title: str) -> list[Line]:
    """The lines of the ``## title`` section, numbered as in the file."""
    lines = readme.splitlines()
    try:
        start = lines.index(f"## {title}")
    except ValueError:
        raise WalkthroughError(f"README.md has no section '## {title}'") from None
    body: list[Line] = []
    for number, text in enumerate(lines[start + 1 :], start + 2):
        if text.startswith(("## ", "# ")):
            break
        body.append(Line(number, text))
    return body


def parse(lines: Sequence[Line]) -> list[Step]:
    """The section's steps in order: each answer block belongs to the command before it."""
    steps: list[Step] = []
    for info, block in _blocks(lines):
        if info == "sh":
            steps += _shell(block)
        elif info == "" and block and block[0].text.startswith("HTTP/"):
            last = steps[-1] if steps else None
            if not isinstance(last, Answer) or last.shown is not None:
                raise WalkthroughError(f"README.md:{block[0].number}: an answer after no command")
            steps[-1] = Answer(last.command, _shown(block))
        else:
            where = block[0].number if block else "?"
            raise WalkthroughError(f"README.md:{where}: a block the walk-through cannot read")
    if not any(isinstance(s, Answer) and s.shown for s in steps):
        raise WalkthroughError("the walk-through shows no answer: nothing would be checked")
    return steps


def _blocks(lines: Sequence[Line]) -> list[tuple[str, list[Line]]]:
    blocks: list[tuple[str, list[Line]]] = []
    current: list[Line] | None = None
    for line in lines:
        if line.text.startswith("```"):
            if current is None:
                current = []
                blocks.append((line.text[3:].strip(), current))
            else:
                current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        raise WalkthroughError("README.md: a code block in the walk-through is never closed")
    return blocks


def _shell(block: Sequence[Line]) -> list[Step]:
    """Commands as the shell splits them: ``\\`` continues a line, so does an open quote."""
    steps: list[Step] = []
    pending: list[Line] = []
    for line in block:
        pending.append(line)
        text = "\n".join(p.text for p in pending)
        if text.endswith("\\"):
            continue
        try:
            words = shlex.split(text.replace("\\\n", ""), comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        if words:
            steps.append(_command(pending[0].number, words))
        pending = []
    if pending:
        raise WalkthroughError(f"README.md:{pending[0].number}: a command that never ends")
    return steps


def _command(number: int, words: list[str]) -> Step:
    if len(words) == 1 and re.fullmatch(r"[A-Z_]+=\S+", words[0]):
        name, _, placeholder = words[0].partition("=")
        return Assign(number, name, placeholder)
    if words[0] != "curl":
        raise WalkthroughError(f"README.md:{number}: not a curl command: {words[0]}")
    return Answer(_curl(number, words[1:]), None)


def _curl(number: int, words: list[str]) -> Curl:
    method, url, data = None, None, []
    headers: list[tuple[str, str]] = []
    options = iter(words)
    for word in options:
        if word in ("-X", "--request"):
            method = next(options)
        elif word in ("-H", "--header"):
            name, _, value = next(options).partition(":")
            headers.append((name.strip(), value.strip()))
        elif word in ("-d", "--data"):
            data.append(next(options))
        elif re.fullmatch(r"-[si]+", word):
            pass  # silent, include the head in the output: the request is the same
        elif word.startswith("http") and url is None:
            url = word
        else:
            raise WalkthroughError(f"README.md:{number}: a curl word this test cannot send: {word}")
    if url is None:
        raise WalkthroughError(f"README.md:{number}: a curl command without a URL")
    if any(d.startswith("@") for d in data):
        raise WalkthroughError(f"README.md:{number}: curl -d @file is not supported")
    body = "&".join(data) if data else None  # several -d are joined with '&'
    method = method or ("POST" if body is not None else "GET")
    return Curl(number, ("curl", *words), method, url, tuple(headers), body)


def _comment(text: str) -> tuple[str, str | None]:
    """A line without its ``<- comment``, and the comment."""
    match = re.search(r"\s+<-\s*(.*)$", text)
    if match is None:
        return text.rstrip(), None
    return text[: match.start()].rstrip(), match[1].strip()


def _shown(block: Sequence[Line]) -> Shown:
    status, _ = _comment(block[0].text)
    headers: list[Header] = []
    rest = list(block[1:])
    while rest and rest[0].text.strip():
        line = rest.pop(0)
        text, comment = _comment(line.text)
        name, colon, value = text.partition(":")
        if not colon:
            raise WalkthroughError(f"README.md:{line.number}: not a header: {line.text}")
        claim = None
        if comment is not None:
            if comment not in CLAIMS:
                raise WalkthroughError(
                    f"README.md:{line.number}: a claim the test cannot check: '<- {comment}'"
                    " (teach CLAIMS in tests/e2e/readme_walkthrough.py)"
                )
            claim = CLAIMS[comment]
        headers.append(Header(line.number, name.strip(), value.strip(), claim))
    fields, partial = _sketch([r for r in rest if r.text.strip()])
    return Shown(block[0].number, status, tuple(headers), fields, partial, bool(fields))


_STRING = r'"(?:[^"\\]|\\.)*"'
_TOKEN = re.compile(
    rf"\s*(?:(?P<field>({_STRING})\s*:\s*({_STRING}|-?\d+(?:\.\d+)?|true|false|null))"
    r"|(?P<more>\.\.\.)|(?P<punct>[{},]))"
)


def _sketch(lines: Sequence[Line]) -> tuple[tuple[Field, ...], bool]:
    """The literal fields of a body sketch like ``{"a":1, "b":"x...", ...}``."""
    fields: list[Field] = []
    partial = False
    for line in lines:
        text, _ = _comment(line.text)
        at = 0
        while at < len(text.rstrip()):
            match = _TOKEN.match(text, at)
            if match is None:
                raise WalkthroughError(
                    f"README.md:{line.number}: a body sketch the test cannot read: {text[at:]!r}"
                )
            if match["field"]:
                fields.append(Field(line.number, json.loads(match[2]), match[3]))
            partial = partial or bool(match["more"])
            at = match.end()
    return tuple(fields), partial


async def run(steps: Sequence[Step], base: str, given: Mapping[str, str]) -> Walk:
    """Send every command to the server at ``base``, in order; ``given`` fills in variables.

    A variable not given (``HOLD``) is a value an earlier answer showed: its
    placeholder is one of the sketch's values, and the real answer's value is used.
    """
    walk = Walk()
    seen: dict[str, str] = {}  # shown placeholder -> the real value
    for step in steps:
        if isinstance(step, Assign):
            walk.variables[step.name] = _fill(step, given, seen)
            continue
        walk.answers.append(await _send(step.command, base, walk.variables))
        if step.shown is not None:
            seen.update(_placeholders(step.shown, walk.answers[-1]))
    return walk


def _fill(step: Assign, given: Mapping[str, str], seen: Mapping[str, str]) -> str:
    if step.name in given:
        value = given[step.name]
        prefix = step.placeholder.removesuffix(ELLIPSIS)
        if not value.startswith(prefix):
            raise WalkthroughError(
                f"README.md:{step.line}: {step.name} is {value}, not {prefix}..."
            )
        return value
    if step.placeholder not in seen:
        raise WalkthroughError(
            f"README.md:{step.line}: {step.name}={step.placeholder} is no value an answer showed"
        )
    return seen[step.placeholder]


def _placeholders(shown: Shown, wire: Wire) -> dict[str, str]:
    try:
        body = json.loads(wire.body)
    except ValueError:
        return {}
    values = {}
    for f in shown.fields:
        literal = json.loads(f.literal)
        if isinstance(literal, str) and isinstance(body, dict) and f.name in body:
            values[literal] = str(body[f.name])
    return values


def request_bytes(command: Curl, base: str, variables: Mapping[str, str]) -> bytes:
    """What curl sends for ``command`` with its URL moved from the README's server to ``base``."""

    def expand(text: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match[1] or match[2]
            if name not in variables:
                raise WalkthroughError(f"README.md:{command.line}: ${name} is never set")
            return variables[name]

        # Every word, single-quoted ones too: none of the README's holds a '$'.
        return re.sub(r"\$(?:(\w+)|\{(\w+)\})", value, text)

    url = expand(command.url)
    if not url.startswith(README_BASE):
        raise WalkthroughError(f"README.md:{command.line}: a URL not on {README_BASE}: {url}")
    target = urlsplit(base + url.removeprefix(README_BASE))
    headers = [("Host", target.netloc), ("User-Agent", CURL_AGENT), ("Accept", "*/*")]
    headers += [(name, expand(value)) for name, value in command.headers]
    body = b""
    if command.data is not None:
        body = expand(command.data).encode()  # as given: no newline added, none removed
        length = ("Content-Length", str(len(body)))
        if any(name.lower() == "content-type" for name, _ in command.headers):
            headers.append(length)
        else:  # curl's default for -d, after the length as curl writes it
            headers += [length, ("Content-Type", "application/x-www-form-urlencoded")]
    path = target.path + (f"?{target.query}" if target.query else "")
    head = [f"{command.method} {path} HTTP/1.1"] + [f"{n}: {v}" for n, v in headers]
    return "\r\n".join(head).encode() + b"\r\n\r\n" + body


async def _send(command: Curl, base: str, variables: Mapping[str, str]) -> Wire:
    target = urlsplit(base)
    assert target.hostname is not None
    reader, writer = await asyncio.open_connection(target.hostname, target.port)
    try:
        writer.write(request_bytes(command, base, variables))
        await writer.drain()
        return await asyncio.wait_for(_read_answer(reader), BOUND)
    finally:
        writer.close()
        await writer.wait_closed()


async def _read_answer(reader: asyncio.StreamReader) -> Wire:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status, *lines = head.removesuffix("\r\n\r\n").split("\r\n")
    headers = tuple((n.strip(), v.strip()) for n, _, v in (h.partition(":") for h in lines))
    length = Wire(status, headers, b"").header("Content-Length")
    if length is None:  # slotward's answers all carry one; a stream would need more here
        raise WalkthroughError(f"an answer without Content-Length: {status}")
    return Wire(status, headers, await reader.readexactly(int(length)))


def check(steps: Sequence[Step], walk: Walk) -> list[str]:
    """Every difference between the answers shown and ``walk``'s, each naming its line."""
    problems: list[str] = []
    answered = [s for s in steps if isinstance(s, Answer)]
    previous: dict[str, str] = {}  # header name -> its real value in the last answer showing it
    first: Wire | None = None
    for step, wire in zip(answered, walk.answers, strict=True):
        if step.shown is None:
            problems += _unshown(step.command, wire)
            continue
        first = first or wire
        problems += _status(step.shown, wire)
        for header in step.shown.headers:
            problems += _header(header, wire, previous.get(header.name.lower()), first)
            previous[header.name.lower()] = wire.header(header.name) or ""
        problems += _body(step.shown, wire)
    return problems


def _unshown(command: Curl, wire: Wire) -> list[str]:
    """A command shown without its answer is shown as one that works."""
    if wire.status.split(" ")[1].startswith("2"):
        return []
    return [f"README.md:{command.line}: shows no answer, the server refused: {wire.status}"]


def _status(shown: Shown, wire: Wire) -> list[str]:
    if shown.status == wire.status:
        return []
    return [f"README.md:{shown.line}: shows '{shown.status}', the server answered '{wire.status}'"]


def _header(header: Header, wire: Wire, previous: str | None, first: Wire) -> list[str]:
    where = f"README.md:{header.line}: {header.name}"
    real = wire.header(header.name)
    if real is None:
        return [f"{where}: the server sent no such header"]
    problems = []
    if not _matches(header.value, real):
        problems.append(f"{where}: shows '{header.value}', the server sent '{real}'")
    if header.claim == "same_key" and real != previous:
        problems.append(f"{where}: claims the same key as before ({previous}), got {real}")
    if header.claim == "first_body" and wire.body != first.body:
        problems.append(f"{where}: claims the first answer byte for byte, got {wire.body!r}")
    return problems


def _matches(shown: str, real: str) -> bool:
    if shown.endswith(ELLIPSIS):
        return real.startswith(shown.removesuffix(ELLIPSIS))
    return shown == real


def _body(shown: Shown, wire: Wire) -> list[str]:
    if not shown.has_body:
        return []
    try:
        body: Any = json.loads(wire.body)
    except ValueError:
        return [f"README.md:{shown.fields[0].line}: shows a JSON body, got {wire.body!r}"]
    if not isinstance(body, dict):
        return [f"README.md:{shown.fields[0].line}: shows a JSON object, got {body!r}"]
    problems = [p for f in shown.fields if (p := _field(f, body))]
    extra = sorted(set(body) - {f.name for f in shown.fields})
    if not shown.partial and extra:
        last = shown.fields[-1].line  # where a bare ``...`` would say "and more"
        problems.append(f"README.md:{last}: the sketch has no '...', yet the server sent {extra}")
    return problems


def _field(f: Field, body: dict[str, Any]) -> str | None:
    where = f'README.md:{f.line}: "{f.name}"'
    if f.name not in body:
        return f"{where}: the server's answer has no such field"
    shown, real = json.loads(f.literal), body[f.name]
    if isinstance(shown, str) and shown.endswith(ELLIPSIS):
        if not isinstance(real, str):
            return f"{where}: shows a string, the server sent {real!r}"
        if f.name in TIME_ORDERED:
            return _time_ordered(where, shown, real)
        return None if _matches(shown, real) else f"{where}: shows {f.literal}, got {real!r}"
    if json.dumps(shown) != json.dumps(real):  # 1 is not true, as JSON sees it
        return f"{where}: shows {f.literal}, the server sent {json.dumps(real)}"
    return None


def _time_ordered(where: str, shown: str, real: str) -> str | None:
    """``hold_01a2...``: the letters are the kind of id, the hex digits a sample of the clock."""
    sample = re.fullmatch(r"([a-z]+_)[0-9a-f]*\.\.\.", shown)
    if sample is None:
        return f"{where}: shows {shown!r}, not the sample of a time-ordered id"
    if re.fullmatch(re.escape(sample[1]) + r"[0-9a-f]{44}", real) is None:
        return f"{where}: shows {shown!r}, the server sent {real!r}"
    return None
