"""The workflow of a call that names none: the MCP session's (api/mcp/workflows.py)."""

from __future__ import annotations

import pytest

from slotward.api.mcp.workflows import SessionWorkflows
from slotward.engine.errors import ValidationFailed


def test_the_session_workflow() -> None:
    stdio = SessionWorkflows(None, stdio=True)
    first = stdio.of({}, None)
    assert first == stdio.of({}, None)
    assert isinstance(first, str)
    assert first.startswith("mcp-")
    assert stdio.of({"workflow_id": "wf-1"}, None) == "wf-1"
    assert stdio.of({"workflow_id": None}, None) == first
    assert SessionWorkflows("wf-9", stdio=True).of({}, None) == "wf-9"
    http = SessionWorkflows(None, stdio=False)
    one, two = {"mcp-session-id": "s-one"}, {"mcp-session-id": "s-two"}
    assert http.of({}, one) == http.of({}, one)
    assert http.of({}, one) != http.of({}, two)
    assert "s-one" not in str(http.of({}, one))
    assert "_secret" not in repr(http)
    with pytest.raises(ValidationFailed) as stateless:
        http.of({}, {})
    assert stateless.value.extra == {"field": "workflow_id"}
