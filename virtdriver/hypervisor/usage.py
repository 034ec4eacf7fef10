"""Who uses a volume on this host, read from libvirt's live state (no database).

A volume attached by virtdriver carries the user alias ``ua-<volume id>``; a disk is also
matched by its source (the same device, file or network volume under another name is the same
data). Running domains are read live and, when persistent, also from their definition, so an
attachment present in only one of the two still counts.
"""

from __future__ import annotations

import dataclasses

import libvirt

from virtdriver.config import Disk, DomainDisks


@dataclasses.dataclass(frozen=True)
class DiskUse:
    """One disk of one domain, as libvirt reports it."""

    domain_name: str
    domain_uuid: str
    active: bool
    live: bool  # read from the running guest (False: from the persistent definition)
    disk: Disk

    @property
    def alias(self) -> str | None:
        return self.disk.alias.name if self.disk.alias is not None else None


def source_key(disk: Disk) -> tuple[str | int | None, ...] | None:
    """What identifies the data behind a disk: a device, a file or a network volume."""
    src = disk.source
    if src is None:
        return None
    if src.dev:
        return ("dev", src.dev)
    if src.file:
        return ("file", src.file)
    if src.protocol:
        return ("net", src.protocol, src.name,
                *(f"{h.name}:{h.port}:{h.socket}" for h in src.hosts))
    return None


def domain_disks(dom: libvirt.virDomain) -> list[DiskUse]:
    """Every disk of ``dom``: from the running guest, and from its persistent definition.

    A disk present in both appears twice (``live`` True and False): detaching must remove both.
    """
    name, uuid = dom.name(), dom.UUIDString()
    active = bool(dom.isActive())
    uses: list[DiskUse] = []
    if active:
        uses += [DiskUse(name, uuid, True, True, d)
                 for d in DomainDisks.from_xml(dom.XMLDesc(0)).disks]
    if not active or dom.isPersistent():
        uses += [DiskUse(name, uuid, active, False, d) for d in
                 DomainDisks.from_xml(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)).disks]
    return uses


def host_disks(conn: libvirt.virConnect) -> list[DiskUse]:
    """Every disk of every domain on the host, running or defined."""
    uses: list[DiskUse] = []
    for dom in conn.listAllDomains(0):
        try:
            uses += domain_disks(dom)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:  # vanished meanwhile
                raise
    return uses


def volume_users(conn: libvirt.virConnect, alias: str,
                 key: tuple[str | int | None, ...] | None = None) -> list[DiskUse]:
    """The disks on this host that are the volume (by alias, or by source when given)."""
    return [u for u in host_disks(conn)
            if u.alias == alias or (key is not None and source_key(u.disk) == key)]
