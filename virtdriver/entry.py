"""The ``virtdriver`` command's entry point: an interrupt while it loads is one line, too."""

from __future__ import annotations

import sys


def main() -> int:
    """Load the command line and run it; Ctrl-C during the load exits 130 with one line."""
    try:
        from virtdriver.cli import main as run
    except KeyboardInterrupt:
        if sys.stderr is not None:
            sys.stderr.write("virtdriver: error: interrupted\n")
        return 130
    return run()
