"""Sizes as an operator reads them: bytes in binary units (KiB, MiB, GiB, TiB)."""

from __future__ import annotations


def human(size: int | None) -> str:
    """``size`` in bytes as ``16.0 MiB``; ``-`` when unknown."""
    if size is None:
        return "-"
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"
