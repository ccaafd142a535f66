"""``slotward providers list``: the calendar providers this installation has.

The built-ins and every plugin registered under the entry point group
``slotward.providers`` that loads (adapters/providers/registry.py); a plugin
left out is named on stderr, with why. A table for people, ``--json`` for
one JSON list.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from slotward.adapters.providers.registry import ProviderInfo, discover
from slotward.api.config import Config

__all__ = ["add_providers_parser", "provider_rows", "run_providers"]

_COLUMNS = ("name", "source", "writes", "credentials", "incremental", "schemes", "description")


def add_providers_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    providers = sub.add_parser("providers", help="the calendar providers installed")
    commands = providers.add_subparsers(dest="providers", required=True)
    listing = commands.add_parser("list", help="list the built-in and plugin calendar providers")
    listing.add_argument("--json", action="store_true", help="one JSON list instead of a table")


def provider_rows(infos: list[ProviderInfo]) -> list[dict[str, Any]]:
    """One JSON object per provider, with the table's columns."""
    return [
        {
            "name": info.name,
            "source": info.source,
            "writes": info.capabilities.writes,
            "credentials": info.capabilities.credentials,
            "incremental": info.capabilities.incremental,
            "schemes": list(info.capabilities.schemes),
            "description": info.capabilities.description,
        }
        for info in infos
    ]


def run_providers(config: Config, args: argparse.Namespace) -> int:
    rows = provider_rows(discover(config.providers().settings))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table(rows))
    return 0


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return " ".join(str(value).split())  # a description's newlines would break the table


def _table(rows: list[dict[str, Any]]) -> str:
    cells = [list(_COLUMNS), *[[_cell(row[c]) for c in _COLUMNS] for row in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )
