"""One read of the host at a time; callers that ask during a read share the next one.

A decision taken under a volume's lock must rest on a read of the host that started after the
lock was taken: then it sees every attachment made before. Each caller here gets the result of
a read that started after it asked, so that holds; but when many attaches of different volumes
ask at once (an attach storm), one read of every guest serves all who asked while the previous
one ran, instead of each reading every guest. With one caller at a time it is a plain read.
No lock is held while reading.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Round(Generic[T]):
    """One read and the callers that share it."""

    def __init__(self) -> None:
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # set when done without an error


class SharedRead(Generic[T]):
    """``read()`` for every caller, shared by the callers that asked while another ran."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._changed = threading.Condition()
        self._running = False
        self._waiting: _Round[T] | None = None  # the next read's callers, not started yet

    def get(self) -> T:
        """The result of a read that started after this call began."""
        with self._changed:
            if self._waiting is None:
                self._waiting = _Round()
            mine = self._waiting
            while not mine.done:
                if not self._running and self._waiting is mine:
                    self._running, self._waiting = True, None  # this caller reads for all
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
                mine.done, self._running = True, False
                self._changed.notify_all()
        return mine.result()
