"""Waiting for a hot-unplug to finish: DEVICE_REMOVED events of one connection.

A detach returns before QEMU has let the device go; the DEVICE_REMOVED event says it has. Events
reach only connections opened after the event loop runs (see
:func:`testhosts.guests.open_connection`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import libvirt


class DeviceEvents:
    """Collects the DEVICE_REMOVED events of one connection, for every domain.

    Register it *before* the detach so that an early event is not lost.
    """

    def __init__(self, conn: libvirt.virConnect) -> None:
        self.conn = conn
        self._cond = threading.Condition()
        self._removed: list[tuple[str, str]] = []  # (domain UUID, alias)
        self._callback_id: int | None = conn.domainEventRegisterAny(
            None, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, self._on_removed, None)

    def _on_removed(self, conn: libvirt.virConnect, dom: libvirt.virDomain, alias: str,
                    opaque: Any) -> None:
        with self._cond:
            self._removed.append((dom.UUIDString(), alias))
            self._cond.notify_all()

    def removed(self) -> list[tuple[str, str]]:
        """The events seen and not consumed yet, as (domain UUID, alias)."""
        with self._cond:
            return list(self._removed)

    def clear(self) -> None:
        """Forget the events seen so far (those of detaches someone else waited for)."""
        with self._cond:
            self._removed.clear()

    def wait_removed(self, dom: libvirt.virDomain, alias: str, timeout: float = 10.0) -> None:
        """Wait for (and consume) the DEVICE_REMOVED event of ``alias`` on ``dom``."""
        key = (dom.UUIDString(), alias)
        deadline = time.monotonic() + timeout
        with self._cond:
            while key not in self._removed:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"no DEVICE_REMOVED for {alias} on {dom.name()} in {timeout}s")
                self._cond.wait(left)
            self._removed.remove(key)

    def close(self) -> None:
        if self._callback_id is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self.conn.domainEventDeregisterAny(self._callback_id)
            self._callback_id = None

    def __enter__(self) -> DeviceEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def detach_and_wait(events: DeviceEvents, dom: libvirt.virDomain, device_xml: str, alias: str,
                    *, timeout: float = 10.0,
                    flags: int = libvirt.VIR_DOMAIN_AFFECT_LIVE) -> float:
    """``detachDeviceFlags`` then wait for DEVICE_REMOVED; returns the seconds taken."""
    started = time.monotonic()
    dom.detachDeviceFlags(device_xml, flags)
    events.wait_removed(dom, alias, timeout)
    return time.monotonic() - started
