"""Aligned text tables in the CLI's style, shared by the commands, the reports and the demo."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def table_lines(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> list[str]:
    """Rows as an aligned table in the CLI's style: titles, a rule, one line per row."""
    cells = [[str(row.get(key, "")) for key, _ in columns] for row in rows]
    widths = [max([len(title)] + [len(line[i]) for line in cells])
              for i, (_, title) in enumerate(columns)]
    lines = ["  ".join(title.ljust(w) for (_, title), w in zip(columns, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells]
    return lines
