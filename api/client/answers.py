"""An answer's bytes read as the client's document or error, and whether to retry it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from slotward.api.client.errors import SlotwardError, error_from
from slotward.api.client.retry import parse_retry_after, should_retry

__all__ = ["document", "refusal", "worth_retrying"]


def document(method: str, path: str, status: int, raw: bytes) -> Any:
    """A 2xx answer's JSON document; ``invalid_answer`` if its body is none."""
    doc = _json(raw)
    if doc is None:  # slotward's answers are JSON: something in between mangled this one
        detail = f"{method} {path}: the answer's body is not JSON"
        raise SlotwardError(status, "invalid_answer", detail)
    return doc


def refusal(status: int, headers: Mapping[str, str], raw: bytes) -> SlotwardError:
    """The error a non-2xx answer is, with its Retry-After and Idempotency-Key."""
    retry_after = parse_retry_after(headers.get("Retry-After"), headers.get("Date"))
    key = headers.get("Idempotency-Key")
    return error_from(status, _json(raw), retry_after=retry_after, idempotency_key=key)


def worth_retrying(error: SlotwardError) -> bool:
    """Whether the same call may get another answer (api/client/retry.py)."""
    said = error.problem.get("retryable")  # True, False, or absent (not a problem document)
    return should_retry(error.status, error.code, said if isinstance(said, bool) else None)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:  # a proxy's HTML page, say: the status still speaks
        return None
