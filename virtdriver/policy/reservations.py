"""SCSI persistent reservations as libvirt shows them: who can hold registrations, as whom.

libvirt does not expose the registrations a target holds (no API reads PERSISTENT RESERVE IN);
what it exposes is how each guest's SCSI commands reach the target, and that decides who can
register and reserve, and under which initiator identity the target sees it:

- ``device='lun'`` on a host block device: QEMU passes the guest's SCSI commands to the host's
  device; PERSISTENT RESERVE OUT goes through ``qemu-pr-helper`` (``<reservations
  managed='yes'/>``: libvirt starts one per guest; or a helper socket given in the XML), else
  straight from QEMU. Either way the target sees the **host's** initiator: every guest on this
  host that passes reservations to one device is one node to the target.
- ``device='lun'`` on QEMU-native iSCSI: QEMU's own initiator (libiscsi) logs in under
  ``<initiator><iqn name=.../>`` or, without it, QEMU's default name made from the guest's UUID.
  Each QEMU opens its own session, and an iSCSI initiator port is the name *and* the session's
  ISID: each guest is its own node to the target even when the names are the same (the host's,
  virtdriver's default). tests/inguest/test_reservations.py shows both on real guests.
- ``device='disk'``: QEMU emulates the disk; the guest's reservations never reach the target.

The ``fence`` danger: two guests on this host pass reservations to the same volume as one
initiator -- the target cannot tell them apart, so a reservation by one does not fence the other
(and the second registration is refused). That is every pair of guests on one host device.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from virtdriver.config import Disk

#: The identity a target sees for every guest that reaches a host block device from this host.
HOST_INITIATOR: Final = ("host",)


def reservation_route(disk: Disk, guest_uuid: str) -> tuple[str, tuple[Any, ...]] | None:
    """How ``disk``'s SCSI reservations reach the target: (what to tell an operator, the
    initiator identity the target sees); ``None`` when they do not (not ``device='lun'``)."""
    if disk.device != "lun" or disk.source is None:
        return None
    source = disk.source
    if disk.type == "network":
        iqn = source.initiator.iqn.name if source.initiator and source.initiator.iqn else None
        name = iqn or "QEMU's default name (from the guest's UUID)"
        return f"iSCSI as {name}, its own session", ("session", guest_uuid)
    res = source.reservations
    if res is not None and res.managed == "yes":
        how = "libvirt's managed qemu-pr-helper"
    elif res is not None and res.source is not None and res.source.path:
        how = f"qemu-pr-helper at {res.source.path}"
    else:
        how = "QEMU itself (SG_IO, no qemu-pr-helper)"
    return f"{how}, as the host's initiator", HOST_INITIATOR


def shared_identities(routes: Iterable[tuple[str, tuple[str, tuple[Any, ...]]]]) -> \
        dict[tuple[Any, ...], list[str]]:
    """Initiator identities that several guests share: identity -> the guests (sorted).

    ``routes`` are (guest, route) pairs as :func:`reservation_route` returns them."""
    by_identity: dict[tuple[Any, ...], set[str]] = {}
    for guest, (_how, identity) in routes:
        by_identity.setdefault(identity, set()).add(guest)
    return {k: sorted(v) for k, v in by_identity.items() if len(v) > 1}


def fence_message(guests: list[str], identity: tuple[Any, ...]) -> str:
    who = ("the host's own initiator (the target sees this host, not the guest)"
           if identity == HOST_INITIATOR else f"initiator {identity[-1]}")
    return (f"{', '.join(guests)} pass SCSI reservations to this volume as one initiator, "
            f"{who}: the target cannot tell them apart, so a reservation by one does not fence "
            "the other; run them on different hosts, or attach the volume through QEMU's own "
            "iSCSI initiator (native_iscsi: a session per guest)")
