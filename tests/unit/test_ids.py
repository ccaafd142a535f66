"""A server's time-ordered ids: their shape, their order, and random bits never
given out twice.

The lists that say "oldest first" sort by id, so ids sort as they were made,
also within a millisecond and when the wall clock steps back. The bits come from
a pool of the OS's random bytes (adapters/random_ids.py): these hold it to what
os.urandom per id gave, across refills, threads and a fork.
"""

from __future__ import annotations

import os
import re
import threading

from slotward.adapters.random_ids import POOL, PooledIds
from slotward.engine.clock import TimeOrderedIds

SHAPE = re.compile(r"hold_([0-9a-f]{12})([0-9a-f]{4})[0-9a-f]{28}")


def _bits(ids: list[str]) -> set[str]:
    return {i[-28:] for i in ids}


def _stamp(made: str) -> tuple[int, int]:
    matched = SHAPE.fullmatch(made)
    assert matched, made
    return int(matched[1], 16), int(matched[2], 16)


class _SetClock(PooledIds):
    """Ids whose wall clock the test sets, in nanoseconds."""

    def __init__(self, now_ns: int) -> None:
        super().__init__()
        self.now_ns = now_ns

    def _time_ns(self) -> int:
        return self.now_ns


def test_an_id_is_its_prefix_milliseconds_a_sequence_and_112_random_bits() -> None:
    made = PooledIds().new_id("hold")
    assert SHAPE.fullmatch(made), made


def test_ids_made_in_one_millisecond_sort_in_the_order_they_were_made() -> None:
    ids = _SetClock(1_800_000_000_123_456_789)
    made = [ids.new_id("hold") for _ in range(300)]
    assert sorted(made) == made
    assert [_stamp(m) for m in made] == [(1_800_000_000_123, n) for n in range(300)]
    ids.now_ns += 1_000_000
    assert _stamp(ids.new_id("hold")) == (1_800_000_000_124, 0)


def test_ids_keep_their_order_when_the_wall_clock_steps_back() -> None:
    ids = _SetClock(1_800_000_000_000_000_000)
    before = ids.new_id("hold")
    ids.now_ns -= 3_600 * 10**9  # an hour back
    after = [ids.new_id("hold") for _ in range(3)]
    assert [before, *after] == sorted([before, *after])
    assert {_stamp(m)[0] for m in after} == {1_800_000_000_000}


def test_a_millisecond_out_of_sequence_borrows_the_next() -> None:
    ids = _SetClock(1_800_000_000_000_000_000)
    made = [ids.new_id("hold") for _ in range(TimeOrderedIds.SEQUENCE_LIMIT + 2)]
    assert sorted(made) == made
    assert [_stamp(m) for m in made[-3:]] == [
        (1_800_000_000_000, 0xFFFF), (1_800_000_000_001, 0), (1_800_000_000_001, 1)
    ]  # fmt: skip


def test_the_engines_ids_sort_as_made_on_the_real_clock() -> None:
    ids = TimeOrderedIds()
    made = [ids.new_id("wh") for _ in range(5_000)]
    assert sorted(made) == made
    assert len(set(made)) == len(made)


def test_ids_are_distinct_across_many_refills_of_the_pool() -> None:
    ids = PooledIds()
    made = [ids.new_id("hold") for _ in range(5 * POOL.SIZE // 16 + 7)]
    assert len(_bits(made)) == len(made)


def test_threads_drawing_at_once_never_get_the_same_bits() -> None:
    ids = PooledIds()
    made: list[list[str]] = [[] for _ in range(8)]

    def draw(out: list[str]) -> None:
        out.extend(ids.new_id("evt") for _ in range(2_000))

    threads = [threading.Thread(target=draw, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for out in made for i in out]
    assert len(_bits(every)) == len(every) == 16_000
    assert all(sorted(out) == out for out in made)  # each thread's, as it made them
    assert len(set(every)) == len(every)


def test_a_forked_child_never_repeats_its_parents_bits() -> None:
    ids = PooledIds()
    ids.new_id("hold")  # the pool holds bits the parent has not given out yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, ",".join(ids.new_id("hold") for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    os.waitpid(pid, 0)
    parent = [ids.new_id("hold") for _ in range(50)]
    assert len(child) == 50
    assert not _bits(child) & _bits(parent)
