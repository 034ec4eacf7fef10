"""libvirt's event loop in a background thread, and waiting for device-removal events.

libvirt delivers domain events only on connections opened after an event-loop implementation was
registered, and the embedded driver refuses to open without one; :func:`ensure_event_loop` is
therefore called before any connection is opened.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import libvirt

_loop_lock = threading.Lock()
_loop_started = False


def ensure_event_loop() -> None:
    """Register libvirt's default event loop and run it in a daemon thread (once per process)."""
    global _loop_started
    with _loop_lock:
        if _loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()
        thread = threading.Thread(target=_run, name="libvirt-events", daemon=True)
        thread.start()
        _loop_started = True


def _run() -> None:
    # Signals are handled by the main thread: leave them to it (so an interrupt wakes it at once).
    import signal  # (imported by this thread, not on the way of a command's start)

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    while True:
        libvirt.virEventRunDefaultImpl()


@dataclass
class _Waiter:
    done: threading.Event = field(default_factory=threading.Event)
    outcome: int = 0


REMOVED, REMOVAL_FAILED = 1, 2
MAX_STOPS = 256  # guests whose last stop is remembered


class DomainEvents:
    """Dispatches domain events to whoever waits for them.

    Device removals (DEVICE_REMOVED / DEVICE_REMOVAL_FAILED) are keyed by the device alias, block
    jobs (BLOCK_JOB_2) by the disk's target. Register interest with ``expect*`` *before* asking
    libvirt to act, then wait; an event that arrives in between is not lost.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, str, str], _Waiter] = {}
        self._stops: dict[str, int] = {}  # uuid -> detail of its last STOPPED event
        self._conn: libvirt.virConnect | None = None
        self._subscribed: libvirt.virConnect | None = None

    def stop_detail(self, domain_uuid: str) -> int | None:
        """How the guest last stopped (``VIR_DOMAIN_EVENT_STOPPED_*``) since it last started, as
        far as this connection saw; ``None`` when it did not see it stop."""
        with self._lock:
            return self._stops.get(domain_uuid)

    def left_by_migration(self, domain_uuid: str) -> bool:
        """True when the guest stopped here because it moved to another host: a guest that left
        is not a guest that stopped (its devices went along, they were not removed)."""
        return self.stop_detail(domain_uuid) == libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED

    def register(self, conn: libvirt.virConnect) -> None:
        """Use ``conn`` (again after every reconnect). The subscription itself (four calls to
        libvirt) is made when something is first waited for: a command that only reads, such
        as ``virtdriver list``, never makes it."""
        with self._lock:
            self._conn = conn
            if self._subscribed is not None:
                self._subscribe(conn)

    def watch(self) -> None:
        """Subscribe now, when not yet subscribed: before waiting for something whose outcome a
        lifecycle event says (a guest that may leave by migration while a lock is waited for)."""
        with self._lock:
            if self._conn is not None and self._subscribed is not self._conn:
                self._subscribe(self._conn)

    def _subscribe(self, conn: libvirt.virConnect) -> None:
        """Subscribe on ``conn`` (the caller holds ``self._lock``)."""
        conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
                                    self._removed, None)
        conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED,
                                    self._removal_failed, None)
        conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_BLOCK_JOB_2,
                                    self._block_job, None)
        conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                    self._lifecycle, None)
        self._subscribed = conn

    # ---- device removal --------------------------------------------------------------------

    def expect(self, domain_uuid: str, alias: str) -> None:
        self._expect((domain_uuid, "device", alias))

    def forget(self, domain_uuid: str, alias: str) -> None:
        self._forget((domain_uuid, "device", alias))

    def wait(self, domain_uuid: str, alias: str, timeout: float) -> bool | None:
        """``True`` when removed, ``False`` when the guest refused, ``None`` on timeout."""
        outcome = self._wait((domain_uuid, "device", alias), timeout)
        return None if outcome is None else outcome == REMOVED

    # ---- block jobs ------------------------------------------------------------------------

    def expect_job(self, domain_uuid: str, target: str) -> None:
        self._expect((domain_uuid, "job", target))

    def forget_job(self, domain_uuid: str, target: str) -> None:
        self._forget((domain_uuid, "job", target))

    def wait_job(self, domain_uuid: str, target: str, timeout: float) -> int | None:
        """The job's status (``VIR_DOMAIN_BLOCK_JOB_READY``, ``..._FAILED``, ...) or ``None``."""
        outcome = self._wait((domain_uuid, "job", target), timeout)
        if outcome is not None:
            self._expect((domain_uuid, "job", target))  # ready for the job's next event
        return outcome

    # ---- plumbing --------------------------------------------------------------------------

    def _expect(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            if self._conn is not None and self._subscribed is not self._conn:
                self._subscribe(self._conn)  # before the caller acts: no event can be missed
            self._waiters[key] = _Waiter()

    def _forget(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            self._waiters.pop(key, None)

    def _wait(self, key: tuple[str, str, str], timeout: float) -> int | None:
        with self._lock:
            waiter = self._waiters[key]
        if not waiter.done.wait(timeout):
            return None
        self._forget(key)
        return waiter.outcome

    def _signal(self, key: tuple[str, str, str], outcome: int) -> None:
        with self._lock:
            waiter = self._waiters.get(key)
        if waiter is not None and not waiter.done.is_set():
            waiter.outcome = outcome
            waiter.done.set()

    def _removed(self, conn: libvirt.virConnect, dom: libvirt.virDomain, alias: str,
                 opaque: object) -> None:
        self._signal((dom.UUIDString(), "device", alias), REMOVED)

    def _removal_failed(self, conn: libvirt.virConnect, dom: libvirt.virDomain, alias: str,
                        opaque: object) -> None:
        self._signal((dom.UUIDString(), "device", alias), REMOVAL_FAILED)

    def _lifecycle(self, conn: libvirt.virConnect, dom: libvirt.virDomain, event: int,
                   detail: int, opaque: object) -> None:
        """A guest that stopped has no live devices and no block jobs left: wake its waiters (and
        remember how it stopped: see :meth:`left_by_migration`)."""
        uuid = dom.UUIDString()
        if event == libvirt.VIR_DOMAIN_EVENT_STARTED:
            with self._lock:
                self._stops.pop(uuid, None)
        if event not in (libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_UNDEFINED):
            return
        with self._lock:
            if event == libvirt.VIR_DOMAIN_EVENT_STOPPED:
                self._stops.pop(uuid, None)
                self._stops[uuid] = detail
                while len(self._stops) > MAX_STOPS:
                    self._stops.pop(next(iter(self._stops)))
            keys = [key for key in self._waiters if key[0] == uuid]
        for key in keys:
            self._signal(key, REMOVED if key[1] == "device"
                         else libvirt.VIR_DOMAIN_BLOCK_JOB_FAILED)

    def _block_job(self, conn: libvirt.virConnect, dom: libvirt.virDomain, target: str,
                   job_type: int, status: int, opaque: object) -> None:
        self._signal((dom.UUIDString(), "job", target), status)
