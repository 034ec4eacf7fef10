"""The host's ``KEY=VALUE`` settings files (open-iscsi's initiator name, SELinux's config)."""

from __future__ import annotations

from pathlib import Path


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
