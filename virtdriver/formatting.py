"""What an operator reads: aligned tables and sizes, shared by the commands and reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def table_lines(rows: Sequence[Mapping[str, Any]],
                columns: Sequence[tuple[str, str]]) -> list[str]:
    """Rows as an aligned table in the CLI's style: titles, a rule, one line per row."""
    cells = [[str(row.get(key, "")) for key, _ in columns] for row in rows]
    widths = [max([len(title)] + [len(line[i]) for line in cells])
              for i, (_, title) in enumerate(columns)]
    lines = ["  ".join(title.ljust(w) for (_, title), w in zip(columns, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells]
    return lines


def human(size: int | None) -> str:
    """``size`` in bytes as ``16.0 MiB``; ``-`` when unknown."""
    if size is None:
        return "-"
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"
