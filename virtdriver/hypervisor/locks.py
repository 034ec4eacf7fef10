"""Inter-process locks (``flock`` on a file): one per volume, one per guest.

A guest's lock file also holds a generation number that every attach through virtdriver raises
while it holds the lock. An attach reads the number before it reads the guest's disks; finding it
unchanged once it holds the lock proves that no other attach changed the guest meanwhile, so the
disks already read still tell which targets are free and need not be read again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def volume_lock(lock_dir: Path, volume_id: str) -> Iterator[None]:
    """Hold the exclusive lock of ``volume_id``; serializes threads and processes alike.

    ``flock`` belongs to the open file description, so two threads of one process that each open
    the file exclude each other just as two processes do; the kernel drops the lock if the holder
    dies, so a crash never leaves a volume locked.
    """
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_dir / f"volume-{volume_id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


GENERATION_WIDTH = 20  # digits, written in place with one pwrite


def _guest_lock_path(lock_dir: Path, guest_uuid: str) -> Path:
    return lock_dir / f"volume-guest-{guest_uuid}.lock"


def _read_generation(fd: int) -> int:
    raw = os.pread(fd, GENERATION_WIDTH, 0)
    return int(raw) if raw.strip().isdigit() else 0


def guest_generation(lock_dir: Path, guest_uuid: str) -> int:
    """The guest's attach generation, read without taking its lock (0 before the first)."""
    try:
        fd = os.open(_guest_lock_path(lock_dir, guest_uuid), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        return _read_generation(fd)
    finally:
        os.close(fd)


class GuestLock:
    """A held guest lock: :attr:`generation` as found, :meth:`changed` to raise it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.generation = _read_generation(fd)

    def changed(self) -> None:
        """Record that the guest's devices changed (call before the lock is released)."""
        self.generation += 1
        os.pwrite(self._fd, str(self.generation).zfill(GENERATION_WIDTH).encode(), 0)


@contextlib.contextmanager
def guest_lock(lock_dir: Path, guest_uuid: str) -> Iterator[GuestLock]:
    """Hold the exclusive lock of one guest (target choice and attach are serialized per guest)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(_guest_lock_path(lock_dir, guest_uuid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield GuestLock(fd)
    finally:
        os.close(fd)


def lock_is_free(lock_dir: Path, volume_id: str) -> bool:
    """True when nobody holds the volume's lock (for checks and audits)."""
    path = lock_dir / f"volume-{volume_id}.lock"
    if not path.exists():
        return True
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True
