"""The ``virtdriver`` command line (filled in by the render path)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    print("virtdriver: no commands yet")
    return 0
