"""Requests that wait together for one lock are done by the first of them as one batch.

The lock here is a plain threading lock held by the test, so every step is ordered by events,
never by sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from virtdriver.driver.batches import Batches


class Recorder:
    """A leader's work: take the batch under ``lock``, record it, answer each item doubled."""

    def __init__(self, lock: threading.Lock, fail: set[int] | None = None) -> None:
        self.lock, self.fail = lock, fail or set()
        self.batches: list[list[int]] = []

    def run(self, take: Callable[[], list[int]]) -> list[int | BaseException]:
        with self.lock:
            items = take()
            self.batches.append(items)
        return [ValueError(i) if i in self.fail else i * 2 for i in items]


def wait_for(check: Callable[[], bool]) -> None:
    event = threading.Event()
    while not check():
        event.wait(0.001)


def test_callers_who_ask_while_the_leader_waits_are_one_batch() -> None:
    batches: Batches[int, int] = Batches()
    lock = threading.Lock()
    recorder = Recorder(lock)
    with ThreadPoolExecutor(6) as pool:
        with lock:  # the leader waits for it; the others join its batch meanwhile
            first = pool.submit(batches.submit, "vol", 1, recorder.run)
            wait_for(lambda: "vol" in batches._open)
            rest = [pool.submit(batches.submit, "vol", i, recorder.run) for i in range(2, 6)]
            wait_for(lambda: len(batches._open["vol"].items) == 5)
        assert [f.result(30) for f in [first, *rest]] == [2, 4, 6, 8, 10]
    assert recorder.batches == [[1, 2, 3, 4, 5]]
    assert batches._open == {}


def test_a_caller_after_the_take_starts_the_next_batch() -> None:
    batches: Batches[int, int] = Batches()
    taken, release = threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def slow(take: Callable[[], list[int]]) -> list[int | BaseException]:
        items = take()
        seen.append(items)
        taken.set()
        release.wait(30)
        return list(items)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(batches.submit, "vol", 1, slow)
        taken.wait(30)
        second = pool.submit(batches.submit, "vol", 2, lambda take: list(take()))
        assert second.result(30) == 2  # its own batch, not the one being done
        release.set()
        assert first.result(30) == 1
    assert seen == [[1]]


def test_each_caller_gets_its_own_outcome_and_keys_do_not_mix() -> None:
    batches: Batches[int, int] = Batches()
    lock = threading.Lock()
    recorder = Recorder(lock, fail={3})
    with ThreadPoolExecutor(4) as pool:
        with lock:
            futures = [pool.submit(batches.submit, "a", 1, recorder.run)]
            wait_for(lambda: "a" in batches._open)
            futures.append(pool.submit(batches.submit, "b", 7, recorder.run))
            wait_for(lambda: "b" in batches._open)
            futures.append(pool.submit(batches.submit, "a", 3, recorder.run))
            wait_for(lambda: len(batches._open["a"].items) == 2)
        assert futures[0].result(30) == 2
        assert futures[1].result(30) == 14
        with pytest.raises(ValueError, match="3"):
            futures[2].result(30)
    assert sorted(recorder.batches) == [[1, 3], [7]]


def test_a_leader_that_fails_fails_every_member_and_leaves_no_batch_open() -> None:
    batches: Batches[int, int] = Batches()
    lock = threading.Lock()

    def broken(take: Callable[[], list[int]]) -> list[int | BaseException]:
        with lock:
            raise TimeoutError("the lock stayed busy")

    with ThreadPoolExecutor(2) as pool:
        with lock:
            leader = pool.submit(batches.submit, "vol", 1, broken)
            wait_for(lambda: "vol" in batches._open)
            member = pool.submit(batches.submit, "vol", 2, broken)
            wait_for(lambda: len(batches._open["vol"].items) == 2)
        for future in (leader, member):
            with pytest.raises(TimeoutError):
                future.result(30)
    assert batches._open == {}
    assert batches.submit("vol", 4, lambda take: [i + 1 for i in take()]) == 5
