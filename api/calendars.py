"""Calendar bindings: the admin's services (PUT/GET/DELETE /v1/attendees/{attendee}/calendar).

Part of the service layer (api/service.py), no aiohttp. Everything that can
refuse a call runs before the write, so a refused call stores nothing: the
fields, the provider and its capabilities, the URL's SSRF check (which resolves
its host; the adapter's own connections are guarded again at every read), and
whether a password can be sealed at all. The password is sealed under
SLOTWARD_SECRET_KEY (api/secretbox.py) bound to the tenant and the attendee
(``password_context`` of api/providers.py, which opens it), stored only
sealed, and never answered, logged or
named in an error. After the write the calendar is read once, so the answer
shows whether it can be read (an unreachable calendar still binds: the answer
says ``status: error`` and why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, get_args
from urllib.parse import urlsplit

from slotward.api.bootstrap import Services
from slotward.api.providers import password_context
from slotward.api.service import ADMINS, require_role
from slotward.engine.calendars import OnUnavailable
from slotward.engine.errors import InvalidRequest, ValidationFailed
from slotward.engine.model import Principal
from slotward.engine.ports import CalendarProvider
from slotward.engine.rules.attendees import AttendeeRef
from slotward.engine.rules.timenorm import parse_timezone
from slotward.engine.rules.urls import MAX_URL, parse_target
from slotward.engine.usecases import bindings

__all__ = [
    "FIELDS",
    "MAX_PASSWORD",
    "MAX_USERNAME",
    "delete_calendar",
    "get_calendar",
    "put_calendar",
]

FIELDS: Final = ("provider", "url", "username", "password", "timezone", "on_unavailable")
MAX_USERNAME: Final = 256
MAX_PASSWORD: Final = 1024
_POLICIES: Final[tuple[str, ...]] = get_args(OnUnavailable)
# The schemes slotward can hold to its SSRF rule: an adapter listing another is
# refused it (no check would stand between the binding and whatever it names).
_CHECKED_SCHEMES: Final = ("http", "https", "file")
_FILE_PRIVATE: Final = (
    "a file:// calendar is read from the server's own disk, the most private "
    "address of all: the server takes one only with SLOTWARD_ALLOW_PRIVATE_URLS=true"
)


def _refuse(field: str, detail: str, code: str = "invalid_field") -> ValidationFailed:
    return ValidationFailed(detail, code=code, extra={"field": field})


@dataclass(frozen=True)
class _Checked:
    adapter: CalendarProvider
    new: bindings.NewBinding
    password: str | None


def _unknown_fields(fields: Mapping[str, Any]) -> None:
    unknown = sorted(k for k in fields if k not in FIELDS)
    if unknown:
        raise ValidationFailed(
            f"unknown field '{unknown[0]}'; allowed fields: {', '.join(FIELDS)}",
            code="unknown_field",
            extra={"field": unknown[0], "allowed": list(FIELDS)},
        )


def _adapter(svc: Services, fields: Mapping[str, Any]) -> CalendarProvider:
    name = fields.get("provider")
    if name is None:
        raise _refuse("provider", "missing required field 'provider'", "missing_field")
    if not isinstance(name, str):
        raise _refuse("provider", "'provider' must be a string")
    adapter = svc.providers.provider(name)
    if adapter is None:
        names = ", ".join(svc.providers.names()) or "none"
        shown = name if len(name) <= 64 else name[:61] + "..."
        raise ValidationFailed(
            f"no calendar provider {shown!r}; this server has: {names}",
            code="unknown_provider",
            extra={"field": "provider", "allowed": list(svc.providers.names())},
        )
    return adapter


def _url(svc: Services, adapter: CalendarProvider, fields: Mapping[str, Any]) -> str:
    url = fields.get("url")
    if url is None:
        raise _refuse("url", "missing required field 'url'", "missing_field")
    if not isinstance(url, str) or not 1 <= len(url) <= MAX_URL:
        raise _refuse("url", f"'url' must be a URL of at most {MAX_URL} characters", "invalid_url")
    schemes = adapter.capabilities.schemes
    try:
        parts = urlsplit(url)
    except ValueError:
        raise _refuse("url", "'url' is not a URL", "invalid_url") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise _refuse("url", "the URL must be absolute, like https://... or file:///...",
                      "invalid_url")  # fmt: skip
    if scheme not in schemes or scheme not in _CHECKED_SCHEMES:
        takes = ", ".join(f"{s}://" for s in schemes if s in _CHECKED_SCHEMES) or "no URL"
        raise _refuse(
            "url", f"the {adapter.name} provider takes {takes}; not {scheme}://",
            "unsupported_scheme",
        )  # fmt: skip
    if "@" in parts.netloc:
        raise _refuse("url", "a calendar URL carries no credentials ('user:pass@'): "
                      "send them as username and password", "invalid_url")  # fmt: skip
    if "#" in url:
        raise _refuse("url", "a calendar URL has no fragment ('#...')", "invalid_url")
    if scheme == "file":
        return _file_url(svc, url, parts.netloc, parts.path)
    try:
        parse_target(url)
    except ValidationFailed as exc:
        exc.extra["field"] = "url"
        raise
    return url


def _file_url(svc: Services, url: str, host: str, path: str) -> str:
    if host not in ("", "localhost") or not path.startswith("/"):
        raise _refuse("url", "a file URL names an absolute path on this server: "
                      "file:///path/to/calendar.ics", "invalid_url")  # fmt: skip
    if not svc.urls.allow_private:
        raise _refuse("url", _FILE_PRIVATE, "url_not_allowed")
    return url


def _text(fields: Mapping[str, Any], name: str, longest: int) -> str | None:
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= longest:
        raise _refuse(name, f"'{name}' must be a string of 1 to {longest} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise _refuse(name, f"'{name}' has no control characters")
    return value


def _credentials(
    svc: Services, adapter: CalendarProvider, fields: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    username = _text(fields, "username", MAX_USERNAME)
    password = _text(fields, "password", MAX_PASSWORD)
    given = "password" if password is not None else "username"
    if (username is not None or password is not None) and not adapter.capabilities.credentials:
        raise _refuse(given, f"the {adapter.name} provider takes no username or password",
                      "credentials_not_supported")  # fmt: skip
    if password is not None and username is None:
        raise _refuse("username", "a password goes with a username", "missing_field")
    if password is not None and not svc.box.available:
        raise InvalidRequest(
            "calendar passwords are stored encrypted: set SLOTWARD_SECRET_KEY "
            "(at least 16 bytes) on the server",
            code="secret_key_required",
            extra={"field": "password"},
        )
    return username, password


def _policy(fields: Mapping[str, Any]) -> OnUnavailable:
    value = fields.get("on_unavailable", "fail_closed")
    for policy in get_args(OnUnavailable):
        if value == policy:
            chosen: OnUnavailable = policy
            return chosen
    raise _refuse("on_unavailable", f"'on_unavailable' must be one of {', '.join(_POLICIES)}")


def _timezone(fields: Mapping[str, Any]) -> str:
    value = fields.get("timezone", "UTC")
    if not isinstance(value, str) or not 1 <= len(value) <= 64:
        raise _refuse("timezone", "'timezone' must be an IANA time zone name, like Europe/Berlin")
    parse_timezone(value, field="timezone")
    return value


async def _checked(svc: Services, ref: AttendeeRef, fields: Mapping[str, Any]) -> _Checked:
    _unknown_fields(fields)
    adapter = _adapter(svc, fields)
    url = _url(svc, adapter, fields)
    username, password = _credentials(svc, adapter, fields)
    new = bindings.NewBinding(
        attendee=ref, provider=adapter.name, url=url, username=username,
        timezone=_timezone(fields), on_unavailable=_policy(fields),
    )  # fmt: skip
    if not url.lower().startswith("file:"):
        try:
            await svc.urls.check(url)  # the SSRF check, last: it resolves the host
        except ValidationFailed as exc:
            exc.extra["field"] = "url"
            raise
    return _Checked(adapter, new, password)


async def put_calendar(
    svc: Services, principal: Principal, attendee: str, fields: Mapping[str, Any]
) -> dict[str, Any]:
    """Bind ``attendee`` (an id or an email) to a calendar, replacing its binding;
    read the calendar once and answer the binding with its sync state."""
    require_role(principal, ADMINS)
    checked = await _checked(svc, bindings.parse_attendee(attendee), fields)
    password = checked.password

    def seal(attendee_id: str) -> str | None:
        if password is None:
            return None
        return svc.box.seal(password, password_context(principal.tenant, attendee_id))

    binding = await svc.store.write(
        partial(bindings.put_binding, principal=principal, new=checked.new, seal=seal,
                writes=checked.adapter.capabilities.writes, policy=svc.policy, clock=svc.clock)
    )  # fmt: skip
    read = await svc.providers.read_now(svc, binding)
    return await svc.store.read(partial(bindings.describe_binding, binding=read))


async def get_calendar(svc: Services, principal: Principal, attendee: str) -> dict[str, Any]:
    """The attendee's binding and its sync state (never its password)."""
    require_role(principal, ADMINS)
    ref = bindings.parse_attendee(attendee)
    return await svc.store.read(partial(bindings.get_binding, principal=principal, attendee=ref))


async def delete_calendar(svc: Services, principal: Principal, attendee: str) -> None:
    """Unbind the attendee: its binding, mirror and unwritten writes are dropped."""
    require_role(principal, ADMINS)
    ref = bindings.parse_attendee(attendee)
    await svc.store.write(
        partial(bindings.delete_binding, principal=principal, attendee=ref, policy=svc.policy,
                clock=svc.clock)
    )  # fmt: skip
