"""Random attach/detach operations for the concurrency stress test (tests/host/test_stress.py).

Used by the test's own threads and by the worker processes (tests/support/stress_worker.py)
alike, so both classify outcomes the same way. An operation's outcome is ``ok`` or one of the
refusals a racing caller must expect; anything else is *unexpected* and fails the test.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import traceback
from collections import Counter
from typing import Any

from virtdriver.errors import AttachFailed, NotAttached, VolumeInUse

EXPECTED_ATTACH_REFUSAL = "is already attached to"


@dataclasses.dataclass(frozen=True)
class StressVolume:
    """One volume of the test: its connection_info and whether it is multiattach."""

    volume_id: str
    connection_info: dict[str, Any]

    @property
    def multiattach(self) -> bool:
        return self.connection_info.get("multiattach") is True


@dataclasses.dataclass
class Tally:
    """Outcomes of operations, and the unexpected ones in full."""

    outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    unexpected: list[str] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def add(self, outcome: str, detail: str | None = None) -> None:
        with self.lock:
            self.outcomes[outcome] += 1
            if detail is not None:
                self.unexpected.append(detail)

    def merge(self, outcomes: dict[str, int], unexpected: list[str]) -> None:
        with self.lock:
            self.outcomes.update(outcomes)
            self.unexpected.extend(unexpected)

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())


def run_one(driver: Any, rng: random.Random, guests: list[str], volumes: list[StressVolume],
            tally: Tally, who: str) -> None:
    """One random attach or detach (random guest, volume and attach mode)."""
    guest = rng.choice(guests)
    volume = rng.choice(volumes)
    kind = "ma" if volume.multiattach else "single"
    if rng.random() < 0.55:
        mode = rng.choice(("ro", "rw"))
        what = f"{who}: attach {kind} {mode} to {guest}"
        try:
            driver.attach_volume(volume.connection_info, guest, attach_mode=mode)
        except VolumeInUse:
            tally.add(f"attach {kind}: in use elsewhere")
        except AttachFailed as exc:
            if EXPECTED_ATTACH_REFUSAL in str(exc):
                tally.add(f"attach {kind}: already attached")
            else:
                tally.add(f"attach {kind}: UNEXPECTED", f"{what}: {exc!r}")
        except Exception as exc:  # noqa: BLE001 - everything else is a finding
            tally.add(f"attach {kind}: UNEXPECTED",
                      f"{what}: {exc!r}\n{traceback.format_exc(limit=6)}")
        else:
            tally.add(f"attach {kind}: ok")
    else:
        what = f"{who}: detach {kind} from {guest}"
        try:
            driver.detach_volume(guest, volume.volume_id)
        except NotAttached:
            tally.add(f"detach {kind}: not attached")
        except Exception as exc:  # noqa: BLE001
            tally.add(f"detach {kind}: UNEXPECTED",
                      f"{what}: {exc!r}\n{traceback.format_exc(limit=6)}")
        else:
            tally.add(f"detach {kind}: ok")


def run_round(driver: Any, seeds: list[int], ops: int, guests: list[str],
              volumes: list[StressVolume], tally: Tally, who: str) -> None:
    """``len(seeds)`` threads sharing ``driver``, each running ``ops`` random operations."""

    def worker(index: int, seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(ops):
            run_one(driver, rng, guests, volumes, tally, f"{who}/t{index}")

    threads = [threading.Thread(target=worker, args=(i, s), name=f"{who}-t{i}")
               for i, s in enumerate(seeds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        if t.is_alive():
            tally.add("hung", f"{who}: thread {t.name} still running after 120 s")
