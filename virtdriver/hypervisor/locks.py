"""Per-volume inter-process locks (``flock`` on a file per volume)."""

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
