"""One read of the host at a time, shared by every caller it can serve (by when its locks
settled)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from virtdriver.hypervisor.sharedread import SharedRead


class Reads:
    """A read that counts itself; the first blocks until released."""

    def __init__(self) -> None:
        self.count = 0
        self.first_started = threading.Event()
        self.release_first = threading.Event()

    def __call__(self) -> int:
        self.count += 1
        number = self.count
        if number == 1:
            self.first_started.set()
            assert self.release_first.wait(10)
        return number


def test_one_caller_reads_plainly() -> None:
    reads = Reads()
    reads.release_first.set()
    shared = SharedRead(reads)
    now = time.monotonic_ns
    assert [shared.get(now())[1], shared.get(now())[1]] == [1, 2]  # never a kept one


def test_callers_settled_after_a_read_began_share_the_next_one_never_the_running_one() -> None:
    reads = Reads()
    shared = SharedRead(reads)
    asking = threading.Semaphore(0)

    def ask() -> int:
        asking.release()  # this caller is about to ask
        return shared.get(time.monotonic_ns())[1]  # its locks changed hands just now

    with ThreadPoolExecutor(9) as pool:
        first = pool.submit(lambda: shared.get(time.monotonic_ns())[1])
        assert reads.first_started.wait(10)
        later = [pool.submit(ask) for _ in range(8)]  # all ask while read 1 runs
        for _ in later:
            assert asking.acquire(timeout=10)
        time.sleep(0.2)  # from release() to waiting in get(): a few bytecodes
        reads.release_first.set()
        assert first.result(10) == 1
        assert [f.result(10) for f in later] == [2] * 8  # read 2 started after they asked
    assert reads.count == 2  # one read served all eight


def test_a_failed_read_fails_its_callers_and_the_next_read_is_new() -> None:
    calls = []

    def read() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("libvirtd went away")
        return "ok"

    shared = SharedRead(read)
    with pytest.raises(RuntimeError, match="went away"):
        shared.get(time.monotonic_ns())
    assert shared.get(time.monotonic_ns())[1] == "ok"


def test_callers_settled_before_a_read_began_join_it() -> None:
    """An attach storm of different volumes, each settled long ago: one read serves all."""
    reads = Reads()
    shared = SharedRead(reads)
    settled = time.monotonic_ns()
    with ThreadPoolExecutor(9) as pool:
        first = pool.submit(shared.get, settled)
        assert reads.first_started.wait(10)
        later = [pool.submit(shared.get, settled) for _ in range(8)]
        time.sleep(0.2)  # from submit() to waiting in get(): a few bytecodes
        reads.release_first.set()
        began, value = first.result(10)
        assert began >= settled and value == 1
        assert [f.result(10) for f in later] == [(began, 1)] * 8
    assert reads.count == 1
