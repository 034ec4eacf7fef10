"""Choosing a free guest device name and SCSI unit."""

from __future__ import annotations

import string
from collections.abc import Iterable

from virtdriver.config import Disk
from virtdriver.errors import AttachFailed
from virtdriver.render import BUS_PREFIX, MAX_SCSI_UNIT


def device_names(prefix: str) -> Iterable[str]:
    """vda, vdb, ..., vdz, vdaa, vdab, ... (the kernel's naming order)."""
    letters = string.ascii_lowercase
    yield from (prefix + a for a in letters)
    yield from (prefix + a + b for a in letters for b in letters)


def bus_for(target_dev: str | None, has_scsi_controller: bool) -> str:
    """The bus a device name implies, or the best default for the guest."""
    if target_dev:
        for bus, prefix in BUS_PREFIX.items():
            if target_dev.startswith(prefix):
                return bus
    return "scsi" if has_scsi_controller else "virtio"


def pick_target(disks: list[Disk], bus: str, target_dev: str | None,
                guest: str = "the guest", other_units: set[int] | frozenset[int] = frozenset(),
                ) -> tuple[str, int | None]:
    """A free device name on ``bus`` (or ``target_dev`` if free) and, for SCSI, a free unit
    (``other_units``: units that devices other than disks, SCSI hostdevs, already take).

    Every SCSI disk gets an explicit drive address: from ``sdh`` on libvirt would otherwise try
    to hot-plug a second controller.
    """
    used = {d.target.dev for d in disks if d.target is not None}
    if target_dev is None:
        target_dev = next((n for n in device_names(BUS_PREFIX[bus]) if n not in used), None)
        if target_dev is None:
            raise AttachFailed(f"no free {BUS_PREFIX[bus]}X device name left in {guest}")
    elif target_dev in used:
        raise AttachFailed(f"device {target_dev} is already in use in {guest}")
    if bus != "scsi":
        return target_dev, None
    units = {int(d.address.unit) for d in disks
             if d.address is not None and d.address.type == "drive"
             and d.address.controller in (None, "0") and d.address.unit is not None
             and d.target is not None and d.target.bus == "scsi"} | set(other_units)
    unit = next((u for u in range(MAX_SCSI_UNIT + 1) if u not in units), None)
    if unit is None:
        raise AttachFailed(f"no free unit on SCSI controller 0 of {guest}")
    return target_dev, unit
