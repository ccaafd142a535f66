"""`slotward --help` and every subcommand's help read as plain text, not reST."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from slotward.api.cli.main import _parser
from slotward.api.config import Config


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:  # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_no_help_text_shows_rest_markup() -> None:
    seen = list(_parsers(_parser(Config())))
    assert len(seen) > 5  # the walk reached the subcommands
    for parser in seen:
        text = parser.format_help()
        for markup in ("``", ":func:", ":class:", ".. "):
            assert markup not in text, f"{parser.prog}: {markup!r} in its help"
