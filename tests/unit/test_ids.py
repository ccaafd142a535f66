"""A server's time-ordered ids: their shape, and random bits never given out twice.

The bits come from a pool of the OS's random bytes (adapters/random_ids.py): these
hold it to what os.urandom per id gave, across refills, threads and a fork.
"""

from __future__ import annotations

import os
import re
import threading

from slotward.adapters.random_ids import POOL, PooledIds

SHAPE = re.compile(r"hold_[0-9a-f]{12}[0-9a-f]{32}")


def _bits(ids: list[str]) -> set[str]:
    return {i[-32:] for i in ids}


def test_an_id_is_its_prefix_milliseconds_and_128_random_bits() -> None:
    made = PooledIds().new_id("hold")
    assert SHAPE.fullmatch(made), made


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
