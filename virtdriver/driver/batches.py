"""Requests that wait together for one lock, done by the first of them as one batch.

The first caller with a key leads: it waits for the lock, and every caller with the same key
who asks meanwhile joins its batch. Once the leader holds the lock it takes the batch (later
callers start the next one) and does it whole; each caller gets its own outcome. Nothing is
held while joining, and a caller alone is a batch of one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Batch(Generic[Item, Result]):
    """The callers of one batch: their items, then their outcomes."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.outcomes: list[Result | BaseException] = []
        self.done = threading.Event()

    def outcome(self, index: int) -> Result:
        found = self.outcomes[index]
        if isinstance(found, BaseException):
            raise found
        return found


# The leader's work: given ``take`` (which closes the batch and returns its items), an outcome
# per item, in order.
Run = Callable[[Callable[[], list[Item]]], list["Result | BaseException"]]


class Batches(Generic[Item, Result]):
    """Open batches by key; :meth:`submit` joins one or leads a new one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[Hashable, _Batch[Item, Result]] = {}

    def submit(self, key: Hashable, item: Item, run: Run[Item, Result]) -> Result:
        """``item``'s outcome: as a member of the open batch with ``key``, or as the leader of
        a new one, which calls ``run`` for the whole batch."""
        with self._lock:
            batch = self._open.get(key)
            leader = batch is None
            if batch is None:
                batch = self._open[key] = _Batch()
            index = len(batch.items)
            batch.items.append(item)
        if not leader:
            batch.done.wait()
            return batch.outcome(index)

        def take() -> list[Item]:
            with self._lock:
                if self._open.get(key) is batch:
                    del self._open[key]
                return list(batch.items)

        try:
            outcomes = run(take)
        except BaseException as exc:  # before or while taking: every member gets it
            outcomes = [exc] * len(take())
        batch.outcomes = outcomes
        batch.done.set()
        return batch.outcome(index)
