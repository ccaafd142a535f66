"""A serving process freezes its startup heap and collects young objects less often.

Full collections walked everything made at startup, 100-230 ms every few
seconds under load (api/cli/serving.py, settle_heap).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from slotward.api.cli.serving import YOUNG_OBJECTS, settle_heap


@pytest.fixture
def restored() -> Iterator[tuple[int, int, int]]:
    """This test process's collector as it was, afterwards."""
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_what_was_made_is_frozen_and_young_collections_are_rarer(
    restored: tuple[int, int, int],
) -> None:
    made = [[n] for n in range(1000)]  # long-lived containers, made before serving
    settle_heap()
    assert gc.get_freeze_count() >= len(made)
    assert gc.get_threshold() == (YOUNG_OBJECTS, restored[1], restored[2])
    assert restored[0] < YOUNG_OBJECTS
    # Frozen objects are out of every generation a collection walks.
    walked = {id(o) for generation in range(3) for o in gc.get_objects(generation)}
    assert not any(id(m) in walked for m in made)
