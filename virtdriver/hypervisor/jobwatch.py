"""Watching a domain job that blocks its caller (a live migration) and reporting its progress.

:func:`watching` runs a thread beside the blocking call: every ``interval`` seconds it reads
libvirt's job statistics (``virDomainGetJobStats``) and calls ``progress(processed, total)`` in
bytes. Whatever ``progress`` raises (an operator's interrupt) aborts the job
(``virDomainAbortJob``): the blocking call then fails as libvirt reports an aborted job, and the
caller's own rollback runs.

:func:`released_after_switchover` keeps libvirt's migration call from waiting for ever when a
cancel or a failure lands at the guest's switchover pause (see there).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

import libvirt

INTERVAL = 0.5  # seconds between two reads of the job statistics
LOG = logging.getLogger("virtdriver.driver")


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


@contextlib.contextmanager
def released_after_switchover(dom: libvirt.virDomain) -> Iterator[None]:
    """Release libvirt's migration job stuck after QEMU resumed ``dom`` at the switchover.

    libvirt's source side has QEMU pause the guest before its switchover (SUSPENDED, detail
    MIGRATED), learns that the memory was sent, then waits for that pause to be processed, with
    no bound, before it goes on. A cancel (``virDomainAbortJob``) or a failure landing between
    QEMU's pause and that wait makes QEMU resume the guest itself (RESUMED, detail UNPAUSED):
    libvirt 9.0 then waits for a pause that is over and its migration call never returns (seen:
    QEMU's migration "cancelled", the guest running, the job "Outgoing migration" for ever).
    While the body runs, that pair of events pauses the guest once more, which lets libvirt's
    migration go on to fail as cancelled (its own clean-up resumes the guest). Paused after
    libvirt's job had ended (libvirt was not stuck: it saw the end itself, and the pause is
    ``PAUSED_USER``, not ``PAUSED_MIGRATION``), the guest is resumed at once; a guest still
    paused by this once the body ended is resumed then.
    """
    conn = dom.connect()
    switched = threading.Event()  # QEMU paused the guest for the switchover
    wake = threading.Event()      # ... QEMU resumed it itself (the migration ended there), or
    over = threading.Event()      # the body ended

    def lifecycle(conn: libvirt.virConnect, _dom: libvirt.virDomain, event: int, detail: int,
                  opaque: object) -> None:
        if (event, detail) == (libvirt.VIR_DOMAIN_EVENT_SUSPENDED,
                               libvirt.VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED):
            switched.set()
        elif (switched.is_set() and (event, detail) == (libvirt.VIR_DOMAIN_EVENT_RESUMED,
                                                        libvirt.VIR_DOMAIN_EVENT_RESUMED_UNPAUSED)):
            wake.set()

    try:
        callback = conn.domainEventRegisterAny(dom, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                               lifecycle, None)
    except libvirt.libvirtError:
        yield  # no events on this connection: nothing to watch
        return
    paused = threading.Event()  # paused by this

    def release() -> None:
        wake.wait()
        if over.is_set():
            return
        LOG.warning("QEMU resumed guest %s at its migration's switchover (cancelled or failed "
                    "there): pausing it, so that libvirt's migration job ends", dom.name())
        try:
            dom.suspend()
            paused.set()
            if dom.state()[1] != libvirt.VIR_DOMAIN_PAUSED_MIGRATION:
                # paused after libvirt's job had ended (libvirt had seen the end itself): the
                # guest was running as it left it, and nothing waits for this pause
                dom.resume()
                paused.clear()
        except libvirt.libvirtError:
            pass  # the job ended meanwhile (or the guest is gone): nothing waits

    thread = threading.Thread(target=release, name="virtdriver-switchover", daemon=True)
    thread.start()
    try:
        yield
    finally:
        over.set()
        wake.set()
        thread.join()
        try:
            conn.domainEventDeregisterAny(callback)
        except libvirt.libvirtError:
            pass
        if paused.is_set():
            _resume_paused(dom)


def _resume_paused(dom: libvirt.virDomain) -> None:
    """Resume ``dom`` if it is still paused (libvirt's clean-up did not resume it)."""
    try:
        if dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
            dom.resume()
    except libvirt.libvirtError:
        pass  # gone from here (it moved after all): nothing to resume
