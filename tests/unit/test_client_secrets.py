"""A guardrail: the client's API key shows in no repr, refusal or log line of its own.

tests/e2e/test_client.py checks the same over real HTTP (a refused key, no
server, the retries' log lines); this runs with every `make check`.
"""

from __future__ import annotations

import pytest

from slotward.api.client import Slotward, SyncSlotward

MARKER = "sw_key_0123.SeCrEtMaRkEr"


def test_no_repr_shows_the_key() -> None:
    client = Slotward("http://127.0.0.1:8080", MARKER)
    sync = SyncSlotward("http://127.0.0.1:8080", MARKER)
    try:
        for text in (repr(client), str(client), repr(sync), str(sync)):
            assert "SeCrEtMaRkEr" not in text
            assert "127.0.0.1:8080" in text  # what a reader does want to see
    finally:
        sync.close()


@pytest.mark.parametrize(
    "key",
    [MARKER + "\r\nX-Injected: 1", MARKER + " ", "", MARKER + "\x00", MARKER + "é"],
    ids=["header-injection", "space", "empty", "nul", "non-ascii"],
)
def test_a_malformed_key_is_refused_without_being_quoted(key: str) -> None:
    with pytest.raises(ValueError, match="API key") as refused:
        Slotward("http://127.0.0.1:8080", key)
    assert "SeCrEtMaRkEr" not in str(refused.value)


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://127.0.0.1", "http://", "/v1"])
def test_a_url_that_is_no_server_is_refused_at_once(url: str) -> None:
    with pytest.raises(ValueError, match="absolute http"):
        Slotward(url, MARKER)


def test_a_sync_client_takes_no_session_of_another_loop() -> None:
    with pytest.raises(TypeError, match="own session"):
        SyncSlotward("http://127.0.0.1:8080", MARKER, session=object())
    with pytest.raises(ValueError, match="API key"):  # refused before any loop is made
        SyncSlotward("http://127.0.0.1:8080", "")
