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
from virtdriver.hypervisor.metadata import NS, parse_notes

LIST_ACTIVE = libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE
LIST_PERSISTENT = libvirt.VIR_CONNECT_LIST_DOMAINS_PERSISTENT


@dataclasses.dataclass(frozen=True)
class DiskUse:
    """One disk of one domain, as libvirt reports it."""

    domain_name: str
    domain_uuid: str
    active: bool
    live: bool  # read from the running guest (False: from the persistent definition)
    disk: Disk
    inherited_from: str | None = None  # the device's own alias when it now serves another volume

    @property
    def alias(self) -> str | None:
        """``ua-<volume id>`` of the volume this disk serves (see metadata.py for swaps)."""
        if self.inherited_from is not None:
            return self.inherited_from
        return self.disk.alias.name if self.disk.alias is not None else None

    @property
    def device_alias(self) -> str | None:
        """The alias libvirt knows the device by (events, detach)."""
        return self.disk.alias.name if self.disk.alias is not None else None


@dataclasses.dataclass(frozen=True)
class DomainState:
    """A domain's disks (live and persistent) and controllers, read once."""

    dom: libvirt.virDomain
    name: str
    uuid: str
    active: bool
    persistent: bool
    disks: list[DiskUse]
    controllers: list[tuple[str, str | None]]

    def is_instance(self, instance: str) -> bool:
        """True when ``instance`` is this domain's name or UUID."""
        return instance in (self.name, self.uuid) or instance.lower().replace("-", "") == \
            self.uuid.replace("-", "")

    @classmethod
    def read(cls, dom: libvirt.virDomain, active: bool | None = None,
             persistent: bool | None = None, mentioning: str | None = None) -> DomainState:
        """Read ``dom``; a disk in both the live guest and its definition appears twice.

        With ``mentioning``, an XML document that does not contain that text at all (a volume
        id: in an alias or in a swap note) is not parsed, and contributes no disks.
        """
        name, uuid = dom.name(), dom.UUIDString()
        active = bool(dom.isActive()) if active is None else active
        persistent = bool(dom.isPersistent()) if persistent is None else persistent
        current = _read_xml(dom.XMLDesc(0), mentioning)  # the definition when not running
        disks = _uses(name, uuid, active, active, current)
        if active and persistent:
            config = _read_xml(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), mentioning)
            disks += _uses(name, uuid, True, False, config)
        return cls(dom, name, uuid, active, persistent, disks, current.controllers)


def _read_xml(xml: str, mentioning: str | None) -> DomainDisks:
    if mentioning is not None and mentioning not in xml:
        return DomainDisks(name="", uuid="", disks=[], controllers=[])
    return DomainDisks.from_xml(xml)


def _uses(name: str, uuid: str, active: bool, live: bool, domain: DomainDisks) -> list[DiskUse]:
    notes = parse_notes(domain.metadata.get(NS))
    uses = []
    for disk in domain.disks:
        own = disk.alias.name if disk.alias is not None else None
        note = notes.get(own or "")
        inherited = None
        if note is not None and note[1] == source_token(disk):
            inherited = "ua-" + note[0]
        uses.append(DiskUse(name, uuid, active, live, disk, inherited))
    return uses


def source_token(disk: Disk) -> str:
    """:func:`source_key` as one string."""
    return "|".join(str(part) for part in source_key(disk) or ())


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


def host_state(conn: libvirt.virConnect, mentioning: str | None = None) -> list[DomainState]:
    """Every domain on the host, running or defined (see :meth:`DomainState.read` for
    ``mentioning``).

    A domain is running, defined, or both, so two list calls give every domain and both flags.
    """
    domains = {d.UUIDString(): d for d in conn.listAllDomains(LIST_ACTIVE)}
    active = set(domains)
    persistent = set()
    for dom in conn.listAllDomains(LIST_PERSISTENT):
        persistent.add(dom.UUIDString())
        domains.setdefault(dom.UUIDString(), dom)
    states: list[DomainState] = []
    for uuid, dom in domains.items():
        try:
            states.append(DomainState.read(dom, uuid in active, uuid in persistent, mentioning))
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:  # vanished meanwhile
                raise
    return states


def host_disks(conn: libvirt.virConnect) -> list[DiskUse]:
    """Every disk of every domain on the host."""
    return [use for state in host_state(conn) for use in state.disks]


def domain_disks(dom: libvirt.virDomain) -> list[DiskUse]:
    """Every disk of one domain (live and persistent)."""
    return DomainState.read(dom).disks
