"""virtdriver's loggers, with :mod:`logging` imported when one is first used.

A command that logs nothing (``virtdriver list``, ``virtdriver render``) then does not pay for
the import at its start (about 8 ms here: logging brings traceback, threading and more). The
handler a command wants is set up by the same first use: :func:`when_first_used`.

    LOG = logs.logger("virtdriver.driver")
    LOG.warning("...")  # logging is imported, set up, and the record logged here
"""

from __future__ import annotations

import _thread  # threading's own lock, without importing threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import logging

_pending_setup: list[Callable[[], None]] = []
_first_used = False
# Held while the set-up runs: a thread that logs meanwhile waits for it (reentrant: a set-up
# that itself logs goes on).
_setup_lock = _thread.RLock()


def when_first_used(setup: Callable[[], None]) -> None:
    """Run ``setup`` (which configures logging) when a virtdriver logger is first used, before
    its record is logged; at once if one was used already."""
    with _setup_lock:
        if not _first_used:
            _pending_setup.append(setup)
            return
    setup()


def _use_logging() -> None:
    global _first_used
    if _first_used:
        return
    with _setup_lock:
        while _pending_setup:
            _pending_setup.pop(0)()
        _first_used = True


class _Deferred:
    """``logging.getLogger(name)``, looked up on the first attribute asked of it."""

    __slots__ = ("name", "_logger")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None

    def __getattr__(self, attribute: str) -> Any:  # only what the slots do not hold
        if self._logger is None:
            import logging

            _use_logging()
            self._logger = logging.getLogger(self.name)
        return getattr(self._logger, attribute)


def logger(name: str) -> logging.Logger:
    """The logger ``name``, :mod:`logging` imported when it is first used."""
    return cast("logging.Logger", _Deferred(name))
