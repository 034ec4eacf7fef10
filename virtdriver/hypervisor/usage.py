"""Who uses a volume on this host, read from libvirt's live state (no database).

A volume attached by virtdriver carries the user alias ``ua-<volume id>``; a disk is also
matched by its source (the same device, file or network volume under another name is the same
data). Running domains are read live and, when persistent, also from their definition, so an
attachment present in only one of the two still counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

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


def names_instance(name: str, uuid: str, instance: str) -> bool:
    """True when ``instance`` is the domain's name or UUID (with or without dashes)."""
    return instance in (name, uuid) or instance.lower().replace("-", "") == uuid.replace("-", "")


@dataclasses.dataclass(frozen=True)
class ListedDomain:
    """A domain as listed by libvirt: handle, name and flags, its XML not read yet."""

    dom: libvirt.virDomain
    name: str
    uuid: str
    active: bool
    persistent: bool

    def is_instance(self, instance: str) -> bool:
        return names_instance(self.name, self.uuid, instance)

    def read(self) -> DomainXml:
        """Read the XML (live, and the definition of a running persistent domain)."""
        current = self.dom.XMLDesc(0)  # the definition when not running
        config = None
        if self.active and self.persistent:
            config = self.dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        return DomainXml(self, current, config)


@dataclasses.dataclass(frozen=True)
class DomainXml:
    """A domain's XML as read, parsed only when asked."""

    listed: ListedDomain
    current: str
    config: str | None

    def state(self, mentioning: str | None = None) -> DomainState:
        """The parsed disks; with ``mentioning``, an XML document that does not contain that
        text at all (a volume id, a device path) is not parsed and contributes no disks."""
        d = self.listed
        current = _read_xml(self.current, mentioning)
        disks = _uses(d.name, d.uuid, d.active, d.active, current)
        if self.config is not None:
            disks += _uses(d.name, d.uuid, True, False, _read_xml(self.config, mentioning))
        return DomainState(d.dom, d.name, d.uuid, d.active, d.persistent, disks,
                           current.controllers)


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
        return names_instance(self.name, self.uuid, instance)

    @classmethod
    def read(cls, dom: libvirt.virDomain, active: bool | None = None,
             persistent: bool | None = None, mentioning: str | None = None) -> DomainState:
        """Read ``dom``; a disk in both the live guest and its definition appears twice
        (see :meth:`DomainXml.state` for ``mentioning``)."""
        active = bool(dom.isActive()) if active is None else active
        persistent = bool(dom.isPersistent()) if persistent is None else persistent
        listed = ListedDomain(dom, dom.name(), dom.UUIDString(), active, persistent)
        return listed.read().state(mentioning)


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


def list_domains(conn: libvirt.virConnect) -> list[ListedDomain]:
    """Every domain on the host, running or defined, with both flags.

    A domain is running, defined, or both, so two list calls give every domain and both flags.
    """
    domains = {d.UUIDString(): d for d in conn.listAllDomains(LIST_ACTIVE)}
    active = set(domains)
    persistent = set()
    for dom in conn.listAllDomains(LIST_PERSISTENT):
        persistent.add(dom.UUIDString())
        domains.setdefault(dom.UUIDString(), dom)
    return [ListedDomain(dom, dom.name(), uuid, uuid in active, uuid in persistent)
            for uuid, dom in domains.items()]


def read_domains(listed: Iterable[ListedDomain]) -> list[DomainXml]:
    """The XML of each listed domain; a domain that vanished meanwhile is left out."""
    read: list[DomainXml] = []
    for domain in listed:
        try:
            read.append(domain.read())
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                raise
    return read


def host_state(conn: libvirt.virConnect, mentioning: str | None = None) -> list[DomainState]:
    """Every domain on the host, parsed (see :meth:`DomainXml.state` for ``mentioning``)."""
    return [domain.state(mentioning) for domain in read_domains(list_domains(conn))]


def host_disks(conn: libvirt.virConnect) -> list[DiskUse]:
    """Every disk of every domain on the host."""
    return [use for state in host_state(conn) for use in state.disks]


def domain_disks(dom: libvirt.virDomain) -> list[DiskUse]:
    """Every disk of one domain (live and persistent)."""
    return DomainState.read(dom).disks


XML_SPECIAL = frozenset("<>&'\"")


def source_text(disk: Disk) -> str | None:
    """Text that the XML of any disk with the same :func:`source_key` must contain (the device,
    file or network volume name), or None when no such text can be relied on."""
    key = source_key(disk)
    if key is None:
        return None
    text = key[1] if key[0] in ("dev", "file") else key[2]
    if not isinstance(text, str) or not text or XML_SPECIAL & set(text):
        return None  # escaped in the XML, or nothing to look for: parse everything
    return text


@dataclasses.dataclass(frozen=True)
class AttachTarget:
    """A guest an attach goes to: its XML as read, and its attach generation read before."""

    domain: DomainXml
    generation: int

    @property
    def dom(self) -> libvirt.virDomain:
        return self.domain.listed.dom

    @property
    def name(self) -> str:
        return self.domain.listed.name

    @property
    def uuid(self) -> str:
        return self.domain.listed.uuid


@dataclasses.dataclass(frozen=True)
class HostScan:
    """What an attach read of the host under the volume lock."""

    domains: list[DomainXml]
    targets: list[AttachTarget]
    users: list[DiskUse]  # the disks that already are the volume

    def same_data_elsewhere(self, disk: Disk, guest: DomainState, alias: str,
                            multiattach: bool) -> list[str]:
        """Guests (``guest`` included, as read now) that use ``disk``'s data under another
        name, or unshared where sharing is asked for."""
        key = source_key(disk)
        if key is None:
            return []
        text = source_text(disk)
        states = [guest] + [d.state(mentioning=text) for d in self.domains
                            if d.listed.uuid != guest.uuid]
        return sorted({u.domain_name for state in states for u in state.disks
                       if u.alias != alias and source_key(u.disk) == key
                       and (not multiattach or not u.disk.shareable)})
