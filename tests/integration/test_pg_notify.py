"""PgSignals on a real PostgreSQL: what one process sends, the others hear, once each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from slotward.adapters.store.postgres.notify import PgSignals
from tests.conftest import SHARED
from tests.e2e.conftest import until
from tests.pgserver import PgServer


class Heard:
    def __init__(self) -> None:
        self.topics: list[str] = []
        self.missed = 0  # "look again at everything": after each (re)connect

    def __call__(self, topic: str | None) -> None:
        if topic is None:
            self.missed += 1
        else:
            self.topics.append(topic)


@pytest.fixture
async def pair(postgres: PgServer) -> AsyncIterator[tuple[PgSignals, Heard, PgSignals, Heard]]:
    url = postgres.url(SHARED)
    one, two = PgSignals(url, channel="slotward_test"), PgSignals(url, channel="slotward_test")
    heard_one, heard_two = Heard(), Heard()
    await one.start(heard_one)
    await two.start(heard_two)
    try:
        await until(lambda: one.backend_pid is not None and two.backend_pid is not None)
        yield one, heard_one, two, heard_two
    finally:
        await one.close()
        await two.close()


async def test_topics_reach_the_other_process_and_not_the_sender(
    pair: tuple[PgSignals, Heard, PgSignals, Heard],
) -> None:
    one, heard_one, _two, heard_two = pair
    topics = [f"{i:032x}" for i in range(500)]
    for topic in topics:  # one burst: sent in a few batched statements
        one.send(topic)
    await until(lambda: len(heard_two.topics) == len(topics))
    assert sorted(heard_two.topics) == topics
    assert heard_one.topics == []  # the sender woke its own waiters itself
    assert (heard_one.missed, heard_two.missed) == (1, 1)


async def test_a_closed_listener_stops_and_can_be_closed_twice(postgres: PgServer) -> None:
    signals = PgSignals(postgres.url(SHARED))
    heard = Heard()
    await signals.start(heard)
    await until(lambda: signals.backend_pid is not None)
    await signals.close()
    await signals.close()
    await asyncio.sleep(0)
    assert signals.backend_pid is None


async def test_a_server_that_refuses_listen_is_retried_with_backoff(
    postgres: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Connecting works but LISTEN fails every time (here: an invalid channel; in
    life a standby or a transaction pooler): the retries back off (0.1, 0.5, 1,
    2 s ...) instead of reconnecting ten times a second. An upper bound on the
    attempts within a window: a loaded machine only makes fewer."""
    signals = PgSignals(postgres.url(SHARED), channel="")  # LISTEN "" is a syntax error
    with caplog.at_level("WARNING", logger="slotward.store"):
        await signals.start(Heard())
        await asyncio.sleep(2.5)
        await signals.close()
    attempts = [r for r in caplog.records if "completion listener lost" in r.getMessage()]
    assert 1 <= len(attempts) <= 5, len(attempts)
    assert signals.connects == 0  # it never got to listen
