"""The one catalogue of the error codes slotward answers.

A code is the contract with clients: they switch on it, so it never changes
meaning. Each entry says what the code means, which family of the exception
tree (engine/errors.py) carries it, and whether the same call may succeed
later as it is usually answered (a ``slot_conflict`` is retryable when the
slot frees at a known time; an ``audit_key_required`` never is). A family of
``None`` is a code the HTTP edge answers by itself, with no engine error
behind it (api/http/problems.py).

The engine knows no HTTP status: api/http/statuses.py gives every code here its
status. tests/unit/test_error_codes.py reads the shipped source for every code
produced and checks each is here, in the README's error list and in the
OpenAPI document, and that nothing here is left that nothing produces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from slotward.engine.errors import (
    BodyTooLarge,
    ConfigError,
    Conflict,
    Forbidden,
    InProgress,
    InvalidRequest,
    LeaseLost,
    MalformedBody,
    NotFound,
    RateLimited,
    RequestTimeout,
    SlotConflict,
    SlotwardError,
    Unauthenticated,
    Unavailable,
    ValidationFailed,
)

__all__ = ["CODES", "ErrorCode"]


@dataclass(frozen=True, kw_only=True)
class ErrorCode:
    """One stable error code."""

    name: str
    meaning: str
    family: type[SlotwardError] | None  # None: answered by the HTTP edge itself
    retryable: bool


# (name, meaning) or (name, meaning, retryable) when it differs from the family's.
_Entry = tuple[str, str] | tuple[str, str, bool]


def _family(family: type[SlotwardError] | None, *entries: _Entry) -> list[ErrorCode]:
    default = False if family is None else family.default_retryable
    return [
        ErrorCode(
            name=entry[0],
            meaning=entry[1],
            family=family,
            retryable=entry[2] if len(entry) == 3 else default,
        )
        for entry in entries
    ]


def _catalogue(*families: list[ErrorCode]) -> Mapping[str, ErrorCode]:
    codes = [code for family in families for code in family]
    by_name = {code.name: code for code in codes}
    if len(by_name) != len(codes):
        raise ValueError("an error code is catalogued twice")
    return MappingProxyType(by_name)


CODES: Final[Mapping[str, ErrorCode]] = _catalogue(
    _family(
        None,
        ("malformed_request", "not valid HTTP/1.1: the HTTP parser refused the request"),
        ("unsupported_expectation", "an Expect header other than 100-continue"),
        ("too_many_connections", "this server process has its connection cap open", True),
        ("route_not_found", "no route has this path"),
        ("method_not_allowed", "the route does not take this method"),
        ("http_error", "any other HTTP error aiohttp raised, with its own status"),
    ),
    _family(
        MalformedBody,
        ("malformed_body", "the family's default: the body is not strict I-JSON"),
        ("undecodable_body", "the body does not match its Content-Encoding or chunked framing"),
        ("invalid_json", "the body is not JSON"),
        ("invalid_utf8", "the body is not UTF-8"),
        ("duplicate_key", "a JSON object names a member twice"),
        ("non_finite_number", "a NaN or an infinity"),
        ("number_out_of_range", "a number past what I-JSON carries exactly"),
        ("nesting_too_deep", "JSON nested deeper than the server reads"),
    ),
    _family(BodyTooLarge, ("body_too_large", "the body is larger than the server reads")),
    _family(RequestTimeout, ("body_timeout", "the body did not arrive in time")),
    _family(
        InvalidRequest,
        ("invalid_request", "the family's default: the call can never succeed as sent"),
        ("invalid_role", "a key for a role slotward does not have"),
        ("invalid_priority", "a key priority outside 0-100"),
        ("invalid_db_url", "not a SQLite file URL, or an in-memory one"),
    ),
    _family(
        ValidationFailed,
        ("validation_failed", "the family's default: well-formed JSON that breaks a rule"),
        ("invalid_body", "the body is not a JSON object"),
        ("unknown_field", "a member or query parameter the route does not take"),
        ("duplicate_field", "a query parameter given twice"),
        ("missing_field", "a required member or query parameter is absent"),
        ("invalid_field", "a member or parameter outside its type or bounds"),
        ("invalid_step", "step is not an integer >= 0"),
        ("naive_datetime", "a time with neither an offset nor a timezone"),
        ("nonexistent_local_time", "a local time in a DST gap"),
        ("ambiguous_local_time", "a local time in a DST fold, without an offset"),
        ("invalid_datetime", "not an ISO-8601 instant, or outside 1970-9000"),
        ("unknown_timezone", "not an IANA timezone"),
        ("end_required", "none of end, duration_minutes and duration"),
        ("end_conflict", "more than one of end, duration_minutes and duration"),
        ("invalid_duration", "a duration that is not ISO-8601, not positive, or too long"),
        ("invalid_interval", "an end not after its start, or past the latest year"),
        ("start_in_past", "a hold that would start in the past"),
        ("hold_too_long", "a hold longer than the policy allows"),
        ("window_too_long", "a read window longer than the policy allows"),
        ("invalid_attendee", "an attendee that is neither an id nor an email"),
        ("invalid_email_domain", "an email whose domain IDNA 2008 refuses"),
        ("invalid_attendees", "not a list of 1-100 attendees"),
        ("unknown_attendee", "an email the directory does not know, where the tenant requires it"),
        ("priority_too_high", "a call priority above the caller's key"),
        ("invalid_idempotency_key", "not 1-255 printable ASCII, or a derived key for a new call"),
        ("idempotency_key_reused", "an Idempotency-Key already used for a different call"),
        ("invalid_intent", "arguments that have no canonical JSON form"),
        ("invalid_checkpoint", "not an audit checkpoint"),
        ("checkpoint_signature_invalid", "a checkpoint this audit key did not sign"),
        ("checkpoint_wrong_tenant", "a checkpoint of another tenant"),
        ("audit_key_not_set", "a checkpoint to check, or to sign, without SLOTWARD_AUDIT_KEY"),
    ),
    # Webhooks (issue 14): outbound URLs and secrets sealed at rest.
    _family(
        ValidationFailed,
        ("invalid_url", "not an absolute http(s) URL, or one with credentials or a fragment"),
        ("url_not_allowed", "a URL whose host resolves to an address slotward may not reach"),
    ),
    _family(
        InvalidRequest,
        ("secret_key_required", "a secret to seal, and the server has no SLOTWARD_SECRET_KEY"),
    ),
    _family(
        Unauthenticated,
        ("unauthenticated", "the family's default: the caller is not known"),
        ("missing_api_key", "no 'Authorization: Bearer' key"),
        ("invalid_api_key", "an unknown or revoked key"),
    ),
    _family(
        Forbidden,
        ("forbidden", "the family's default: the caller may not do this"),
        ("role_forbidden", "the key's role may not call this route"),
        ("not_hold_owner", "only the agent that placed the hold may do this"),
    ),
    _family(
        NotFound,
        ("not_found", "the family's default: no such object in this tenant"),
        ("hold_not_found", "no such hold in this tenant"),
        ("execution_not_found", "no such execution in this tenant, or a hold tool's key"),
        ("workflow_not_found", "no such workflow in this tenant"),
        ("key_not_found", "no unrevoked API key with this id"),
    ),
    _family(
        Conflict,
        ("conflict", "the family's default: the state of the world disagrees"),
        ("hold_committed", "the hold is already committed"),
        ("hold_released", "the hold was released"),
        ("hold_expired", "the hold expired (and, for a commit, its slot was taken since)"),
        ("hold_preempted", "the hold was preempted by a claim of higher priority"),
        ("invalid_transition", "a hold transition the table does not have"),
        ("token_mismatch", "a commit with a token that is not the hold's current one"),
        ("completion_mismatch", "a second, different completion of an execution"),
        ("email_in_use", "the email already names another attendee"),
        ("audit_chain_broken", "the audit chain does not verify: not checkpointed or sealed"),
    ),
    _family(SlotConflict, ("slot_conflict", "an attendee is already booked in the slot")),
    _family(InProgress, ("request_in_progress", "the same call is still being executed")),
    _family(LeaseLost, ("lease_lost", "a completion without the execution's current lease")),
    _family(RateLimited, ("rate_limited", "this agent is over its request rate")),
    _family(
        Unavailable,
        ("store_unavailable", "the store could not be reached in time"),
        ("audit_key_required", "a keyed audit chain, and this process has no audit key", False),
        (
            "provider_unavailable",
            "an attendee's calendar could not be read, and its binding fails closed",
        ),
    ),
    # The webhook admin API (api/webhooks.py, engine/usecases/subscriptions.py).
    _family(ValidationFailed, ("invalid_topic", "a topic that is no event type or family")),
    _family(
        NotFound,
        ("webhook_not_found", "no such webhook subscription in this tenant"),
        ("event_not_found", "no such outbox event in this tenant"),
    ),
    _family(Conflict, ("nothing_to_redrive", "no dead delivery of the event can be sent again")),
    # The calendar binding API (api/calendars.py, engine/usecases/bindings.py).
    _family(
        ValidationFailed,
        ("unknown_provider", "no calendar provider of this name is installed on the server"),
        ("unsupported_scheme", "a calendar URL of a scheme its provider does not read"),
        ("credentials_not_supported", "a username or password for a provider that takes none"),
    ),
    _family(NotFound, ("calendar_not_found", "the attendee has no calendar bound")),
    # Approvals and the dashboard (issue 18: engine/usecases/approvals.py,
    # api/sessions.py).
    _family(
        NotFound,
        ("approval_not_found", "no such approval in this tenant"),
    ),
    _family(
        Forbidden,
        ("own_approval", "an agent may not decide an approval it asked for"),
        ("csrf_failed", "a dashboard session's change without its CSRF token"),
    ),
    _family(
        Unauthenticated,
        ("invalid_session", "a dashboard session that is unknown, expired or signed out"),
    ),
    _family(
        Conflict,
        ("approval_decided", "the approval already has the other decision"),
        ("approval_denied", "a person denied the approval this commit waits for"),
        ("approval_expired", "the approval expired before a person decided"),
    ),
    _family(ConfigError, ("invalid_config", "a setting slotward refuses: nothing starts")),
    _family(SlotwardError, ("internal_error", "an unexpected error, logged, never detailed", True)),
)
"""Every error code, by name."""
