"""The one timing loop every throughput benchmark uses (also under nova's own venv)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_rate(fn: Callable[[], object], seconds: float, windows: int) -> float:
    """Calls per second: the best of ``windows`` windows of ``seconds`` each."""
    best = 0.0
    for _ in range(windows):
        n = 0
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            for _ in range(50):
                fn()
            n += 50
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n / (now - start))
    return best
