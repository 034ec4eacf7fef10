"""Interrupts (SIGINT, SIGTERM, SIGHUP) held back while a live migration must not be left halfway.

A signal handled the usual way raises ``KeyboardInterrupt`` wherever the main thread happens to
be -- after libvirt's migration call succeeded, say, so that a guest that moved would be handled
as one that failed to. While an :class:`Interrupts` is entered (in the main thread), a signal is
only recorded, and optionally answered at once (``on_signal``: ask libvirt to cancel the
migration job); the migration decides at its own checkpoints (:meth:`Interrupts.check`) and,
once libvirt's call returned, by where the guest is. Elsewhere than the main thread nothing is
installed: signals are not delivered to other threads anyway.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """An interrupt acted on at a safe point, which says what it left as it was."""


class Interrupts:
    """Record SIGINT, SIGTERM and SIGHUP instead of raising; re-entrant (nested ``with`` blocks
    share it)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._depth = 0
        self._previous: dict[int, Any] = {}
        self._on_signal: Callable[[], None] | None = None

    def __enter__(self) -> Interrupts:
        if self._depth == 0 and threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        self._depth += 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._depth -= 1
        if self._depth == 0:
            for sig, previous in self._previous.items():
                signal.signal(sig, previous)
            self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self._on_signal is not None:
            self._on_signal()

    def ignore_after(self) -> None:
        """Leave the signals ignored (not restored) when the outermost block ends: for a process
        whose outcome is decided and that only reports it before exiting."""
        for sig in self._previous:
            self._previous[sig] = signal.SIG_IGN

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""

    def check(self, what: str) -> None:
        """Raise :class:`Interrupted` (saying ``what`` it leaves) if a signal came."""
        if self.received is not None:
            raise Interrupted(f"{self.name}: {what}")

    @contextlib.contextmanager
    def answering(self, on_signal: Callable[[], None]) -> Iterator[None]:
        """Call ``on_signal`` for a signal that comes while inside."""
        self._on_signal = on_signal
        try:
            yield
        finally:
            self._on_signal = None
