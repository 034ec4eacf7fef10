"""The host's domains as libvirt reports them: the list, each domain's XML, its disks.

Running domains are read live and, when persistent, also from their definition, so an
attachment present in only one of the two still counts. The XML is read once and parsed only
when asked, through libvirt's API each time (never from its files). Which of these
disks use a volume or its data is decided in :mod:`~virtdriver.hypervisor.volume_users`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import libvirt

from virtdriver.config import Disk, DomainDisks
from virtdriver.hypervisor.dataid import DataIdentity, data_identity
from virtdriver.hypervisor.metadata import (
    NS,
    OVERRIDES_NS,
    Override,
    parse_notes,
    parse_overrides,
)
from virtdriver.hypervisor.volume_users import Wanted, XmlFacts
from virtdriver.policy.identity import names_guest, volume_of_alias
from virtdriver.policy.sharing import Use

LIST_ACTIVE = libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE
LIST_PERSISTENT = libvirt.VIR_CONNECT_LIST_DOMAINS_PERSISTENT


@dataclass(frozen=True)
class DiskUse:
    """One disk of one domain, as libvirt reports it: the one view every step and report uses."""

    domain_name: str
    domain_uuid: str
    active: bool
    live: bool  # read from the running guest (False: from the persistent definition)
    disk: Disk
    inherited_from: str | None = None  # the volume a swapped device now serves (metadata note)
    shared_write: str | None = None  # the filesystem an override let it write beside others

    @property
    def device_alias(self) -> str | None:
        """The alias libvirt knows the device by (events, detach)."""
        return self.disk.alias.name if self.disk.alias is not None else None

    @property
    def volume(self) -> str | None:
        """The volume id this disk serves: the swap note's, else the one its alias encodes."""
        if self.inherited_from is not None:
            return self.inherited_from
        return volume_of_alias(self.device_alias)

    @functools.cached_property
    def data(self) -> DataIdentity | None:
        """The canonical identity of the data behind the disk."""
        return data_identity(self.disk)

    @property
    def device(self) -> str:
        return (self.disk.target.dev or "") if self.disk.target is not None else ""

    def as_use(self) -> Use:
        """This disk as the sharing rules see it."""
        disk = self.disk
        driver = disk.driver
        return Use(guest=self.domain_name, guest_uuid=self.domain_uuid, volume=self.volume,
                   data=self.data, shareable=disk.shareable, readonly=disk.readonly,
                   cache=driver.cache if driver else None, format=driver.type if driver else None,
                   labels=labels_of(disk), device=self.device, live=self.live)


def labels_of(disk: Disk) -> tuple[str, ...]:
    """Per-disk seclabels as ``model:label`` or ``model:relabel=no``, sorted."""
    found = []
    for label in disk.source.seclabels if disk.source else []:
        what = label.label or f"relabel={label.relabel or 'yes'}"
        found.append(f"{label.model or 'default'}:{what}")
    return tuple(sorted(found))


names_instance = names_guest


@dataclass(frozen=True)
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
        current = self.dom.XMLDesc(0)  # a domain that does not run: its definition
        config = None
        if self.active and self.persistent:
            config = self.dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        return DomainXml(self, current, config)


