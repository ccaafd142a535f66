"""The calendar providers a server has: the built-ins and the installed plugins.

One registry (STYLE 16): the binding routes, ``slotward providers list`` and
the workers all ask it. A built-in is imported by its module path when the
registry is asked, not when this module is. A plugin is an entry point of
group ``slotward.providers`` whose name is the provider's and whose object
is a factory (engine/calendars.py ``ProviderFactory``): called with the
server's :class:`ProviderSettings`, it returns a ``CalendarProvider``.

A plugin that cannot be used (it does not import, its factory raises, it
returns something that is not a provider, its name is malformed or taken) is
logged on ``slotward.providers`` and left out: one broken package never keeps
the server from starting. The log line names the plugin and what failed; no
traceback (a plugin's stack is its author's business, and may show its
settings), and the settings handed over carry no secret.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import re
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, cast

from slotward.engine.calendars import Capabilities, ProviderSettings
from slotward.engine.provider_ports import CalendarProvider

__all__ = [
    "BUILTINS",
    "BUILTIN_SOURCE",
    "ENTRY_POINT_GROUP",
    "NAME_RULE",
    "ProviderInfo",
    "discover",
    "load_providers",
]

ENTRY_POINT_GROUP = "slotward.providers"
NAME_RULE = "[a-z][a-z0-9_-]{0,31}"  # a provider's name, as bindings and the CLI show it
_NAME = re.compile(NAME_RULE)
BUILTIN_SOURCE = "builtin"
# name -> (module, factory): imported only when asked for.
BUILTINS: dict[str, tuple[str, str]] = {
    "caldav": ("slotward.adapters.providers.caldav", "caldav_provider"),
    "ics": ("slotward.adapters.providers.ics", "ics_provider"),
}
_METHODS = ("busy", "put_event", "delete_event", "close")
_REASON_CHARS = 200  # a plugin's exception message is its own text: kept short

log = logging.getLogger("slotward.providers")


@dataclass(frozen=True)
class ProviderInfo:
    """One usable provider: its name, what it can do and where it came from
    (``"builtin"``, or the distribution that registered it and its version)."""

    name: str
    capabilities: Capabilities
    source: str


@dataclass(frozen=True)
class _Candidate:
    name: str
    source: str
    load: Callable[[], object]  # the factory, imported


class _Unusable(Exception):
    """Why a candidate was left out (the message is the log line's reason)."""


def load_providers(settings: ProviderSettings) -> dict[str, CalendarProvider]:
    """Every usable provider by name, built with ``settings``: the built-ins, then
    the plugins. The caller owns them: it closes each (``await provider.close()``)."""
    return {info.name: provider for info, provider in _build(settings)}


def discover(settings: ProviderSettings | None = None) -> list[ProviderInfo]:
    """What :func:`load_providers` would give, described, by name (for
    ``slotward providers list``). Each provider is built to read its
    capabilities and closed again."""
    built = _build(settings or ProviderSettings())
    _close_all([provider for _, provider in built])
    return sorted((info for info, _ in built), key=lambda info: info.name)


def _build(settings: ProviderSettings) -> list[tuple[ProviderInfo, CalendarProvider]]:
    built: list[tuple[ProviderInfo, CalendarProvider]] = []
    taken: set[str] = set()
    for candidate in _candidates():
        if candidate.name in taken:
            # The same distribution seen twice on sys.path is one plugin.
            continue
        try:
            provider = _instantiate(candidate, settings)
        except _Unusable as why:
            _skip(candidate, str(why))
            continue
        taken.add(candidate.name)
        built.append(
            (ProviderInfo(candidate.name, provider.capabilities, candidate.source), provider)
        )
    return built


def _candidates() -> Iterable[_Candidate]:
    for name, (module, attribute) in BUILTINS.items():
        yield _Candidate(name, BUILTIN_SOURCE, _importer(module, attribute))
    seen: dict[str, str] = {}
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=_entry_point_order):
        candidate = _Candidate(point.name, _source(point), point.load)
        if not _NAME.fullmatch(point.name):
            _skip(candidate, f"its name does not match {NAME_RULE}")
        elif point.name in BUILTINS:
            _skip(candidate, f"it would shadow the built-in provider {point.name!r}")
        elif seen.setdefault(point.name, candidate.source) != candidate.source:
            _skip(candidate, f"the name is taken by {seen[point.name]}")
        else:
            yield candidate


def _entry_point_order(point: EntryPoint) -> tuple[str, str]:
    return (point.name, _source(point))


def _source(point: EntryPoint) -> str:
    dist = point.dist
    if dist is None:
        return f"entry point {point.value}"
    return f"{dist.name} {dist.version}"


def _importer(module: str, attribute: str) -> Callable[[], object]:
    def load() -> object:
        return getattr(importlib.import_module(module), attribute)

    return load


def _instantiate(candidate: _Candidate, settings: ProviderSettings) -> CalendarProvider:
    try:
        factory = candidate.load()
    except Exception as error:
        raise _Unusable(f"it does not import: {_said(error)}") from error
    if not callable(factory):
        raise _Unusable("its entry point names no factory (not callable)")
    try:
        provider = factory(settings)
    except Exception as error:
        raise _Unusable(f"its factory raised {_said(error)}") from error
    _check(candidate.name, provider)
    return cast(CalendarProvider, provider)


def _check(name: str, provider: object) -> None:
    """Whether ``provider`` looks like a CalendarProvider named ``name``."""
    missing = [m for m in _METHODS if not inspect.iscoroutinefunction(getattr(provider, m, None))]
    if missing:
        raise _Unusable(f"its factory returned no CalendarProvider (no async {', '.join(missing)})")
    if not isinstance(getattr(provider, "capabilities", None), Capabilities):
        raise _Unusable("its capabilities are not a slotward Capabilities")
    if getattr(provider, "name", None) != name:
        raise _Unusable(f"it calls itself {getattr(provider, 'name', None)!r}, not {name!r}")


def _said(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > _REASON_CHARS:
        text = text[: _REASON_CHARS - 1] + "…"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _skip(candidate: _Candidate, reason: str) -> None:
    log.warning(
        "calendar provider %r (%s) left out: %s",
        candidate.name,
        candidate.source,
        reason,
        extra={"provider": candidate.name, "source": candidate.source},
    )


def _close_all(providers: list[CalendarProvider]) -> None:
    """Close providers built only to be described, from sync code or from within
    a running loop alike (then on a thread of its own, with a loop of its own)."""

    async def close() -> None:
        for provider in providers:
            try:
                await provider.close()
            except Exception as error:
                log.warning("calendar provider %r did not close: %s", provider.name, _said(error))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(close())
        return
    _run_on_thread(close())


def _run_on_thread(work: Coroutine[Any, Any, None]) -> None:
    thread = threading.Thread(target=asyncio.run, args=(work,), name="slotward-providers-close")
    thread.start()
    thread.join()
