"""Progress of long work on the operator's terminal, and Ctrl-C that lets the work undo itself.

:class:`Progress` is the ``progress(done, total)`` callback the driver's long operations take
(a swap's block copy, a live migration): on a terminal it draws a bar with percent, bytes, rate
and time left (tqdm, imported when the first bar is drawn, so the command line starts as fast as
before); off a terminal, or with ``--json``, it draws nothing. Its :meth:`Progress.step` counts
the guests of an attach-many: the same bar on a terminal, a line per guest otherwise.

While it is active, Ctrl-C does not raise wherever the program happens to be (which could be
between a block copy's pivot and its bookkeeping); it is remembered, and the next progress report
raises :class:`Interrupted` there, where the operation knows how to stop: a block copy is
cancelled and the guest keeps its old volume, a migration is aborted and its preparation undone.
A migration's reports come from a watcher thread while the main thread waits inside libvirt, so
the interrupt is also read from :func:`signal.set_wakeup_fd`, which Python's C-level signal
handler writes at once, whatever the main thread is doing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, TextIO

from virtdriver.driver.interrupts import Interrupted


class Progress:
    """A ``progress(done, total)`` callback drawing a bar on a terminal; see the module."""

    def __init__(self, label: str, *, show: bool = True, stream: TextIO | None = None,
                 steps: int = 0) -> None:
        self.label = label
        self.steps, self.stepped = steps, 0
        self.stream = stream if stream is not None else sys.stderr
        self.show = show and _is_terminal(self.stream)
        self.interrupted = threading.Event()
        self.updates = 0
        self._bar: Any = None
        self._wakeup: tuple[int, int] | None = None
        self._old: tuple[Any, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._interrupt_seen():
            raise Interrupted(f"{self.label} interrupted")
        if not self.show or total <= 0:
            return
        if self._bar is None:
            from tqdm import tqdm  # lazily: only a terminal that shows a bar pays for it

            in_bytes = not self.steps
            self._bar = tqdm(total=total, desc=self.label, unit="B" if in_bytes else " guests",
                             unit_scale=in_bytes, unit_divisor=1024, file=self.stream,
                             dynamic_ncols=True, mininterval=0 if self.steps else 0.2, leave=True)
        if self._bar.total != total:
            self._bar.total = total
        self._bar.update(max(done - self._bar.n, 0))
        self.updates += 1

    def step(self, name: str, outcome: object) -> None:
        """One of ``steps`` guests is done: the bar moves, or one line says how it ended."""
        self.stepped += 1
        if self.show:
            self(self.stepped, self.steps)
            if self.stepped == self.steps:
                self.close()
        else:
            self.stream.write(f"{self.stepped}/{self.steps} {name}: {outcome_word(outcome)}\n")
            self.stream.flush()

    # ---- Ctrl-C -----------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        if threading.current_thread() is threading.main_thread():
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            self._wakeup = (read, write)
            previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            self._old = (signal.signal(signal.SIGINT, self._on_sigint), previous_fd)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
        if self._old is not None:
            handler, previous_fd = self._old
            signal.signal(signal.SIGINT, handler)
            signal.set_wakeup_fd(previous_fd)
            self._old = None
        if self._wakeup is not None:
            seen = self._interrupt_seen()
            for fd in self._wakeup:
                os.close(fd)
            self._wakeup = None
        else:
            seen = self.interrupted.is_set()
        if seen and exc is not None and not isinstance(exc, KeyboardInterrupt):
            # The operation failed because it was stopped (a migration aborted): say so.
            raise Interrupted(f"{self.label} interrupted: {exc}") from None

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted.set()

    def _interrupt_seen(self) -> bool:
        if self.interrupted.is_set():
            return True
        if self._wakeup is not None:
            try:
                if signal.SIGINT.value in os.read(self._wakeup[0], 512):
                    self.interrupted.set()
            except (BlockingIOError, OSError):
                pass
        return self.interrupted.is_set()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def outcome_word(outcome: object) -> str:
    """One guest's outcome in an attach-many, in a word or two."""
    from virtdriver.errors import AttachRolledBack

    if isinstance(outcome, AttachRolledBack):
        return "rolled back"
    return "failed" if isinstance(outcome, Exception) else "attached"


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
