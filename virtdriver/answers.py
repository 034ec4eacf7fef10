"""Answers kept for inputs once found valid, so that a render does not check them again.

The same few portals, share hosts and QoS limits come back on every render of a host's volumes.
An answer is kept only for an input that passed its check; a refusal is never kept, so every
invalid input is checked, and its message made, each time. Only keys of exactly one type are kept
(a subclass could compare or hash otherwise), and at most ``limit`` of them, so unique inputs
cannot grow a table without bound. Within one process the tables are shared by threads: a dict's
get and set are atomic in CPython, and two threads can at worst find the same answer twice.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ValidAnswers(Generic[K, V]):
    """A bounded table of answers, keyed by inputs of type ``kind`` that were found valid."""

    __slots__ = ("_kept", "_kind", "_limit")

    def __init__(self, kind: type[K], limit: int) -> None:
        self._kept: dict[K, V] = {}
        self._kind = kind
        self._limit = limit

    def get(self, key: object) -> V | None:
        """The answer kept for ``key``, or ``None`` (check it, then :meth:`keep` the answer)."""
        if key.__class__ is not self._kind:
            return None
        return self._kept.get(key)  # type: ignore[call-overload]

    def keep(self, key: K, answer: V) -> V:
        """Keep ``answer`` for a ``key`` that passed its check (unless the table is full)."""
        if key.__class__ is self._kind and len(self._kept) < self._limit:
            self._kept[key] = answer
        return answer

    def __len__(self) -> int:
        return len(self._kept)