@dataclass(frozen=True)
class DomainXml:
    """A domain's XML as read, parsed only when asked."""

    listed: ListedDomain
    current: str
    config: str | None

    def state(self, mentioning: str | None = None) -> DomainState:
        """The parsed disks; with ``mentioning`` (a volume id), an XML document that cannot
        hold a disk of that volume is not parsed and contributes no disks."""
        if mentioning is None:
            return self.parsed
        wanted = Wanted(mentioning, None)
        d = self.listed
        current = _read_xml(self.current, wanted)
        disks = _uses(d.name, d.uuid, d.active, d.active, current)
        if self.config is not None:
            disks += _uses(d.name, d.uuid, True, False, _read_xml(self.config, wanted), current)
        return DomainState(d.dom, d.name, d.uuid, d.active, d.persistent, disks,
                           current.controllers, current.other_drive_units)

    @functools.cached_property
    def parsed(self) -> DomainState:
        """Every disk, live and defined (parsed once, on first use)."""
        d = self.listed
        current = DomainDisks.from_xml(self.current)
        disks = _uses(d.name, d.uuid, d.active, d.active, current)
        if self.config is not None:
            disks += _uses(d.name, d.uuid, True, False, DomainDisks.from_xml(self.config),
                           current)
        return DomainState(d.dom, d.name, d.uuid, d.active, d.persistent, disks,
                           current.controllers, current.other_drive_units)

    @functools.cached_property
    def placement(self) -> DomainDisks:
        """Where the domain's disks sit, live and defined (their targets, addresses and
        aliases only), and its controllers: what choosing a free device needs."""
        if "parsed" in self.__dict__:  # parsed whole already
            state = self.parsed
            return DomainDisks(state.name, state.uuid, [u.disk for u in state.disks],
                               state.controllers, other_drive_units=state.other_drive_units)
        current = _placement_of(self.current)
        disks = list(current.disks)
        if self.config is not None:
            disks += _placement_of(self.config).disks
        return replace(current, disks=disks,
                                   controllers=list(current.controllers),
                                   other_drive_units=set(current.other_drive_units))

    def may_use(self, wanted: Wanted) -> bool:
        """False only when neither the live XML nor the definition can hold a disk that is the
        wanted volume or its data (see :class:`Wanted`); then it need not be parsed."""
        return wanted.may_be_in(self.facts)

    @functools.cached_property
    def facts(self) -> XmlFacts:
        """What the look for a volume's users reads in the live XML and, for a running
        persistent domain, the definition."""
        return XmlFacts((self.current,) if self.config is None else (self.current, self.config))


@dataclass(frozen=True)
class DomainState:
    """A domain's disks (live and persistent) and controllers, read once."""

    dom: libvirt.virDomain
    name: str
    uuid: str
    active: bool
    persistent: bool
    disks: list[DiskUse]
    controllers: list[tuple[str, str | None]]
    other_drive_units: set[int] = field(default_factory=set)  # SCSI hostdevs etc.

    def uses(self) -> list[Use]:
        return [u.as_use() for u in self.disks]

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


@functools.lru_cache(maxsize=256)
def _placement_of(xml: str) -> DomainDisks:
    """Where the disks of one XML text sit, read once per text.

    A guest's XML comes back to a text read before (a detach leaves it as before the attach),
    and this parse is the largest part of an attach's own work. Callers get copies of the lists
    (:attr:`DomainXml.placement`); the placement-only disks are read, never changed.
    """
    return DomainDisks.from_xml(xml, placement_only=True)


def _read_xml(xml: str, wanted: Wanted | str | None) -> DomainDisks:
    if isinstance(wanted, str):
        wanted = Wanted(wanted, None)
    if wanted is not None and not wanted.may_be_in(XmlFacts((xml,))):
        return DomainDisks(name="", uuid="", disks=[], controllers=[])
    return DomainDisks.from_xml(xml)


def _uses(name: str, uuid: str, active: bool, live: bool, domain: DomainDisks,
          running: DomainDisks | None = None) -> list[DiskUse]:
    """The disks of ``domain``; ``running``: the live XML of a running domain whose definition
    ``domain`` is (an override note there counts only if the live disk's own note does)."""
    notes = parse_notes(domain.metadata.get(NS))
    overrides = parse_overrides(domain.metadata.get(OVERRIDES_NS))
    stale = _stale_overrides(running) if running is not None and overrides else set()
    uses = []
    for disk in domain.disks:
        own = disk.alias.name if disk.alias is not None else None
        inherited = _inherited(notes, own, disk)
        override = None if own in stale else _override(overrides, own, disk, inherited)
        uses.append(DiskUse(name, uuid, active, live, disk, inherited, override))
    return uses


def _inherited(notes: dict[str, tuple[str, str]], alias: str | None, disk: Disk) -> str | None:
    note = notes.get(alias or "")
    return note[0] if note is not None and note[1] == source_token(disk) else None


