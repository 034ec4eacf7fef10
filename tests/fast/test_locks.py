"""The per-volume and per-guest locks, and when each last changed hands (plain files)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from virtdriver.driver.attach import read_from
from virtdriver.errors import LockTimeout
from virtdriver.hypervisor.locks import (
    STAMP_WIDTH,
    guest_lock,
    lock_is_free,
    locks,
    volume_lock,
)

GUEST = "0b7d1e52-7f2a-4a51-9a64-1f0e3c2b9d10"
VID = "8c1d0b7e-3f4a-4e21-9b6c-2d7e5f1a0c33"

HOLD = """
import sys
from pathlib import Path
from virtdriver.hypervisor.locks import guest_lock
with guest_lock(Path(sys.argv[1]), sys.argv[2], operation="attach"):
    print("held", flush=True)
    if sys.argv[3] == "die":
        sys.stdin.readline()  # killed here, holding the lock
"""


def hold_in_another_process(lock_dir: Path, *, die: bool) -> None:
    """A second process takes the guest's lock and lets go, or is killed holding it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock_dir), GUEST,
                             "die" if die else "go"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    if die:
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)


def test_a_lock_never_held_or_let_go_in_another_process_says_when(tmp_path: Path) -> None:
    with guest_lock(tmp_path, GUEST) as first:  # nothing was ever done under a new file
        assert first.settled_at == 0
    before = time.monotonic_ns()
    hold_in_another_process(tmp_path, die=False)
    after = time.monotonic_ns()
    with guest_lock(tmp_path, GUEST) as held:
        assert before < held.settled_at < after  # the other process's release, not now


def test_a_holder_killed_holding_the_lock_leaves_it_unsettled(tmp_path: Path) -> None:
    """Whatever it changed has no release time: the next holder counts its own, not the
    release before."""
    hold_in_another_process(tmp_path, die=False)
    hold_in_another_process(tmp_path, die=True)
    killed = time.monotonic_ns()
    with guest_lock(tmp_path, GUEST) as held:
        assert held.settled_at > killed


def test_a_release_time_from_another_clock_the_future_or_an_older_writer_counts_as_now(
        tmp_path: Path) -> None:
    lock_file = tmp_path / f"volume-{VID}.lock"
    with volume_lock(tmp_path, VID):
        pass
    text = lock_file.read_bytes()
    fields = text[:STAMP_WIDTH].split()
    assert fields[0] == b"released" and fields[1].isdigit()
    assert text[STAMP_WIDTH:].startswith(b"pid ")  # the holder's note follows
    for first in (b"released 5 4026531834x",  # another time namespace
                  b"released %d %s" % (time.monotonic_ns() + 10**15, fields[2]),  # pre-reboot
                  b"pid 1, attach, since 10:00:00",  # an older virtdriver's note over it
                  b"00000000000000000007"):  # an older virtdriver's guest generation
        lock_file.write_bytes(first + text[len(first):])
        taking = time.monotonic_ns()
        with volume_lock(tmp_path, VID) as held:
            assert taking <= held.settled_at <= time.monotonic_ns()


def test_a_wait_that_gives_up_leaves_the_holders_mark(tmp_path: Path) -> None:
    """Only a holder stamps its release: a waiter that gave up must not say "released"."""
    with volume_lock(tmp_path, VID):
        with pytest.raises(LockTimeout):
            with volume_lock(tmp_path, VID, timeout=0):
                pass
        assert (tmp_path / f"volume-{VID}.lock").read_bytes().startswith(b"held ")


def test_a_decision_reads_after_the_ask_and_after_changes_its_data_lock_may_miss(
        tmp_path: Path) -> None:
    with volume_lock(tmp_path, VID):
        pass
    asked = time.monotonic_ns()
    with volume_lock(tmp_path, VID) as held:
        assert held.settled_at < asked < held.taken_at
        # a file, a device, a network volume: the data lock others take too; the read may
        # have begun before the locks were taken, not before the caller asked
        for kind in ("inode", "dev", "net"):
            assert read_from(held, (kind, "x"), asked) == asked
        # a protocol's key, a path not there yet, nothing known: after the locks were taken
        for known in (("key", "iqn", "1"), ("path", "/x"), None):
            assert read_from(held, known, asked) == held.taken_at
        held.changed()  # a second try under the same locks never uses the first one's read
        assert read_from(held, ("inode", "x"), asked) == held.settled_at > asked


def test_several_locks_settle_at_the_latest_and_a_change_moves_it_to_now(tmp_path: Path) -> None:
    with volume_lock(tmp_path, VID):
        pass
    between = time.monotonic_ns()
    with locks(tmp_path, ["other-volume"], [], operation="detach"):
        pass
    with locks(tmp_path, [VID, "other-volume"], [], operation="attach") as held:
        assert held.settled_at > between  # the other volume let go later
        settled = held.settled_at
        held.changed()
        assert held.settled_at > settled
    assert os.stat(tmp_path / f"volume-{VID}.lock").st_size > STAMP_WIDTH


def test_a_held_guest_lock_is_seen_as_held(tmp_path: Path) -> None:
    guest = "9f3e2d1c-0b4a-4c8d-9e7f-a1b2c3d4e5f6"
    with guest_lock(tmp_path, guest):
        assert not lock_is_free(tmp_path, f"guest-{guest}")
    assert lock_is_free(tmp_path, f"guest-{guest}")
