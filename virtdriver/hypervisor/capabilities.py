"""What the host can do for volumes, asked of the running libvirt and its QEMU."""

from __future__ import annotations

import functools
import os
import subprocess
from typing import Any

import libvirt

from virtdriver.config.model import parse_xml

# libvirt >= 3.10 passes share-rw=on for <shareable/> disks; QEMU >= 2.10 has share-rw.
MIN_LIBVIRT_SHARE_RW = 3_010_000
MIN_QEMU_SHARE_RW = 2_010_000


def host_capabilities(conn: libvirt.virConnect) -> dict[str, Any]:
    """Versions, the default emulator, and whether multiattach and attach modes work."""
    libvirt_version = conn.getLibVersion()
    qemu_version = conn.getVersion()
    emulator = _emulator(conn)
    share_rw = _qemu_has_share_rw(emulator) if emulator else False
    multiattach = (libvirt_version >= MIN_LIBVIRT_SHARE_RW
                   and qemu_version >= MIN_QEMU_SHARE_RW and share_rw)
    return {
        "libvirt_version": version_string(libvirt_version),
        "qemu_version": version_string(qemu_version),
        "emulator": emulator,
        "qemu_share_rw": share_rw,
        "supports_multiattach": multiattach,
        "supports_attach_mode": multiattach,
    }


def version_string(number: int) -> str:
    """libvirt's version numbers (major * 1,000,000 + minor * 1,000 + micro) as text."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def _emulator(conn: libvirt.virConnect) -> str | None:
    """The QEMU binary libvirt uses by default, from its domain capabilities."""
    try:
        xml = conn.getDomainCapabilities(None, None, None, None, 0)
    except libvirt.libvirtError:
        return None
    return parse_xml(xml).findtext("path")


@functools.cache
def _qemu_has_share_rw(emulator: str) -> bool:
    """Whether this QEMU's SCSI and virtio disks have the ``share-rw`` property."""
    try:
        done = subprocess.run([emulator, "-machine", "none", "-nodefaults", "-device",
                               "scsi-hd,help"], capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "share-rw" in done.stdout


def kvm_available(device: str = "/dev/kvm") -> bool:
    """True when ``/dev/kvm`` exists and this process can open it read-write."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True
