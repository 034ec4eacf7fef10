"""One read of the host at a time, shared by every caller it can serve.

A decision taken under a volume's locks must rest on a read of the host begun after the caller
asked and after the last change made under them (:func:`virtdriver.driver.attach.read_from`):
then it sees every attachment made before. A caller joins the read under way when that read
began late enough, else the next one, which all who ask meanwhile share. So in an attach storm of
different volumes, each settled long before, one read of every guest serves every attach,
instead of each reading every guest. No lock is held while reading.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Round(Generic[T]):
    """One read, when it began, and the callers that share it."""

    def __init__(self) -> None:
        self.began = 0
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None

    def result(self) -> tuple[int, T]:
        if self.error is not None:
            raise self.error
        return self.began, self.value  # type: ignore[return-value]  # set when done, no error


class SharedRead(Generic[T]):
    """``read()`` for every caller, shared by the callers one read can serve."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._changed = threading.Condition()
        self._running: _Round[T] | None = None
        self._waiting: _Round[T] | None = None  # the next read's callers, not begun yet

    def get(self, not_before: int) -> tuple[int, T]:
        """When a read begun at or after ``not_before`` (``time.monotonic_ns``) began, and its
        result."""
        with self._changed:
            running = self._running
            if running is not None and running.began >= not_before:
                mine = running
            else:
                if self._waiting is None:
                    self._waiting = _Round()
                mine = self._waiting
            while not mine.done:
                if self._running is None and self._waiting is mine:
                    self._running, self._waiting = mine, None  # this caller reads for all
                    mine.began = time.monotonic_ns()
                    break
                self._changed.wait()
            else:
                return mine.result()
        try:
            mine.value = self._read()
        except BaseException as exc:  # every caller of this round gets it
            mine.error = exc
        finally:
            with self._changed:
                mine.done, self._running = True, None
                self._changed.notify_all()
        return mine.result()
