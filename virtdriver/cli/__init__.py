"""The ``virtdriver`` command line: one module per command group over the public API.

:func:`main` is the console script. It imports the commands itself, so that an interrupt while
they load is one line too: :mod:`.commands` (the parser, ``render``), :mod:`.attach`,
:mod:`.swap_extend`, :mod:`.ops` (doctor, audit, repair-labels), :mod:`.migrate`; reading input
and writing output in :mod:`.streams`, progress bars in :mod:`.progress`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; Ctrl-C while the command line loads exits 130 with one line."""
    try:
        from virtdriver.cli.commands import run
    except KeyboardInterrupt:
        if sys.stderr is not None:
            sys.stderr.write("virtdriver: error: interrupted\n")
        return 130
    return run(argv)
