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
    while True:
        libvirt.virEventRunDefaultImpl()


@dataclass
class _Waiter:
    done: threading.Event = field(default_factory=threading.Event)
    failed: bool = False


class DeviceRemovals:
    """Dispatches DEVICE_REMOVED / DEVICE_REMOVAL_FAILED events to whoever waits for an alias.

    Register interest with :meth:`expect` *before* asking libvirt to detach, then :meth:`wait`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, str], _Waiter] = {}
        self._callbacks: list[int] = []

    def register(self, conn: libvirt.virConnect) -> None:
        """Subscribe to the two events on ``conn`` (again after every reconnect)."""
        self._callbacks = [
            conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
                                        self._removed, None),
            conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED,
                                        self._failed, None),
        ]

    def expect(self, domain_uuid: str, alias: str) -> None:
        with self._lock:
            self._waiters[(domain_uuid, alias)] = _Waiter()

    def forget(self, domain_uuid: str, alias: str) -> None:
        with self._lock:
            self._waiters.pop((domain_uuid, alias), None)

    def wait(self, domain_uuid: str, alias: str, timeout: float) -> bool | None:
        """``True`` when removed, ``False`` when the guest refused, ``None`` on timeout."""
        with self._lock:
            waiter = self._waiters[(domain_uuid, alias)]
        if not waiter.done.wait(timeout):
            return None
        self.forget(domain_uuid, alias)
        return not waiter.failed

    def _signal(self, dom: libvirt.virDomain, alias: str, failed: bool) -> None:
        with self._lock:
            waiter = self._waiters.get((dom.UUIDString(), alias))
        if waiter is not None:
            waiter.failed = failed
            waiter.done.set()

    def _removed(self, conn: libvirt.virConnect, dom: libvirt.virDomain, alias: str,
                 opaque: object) -> None:
        self._signal(dom, alias, failed=False)

    def _failed(self, conn: libvirt.virConnect, dom: libvirt.virDomain, alias: str,
                opaque: object) -> None:
        self._signal(dom, alias, failed=True)