def _override(overrides: dict[str, Override], alias: str | None, disk: Disk,
              inherited: str | None) -> str | None:
    """The filesystem an override let this disk write, if the note is this attachment's."""
    note = overrides.get(alias or "")
    if note is None or disk.readonly:
        return None
    index = disk.source.index if disk.source is not None else None
    volume = inherited or volume_of_alias(alias)
    return note.filesystem if note.belongs_to(volume, source_token(disk), index) else None


def _stale_overrides(running: DomainDisks) -> set[str]:
    """Aliases of the running guest's disks that its override notes do not hold."""
    notes = parse_notes(running.metadata.get(NS))
    overrides = parse_overrides(running.metadata.get(OVERRIDES_NS))
    return {own for disk in running.disks
            if (own := disk.alias.name if disk.alias is not None else None) is not None
            and _override(overrides, own, disk, _inherited(notes, own, disk)) is None}


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
    """Every domain on the host, running or defined, with both flags (two list calls)."""
    domains = {d.UUIDString(): d for d in conn.listAllDomains(LIST_ACTIVE)}
    active = set(domains)
    defined = set()
    for dom in conn.listAllDomains(LIST_PERSISTENT):
        defined.add(dom.UUIDString())
        domains.setdefault(dom.UUIDString(), dom)
    return [ListedDomain(dom, dom.name(), uuid, uuid in active, uuid in defined)
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


def host_view(conn: libvirt.virConnect) -> DomainsView:
    """Every domain on the host, read (two list calls, then each domain's XML)."""
    return DomainsView(read_domains(list_domains(conn)))


def host_state(conn: libvirt.virConnect, mentioning: str | None = None) -> list[DomainState]:
    """Every domain on the host, parsed (see :meth:`DomainXml.state` for ``mentioning``)."""
    return [domain.state(mentioning) for domain in read_domains(list_domains(conn))]


def host_disks(conn: libvirt.virConnect) -> list[DiskUse]:
    """Every disk of every domain on the host."""
    return [use for state in host_state(conn) for use in state.disks]


def domain_disks(dom: libvirt.virDomain) -> list[DiskUse]:
    """Every disk of one domain (live and persistent)."""
    return DomainState.read(dom).disks


@dataclass(frozen=True)
class DomainsView:
    """Every domain of the host as read once (its XML, live and defined), each parsed only when
    it is asked about and could matter."""

    domains: list[DomainXml]
    # Users libvirt does not list (yet): guests expected here by live migration.
    arriving: list[Use] = field(default_factory=list)
    # The host-connection records' file names, as listed to find those arrivals (None: not
    # listed). Under a volume's lock they say whether that volume has a record.
    records: frozenset[str] | None = None
    # Path identities found while looking, and the answers given: one read of the host is asked
    # about the same volume and data more than once (before the connect, then per guest).
    _paths: dict[str, DataIdentity] = field(default_factory=dict, repr=False,
                                                        compare=False)
    _answers: dict[tuple[str | None, DataIdentity | None], list[Use]] = field(
        default_factory=dict, repr=False, compare=False)

    def states(self) -> list[DomainState]:
        """Every domain, parsed."""
        return [d.parsed for d in self.domains]

    def present(self) -> list[tuple[str, str]]:
        """(name, UUID) of every domain."""
        return [(d.listed.name, d.listed.uuid) for d in self.domains]

    def uses(self, volume: str | None, data: DataIdentity | None) -> list[Use]:
        """Every disk on the host that is ``volume`` or holds ``data``, live or defined. Only
        the domains whose XML text can hold one (:class:`Wanted`) are parsed."""
        answer = self._answers.get((volume, data))
        if answer is None:
            wanted = Wanted(volume, data, self._paths)
            answer = self._answers[(volume, data)] = wanted.uses(
                [u for d in self.domains if d.may_use(wanted) for u in d.parsed.uses()]
                + self.arriving)
        return list(answer)
