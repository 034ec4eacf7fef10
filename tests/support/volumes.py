"""connection_info and disk XML for tests, by hand (what Cinder or a test writer would pass)."""

from __future__ import annotations

import os
import struct
import uuid
from pathlib import Path


def local_volume(device_path: str, *, multiattach: bool, volume_id: str | None = None) -> dict:
    """connection_info of a host block device for os-brick's LOCAL connector."""
    vid = volume_id or str(uuid.uuid4())
    return {"driver_volume_type": "local", "serial": vid, "multiattach": multiattach,
            "data": {"volume_id": vid, "device_path": device_path, "access_mode": "rw"}}


def file_volume(path: str, *, multiattach: bool, volume_id: str | None = None) -> dict:
    """connection_info of a raw file (os-brick's GPFS connector, a file-backed local disk)."""
    vid = volume_id or str(uuid.uuid4())
    return {"driver_volume_type": "gpfs", "serial": vid, "multiattach": multiattach,
            "data": {"volume_id": vid, "device_path": path}}


def disk_xml(source: str | os.PathLike[str], alias: str, *, target: str = "sda",
             readonly: bool = False, shareable: bool = False, block: bool = False) -> str:
    """A raw SCSI ``<disk>`` written by hand, for tests of the guest helpers without the driver."""
    kind, attr = ("block", "dev") if block else ("file", "file")
    flags = ("<readonly/>" if readonly else "") + ("<shareable/>" if shareable else "")
    return (
        f"<disk type='{kind}' device='disk'>"
        "<driver name='qemu' type='raw' cache='none'/>"
        f"<source {attr}='{os.fspath(source)}'/>"
        f"<target dev='{target}' bus='scsi'/>{flags}"
        f"<alias name='{alias}'/></disk>"
    )


def repoint(link: Path, device: str) -> None:
    """Move ``link`` to ``device`` in one step, as udev replaces a by-path link."""
    new = link.with_name(link.name + ".new")
    new.symlink_to(device)
    os.replace(new, link)


def dos_table(device: str, at: int, start: int, sectors: int) -> None:
    """Write one DOS partition (type 83) of ``sectors`` from ``start``, in a table at ``at``."""
    with open(device, "r+b") as fh:
        fh.seek(at + 446)
        fh.write(struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", start, sectors))
        fh.seek(at + 510)
        fh.write(b"\x55\xaa")
