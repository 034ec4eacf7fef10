"""Watching a domain job that blocks its caller (a live migration) and reporting its progress.

:func:`watching` runs a thread beside the blocking call: every ``interval`` seconds it reads
libvirt's job statistics (``virDomainGetJobStats``) and calls ``progress(processed, total)`` in
bytes. Whatever ``progress`` raises (an operator's interrupt) aborts the job
(``virDomainAbortJob``): the blocking call then fails as libvirt reports an aborted job, and the
caller's own rollback runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import libvirt

INTERVAL = 0.5  # seconds between two reads of the job statistics


@contextlib.contextmanager
def watching(dom: libvirt.virDomain, progress: Callable[[int, int], None] | None,
             interval: float | None = None) -> Iterator[None]:
    """Report ``dom``'s job progress while the body runs (nothing without ``progress``)."""
    if progress is None:
        yield
        return
    interval = INTERVAL if interval is None else interval
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(dom, progress, interval, stop),
                              name="virtdriver-job-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _watch(dom: libvirt.virDomain, progress: Callable[[int, int], None], interval: float,
           stop: threading.Event) -> None:
    while not stop.wait(interval):
        processed, total = job_bytes(dom)
        try:
            progress(processed, total)
        except BaseException:  # noqa: BLE001 - the caller asked to stop: abort the job
            try:
                dom.abortJob()
            except libvirt.libvirtError:
                pass  # the job ended meanwhile
            return


def job_bytes(dom: libvirt.virDomain) -> tuple[int, int]:
    """``(processed, total)`` bytes of ``dom``'s current job; ``(0, 0)`` when none is known."""
    try:
        stats = dom.jobStats(0)
    except libvirt.libvirtError:
        return 0, 0
    total = int(stats.get("data_total", 0) or 0)
    processed = int(stats.get("data_processed", 0) or 0)
    return min(processed, total) if total else processed, total
