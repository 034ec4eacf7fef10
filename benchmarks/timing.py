"""What every benchmark times with: one throughput loop (also under nova's own venv, which has
no libvirt: libvirt is imported only by what counts its calls), one timed call, one counter of
libvirt calls, and the host the attach benchmarks measure on (guests with volumes of their own).
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


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


def timed(call: Callable[..., object], *args: object, settle: float = 0.0) -> tuple[float, float]:
    """``(wall seconds, CPU seconds of the calling thread)`` of ``call(*args)``, started after
    ``settle`` seconds of quiet. The CPU time is the caller's own work (waits excluded): on a
    shared machine it is what shows a saving when the wall clock is noise."""
    if settle:
        time.sleep(settle)
    cpu = time.thread_time()
    start = time.perf_counter()
    call(*args)
    return time.perf_counter() - start, time.thread_time() - cpu


# Methods the libvirt client library answers from what it holds: no round trip to libvirtd.
LOCAL_CALLS = frozenset({"virDomain.UUIDString", "virDomain.UUID", "virDomain.name",
                         "virDomain.ID", "virDomain.connect", "virConnect.isAlive"})


class LibvirtCalls:
    """Every public method of ``virDomain`` and ``virConnect`` counted and timed, while
    installed (``with calls.installed():``) and :attr:`into` is a dict (``None``: not counting).

    ``into`` maps ``Class.method`` to the durations of its calls; point it at another dict to
    count another operation.
    """

    def __init__(self) -> None:
        self.into: dict[str, list[float]] | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[LibvirtCalls]:
        import libvirt

        saved = {}
        for cls in (libvirt.virDomain, libvirt.virConnect):
            for name in dir(cls):
                method = getattr(cls, name)
                if name.startswith("_") or not callable(method):
                    continue
                saved[(cls, name)] = method
                setattr(cls, name, self._counted(method, f"{cls.__name__}.{name}"))
        try:
            yield self
        finally:
            for (cls, name), method in saved.items():
                setattr(cls, name, method)

    def _counted(self, method: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(method)
        def counted(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                if self.into is not None:
                    self.into.setdefault(name, []).append(time.perf_counter() - start)

        return counted

    def count(self, call: Callable[[], object]) -> dict[str, list[float]]:
        """The calls ``call()`` makes (installed already)."""
        self.into = {}
        try:
            call()
            return self.into
        finally:
            self.into = None


def round_trips(calls: dict[str, list[float]]) -> int:
    """How many of ``calls`` went to libvirtd."""
    return sum(len(v) for name, v in calls.items() if name not in LOCAL_CALLS)


def file_volume(image: Path) -> dict:
    """A multiattach volume on a raw file (the GPFS connector: os-brick's connect is a no-op
    for it, so its own cost is not measured), under a new id."""
    vid = str(uuid.uuid4())
    return {"driver_volume_type": "gpfs", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "device_path": str(image)}}


class AttachHost:
    """The host the attach benchmarks measure on: a driver, a shared raw image to attach, and
    running guests (:meth:`grow`), each with a volume of its own (a disk in each guest, a
    host-connection record each, as on a compute host)."""

    def __init__(self, conn: Any, guests: Any, driver: Any, tmp: Path, prefix: str) -> None:
        from testhosts.guests import sparse_file

        self.conn, self.guests, self.driver = conn, guests, driver
        self.tmp, self.prefix = tmp, prefix
        self.image = sparse_file(tmp / "bench.raw")
        self.doms: list[Any] = []

    def grow(self, count: int) -> Any:
        """Start guests until there are ``count``, and wait until they are idle; one untimed
        attach and detach on the first (os-brick's one-time import and setup), which is
        returned: the guest measured on."""
        from testhosts.guests import sparse_file

        def start(i: int) -> Any:
            dom = self.guests.start(f"{self.prefix}{i}")
            self.driver.attach_volume(file_volume(sparse_file(self.tmp / f"own{i}.raw")),
                                      dom.name())
            return dom

        self.doms += start_idle(self.conn, start, range(len(self.doms), count))
        wait_until_idle(self.conn, self.doms)
        first = self.doms[0]
        warm = file_volume(self.image)
        self.driver.attach_volume(warm, first.name())
        self.driver.detach_volume(first.name(), warm["data"]["volume_id"])
        return first


BOOT_BATCH = 4  # guests booting at once: each gets at least 1/4 of what is free, above ``busy``


def start_idle(conn: Any, start: Callable[[int], Any], indices: Iterable[int], *,
               batch: int = BOOT_BATCH) -> list[Any]:
    """``start(i)`` (which starts guest ``i`` and returns its domain) for each index, ``batch``
    at a time in parallel, each batch waited for until idle (:func:`wait_until_idle`) before the
    next starts; the domains, in order."""
    wanted, doms = list(indices), []
    for first in range(0, len(wanted), batch):
        with ThreadPoolExecutor(batch) as pool:
            started = list(pool.map(start, wanted[first:first + batch]))
        wait_until_idle(conn, started)
        doms += started
    return doms


def wait_until_idle(conn: Any, doms: list[Any], *, busy: float = 0.1, window: float = 0.5,
                    timeout: float = 600.0) -> float:
    """Wait until each of ``doms`` (running guests) uses less than ``busy`` of a core over
    ``window`` seconds, and return how long that took (other guests on the host, another
    benchmark's, are not waited for). An OS-less guest's firmware keeps a core busy for seconds
    after it starts (measured: one guest alone used a whole core for 3.3 s, then 1%), so a
    benchmark that measured right after starting 24 or 64 guests measured during their boot.

    Only a few booting guests at a time can be told apart from idle ones this way: guests that
    boot together share the cores, so each may use less than ``busy`` while the host is
    saturated (measured: growing from 8 guests to 32 at once, this returned after 17 s with both
    cores 100% busy for the next 3 s; 24 guests booting need about 40 s of both cores). Start
    guests with :func:`start_idle`, which waits for every few."""
    import libvirt

    started = time.monotonic()
    ours = {dom.UUIDString() for dom in doms}

    def cpu_times() -> dict[str, int]:
        stats = conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_CPU_TOTAL,
                                       libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)
        return {uuid: values.get("cpu.time", 0) for dom, values in stats
                if (uuid := dom.UUIDString()) in ours}

    while True:
        before, start = cpu_times(), time.monotonic()
        time.sleep(window)
        after, elapsed = cpu_times(), time.monotonic() - start
        busiest = max((after[u] - before[u] for u in after.keys() & before.keys()), default=0)
        if busiest / 1e9 / elapsed < busy:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"the guests are still busy after {timeout:.0f} s (one used "
                               f"{busiest / 1e9 / elapsed:.0%} of a core)")


@contextlib.contextmanager
def attach_host(prefix: str) -> Iterator[AttachHost]:
    """An :class:`AttachHost` on ``qemu:///system``; its guests and files are removed after."""
    import tempfile

    from testhosts.guests import Guests, open_connection
    from virtdriver import LibvirtVolumeDriver

    conn = open_connection("qemu:///system")
    with tempfile.TemporaryDirectory() as tmp, Guests(conn, memory_mib=64) as guests:
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=Path(tmp) / "state")
        try:
            yield AttachHost(conn, guests, driver, Path(tmp), prefix)
        finally:
            driver.close()


__all__ = ["BOOT_BATCH", "LOCAL_CALLS", "AttachHost", "LibvirtCalls", "attach_host",
           "best_rate", "file_volume", "round_trips", "start_idle", "timed", "wait_until_idle"]
