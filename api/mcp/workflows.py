"""Which workflow a tool call belongs to, when its arguments do not say.

A create is keyed by its workflow (DESIGN section 3): the same workflow, step,
attendees and times land once. A model rarely carries a workflow id of its own,
so the MCP session gives one, in this order:

1. the call's own ``workflow_id`` argument (null counts as absent);
2. ``--workflow`` (one workflow for everything this server serves);
3. the MCP session's: over stdio the process is the session, and its workflow
   is drawn once at start; over streamable HTTP it is derived from the
   ``Mcp-Session-Id`` the server issued (keyed by a secret drawn at start, so
   the session id never shows in a hold). Either way it is stable for the
   session's life, so a retry inside a session lands once, and a new session
   starts a new workflow.

A client that reconnects and must keep its workflow passes ``workflow_id`` (or
starts the server with ``--workflow``). A stateless HTTP call has no session:
without either, it is told to give ``workflow_id``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

from slotward.engine.errors import ValidationFailed

__all__ = ["SessionWorkflows"]

_PREFIX = "mcp-"


class SessionWorkflows:
    """The workflow rule above, for one MCP server process."""

    def __init__(self, fixed: str | None, *, stdio: bool) -> None:
        self._fixed = fixed
        self._secret = secrets.token_bytes(32)
        self._process = _PREFIX + secrets.token_hex(12) if stdio else None

    def __repr__(self) -> str:
        return f"SessionWorkflows(fixed={self._fixed!r})"  # the secret stays out

    def of(self, given: Mapping[str, object], headers: Mapping[str, str] | None) -> object:
        """The call's workflow: its argument if given (checked where envelopes are), else the
        session's. A null argument is no argument: models send null for what they omit."""
        if given.get("workflow_id") is not None:
            return given["workflow_id"]
        if self._fixed is not None:
            return self._fixed
        if self._process is not None:
            return self._process
        session = (headers or {}).get("mcp-session-id")
        if session:
            digest = hmac.new(self._secret, session.encode(), hashlib.sha256).hexdigest()
            return _PREFIX + digest[:24]
        raise ValidationFailed(
            "this call has no MCP session to take a workflow from: give 'workflow_id'",
            code="missing_field",
            extra={"field": "workflow_id"},
        )
