"""A lock wait sleeps in the kernel: woken by the release, and bounded without leaving it held.

flock has no timed wait, so a thread of the waiter's own blocks in flock on a duplicate of the
descriptor. These tests use a real second process as the holder and join that thread instead
of sleeping, so nothing here depends on timing.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from virtdriver.errors import LockTimeout
from virtdriver.hypervisor.locks import file_token, lock_is_free, volume_lock

VID = "5b0f8f0e-2d55-4c43-8a43-6d3b1f0e9a11"

HOLDER = """
import sys
from pathlib import Path
from virtdriver.hypervisor.locks import volume_lock
with volume_lock(Path(sys.argv[1]), sys.argv[2], operation="attach"):
    print("held", flush=True)
    sys.stdin.readline()  # one line from the test: let go
print("released", flush=True)
sys.stdin.read()
"""


class Holder:
    """Another process that holds the volume's lock until :meth:`release`."""

    def __init__(self, lock_dir: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir), VID],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "held\n"

    def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "released\n"


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    held = Holder(tmp_path / "locks")
    try:
        yield held
    finally:
        held.proc.communicate(timeout=60)


def lock_waits() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "virtdriver-lock-wait"]


def test_a_waiter_takes_the_lock_when_the_holder_lets_go(holder: Holder, tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    entered = threading.Event()

    def wait() -> None:
        with volume_lock(lock_dir, VID, operation="detach", timeout=120):
            entered.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    while not lock_waits():  # the waiter is blocked in the kernel, behind the holder
        assert waiter.is_alive() and not entered.is_set()
        threading.Event().wait(0.01)
    assert not entered.is_set()
    holder.release()
    waiter.join(120)
    assert entered.is_set()
    assert lock_is_free(lock_dir, VID)


def test_a_wait_past_its_bound_gives_back_the_lock_it_takes_later(holder: Holder,
                                                                   tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    with pytest.raises(LockTimeout, match=f"volume {VID} is busy"):
        with volume_lock(lock_dir, VID, operation="detach", timeout=0.2):
            pass
    left = lock_waits()
    assert len(left) == 1  # still blocked in flock behind the holder
    holder.release()
    left[0].join(120)  # it took the lock, then gave it back
    assert not left[0].is_alive()
    assert lock_is_free(lock_dir, VID)


def test_a_zero_timeout_neither_waits_nor_says_it(holder: Holder, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(LockTimeout):
        with volume_lock(tmp_path / "locks", VID, timeout=0):
            pass
    assert not lock_waits()
    assert not [r for r in caplog.records if r.name == "virtdriver.locks"]


def test_threads_of_one_process_still_exclude_each_other(tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    inside, most = [0], [0]
    guard = threading.Lock()

    def one() -> None:
        with volume_lock(lock_dir, VID, timeout=120):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            threading.Event().wait(0.005)
            with guard:
                inside[0] -= 1

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert most[0] == 1
    path = lock_dir / f"volume-{file_token(VID)}.lock"
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nothing left holding it
    finally:
        os.close(fd)
