"""The host's small files: ``KEY=VALUE`` settings (open-iscsi's initiator name, SELinux's
config) and whole small files read with the fewest calls (records, libvirt's saved XML)."""

from __future__ import annotations

import os
from pathlib import Path

CHUNK = 1 << 16
LIMIT = 1 << 24  # bytes: far beyond any record or domain file


def read_bytes(path: Path | str, limit: int = LIMIT) -> bytes:
    """A small regular file's bytes, with os-level calls (a third of what ``Path.read_bytes``
    costs on the attach path, which reads records and libvirt's saved domain files on every
    operation). A read of a regular file returns less than asked only at the file's end, so a
    file shorter than :data:`CHUNK` takes one read, not a second one to find the end. What is
    not a regular file cannot stall it: a FIFO is opened without waiting for a writer, and more
    than ``limit`` bytes (a link to ``/dev/zero``) is a :class:`ValueError`."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        data = os.read(fd, CHUNK)
        if len(data) < CHUNK:
            return data
        chunks, size = [data], len(data)
        while chunk := os.read(fd, CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ValueError(f"longer than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def setting(path: Path, key: str) -> str | None:
    """The stripped value of the first non-empty ``key=`` line, or ``None`` (also when the file
    cannot be read)."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        name, sep, value = line.strip().partition("=")
        if sep and name.strip() == key and value.strip():
            return value.strip()
    return None
