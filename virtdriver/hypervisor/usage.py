"""Who uses a volume on this host, read from libvirt's live state (no database).

A volume attached by virtdriver carries the user alias ``ua-<volume id>``; a disk is also
matched by its source (the same device, file or network volume under another name is the same
data). Running domains are read live and, when persistent, also from their definition, so an
attachment present in only one of the two still counts.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable

import libvirt

from virtdriver.config import Disk, DomainDisks
from virtdriver.hypervisor.dataid import DataIdentity, data_identity, path_identity
from virtdriver.hypervisor.metadata import NS, parse_notes
from virtdriver.policy.identity import ALIAS_PREFIX, encode_volume_id, names_guest
from virtdriver.policy.identity import volume_of_alias
from virtdriver.policy.sharing import Use, users_of

LIST_ACTIVE = libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE
LIST_PERSISTENT = libvirt.VIR_CONNECT_LIST_DOMAINS_PERSISTENT


@dataclasses.dataclass(frozen=True)
class DiskUse:
    """One disk of one domain, as libvirt reports it: the one view every step and report uses."""

    domain_name: str
    domain_uuid: str
    active: bool
    live: bool  # read from the running guest (False: from the persistent definition)
    disk: Disk
    inherited_from: str | None = None  # the volume a swapped device now serves (metadata note)

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
        """The parsed disks; with ``mentioning`` (a volume id), an XML document that cannot
        hold a disk of that volume is not parsed and contributes no disks."""
        if mentioning is None:
            return self.parsed
        wanted = Wanted(mentioning, None)
        d = self.listed
        current = _read_xml(self.current, wanted)
        disks = _uses(d.name, d.uuid, d.active, d.active, current)
        if self.config is not None:
            disks += _uses(d.name, d.uuid, True, False, _read_xml(self.config, wanted))
        return DomainState(d.dom, d.name, d.uuid, d.active, d.persistent, disks,
                           current.controllers, current.other_drive_units)

    @functools.cached_property
    def parsed(self) -> DomainState:
        """Every disk, live and defined (parsed once, on first use)."""
        d = self.listed
        current = DomainDisks.from_xml(self.current)
        disks = _uses(d.name, d.uuid, d.active, d.active, current)
        if self.config is not None:
            disks += _uses(d.name, d.uuid, True, False, DomainDisks.from_xml(self.config))
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
        current = DomainDisks.from_xml(self.current, placement_only=True)
        if self.config is not None:
            current.disks += DomainDisks.from_xml(self.config, placement_only=True).disks
        return current

    def may_use(self, wanted: Wanted) -> bool:
        """False only when neither the live XML nor the definition can hold a disk that is the
        wanted volume or its data (see :class:`Wanted`); then it need not be parsed."""
        return wanted.may_be_in(self.current) or (self.config is not None
                                                  and wanted.may_be_in(self.config))


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
    other_drive_units: set[int] = dataclasses.field(default_factory=set)  # SCSI hostdevs etc.

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


def _read_xml(xml: str, wanted: Wanted | str | None) -> DomainDisks:
    if isinstance(wanted, str):
        wanted = Wanted(wanted, None)
    if wanted is not None and not wanted.may_be_in(xml):
        return DomainDisks(name="", uuid="", disks=[], controllers=[])
    return DomainDisks.from_xml(xml)


# ---- which domains can hold a volume or its data: a look at the XML text before parsing ------

# Text that libvirt (and libxml2, for <metadata>) writes as it is in XML: never escaped as an
# entity or a character reference, so finding it as a substring is finding it.
VERBATIM_TEXT = re.compile(r"[A-Za-z0-9._:/@+,=~-]+")
_SOURCE = re.compile(r"<source\b([^>]*)>")
_PATH = re.compile(r"""\b(?:file|dev)\s*=\s*(?:'([^']*)'|"([^"]*)")""")
_ENTITY = re.compile(r"&(#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|apos|quot);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "apos": "'", "quot": '"'}


def _unescape(text: str) -> str:
    if "&" not in text:
        return text

    def one(match: re.Match[str]) -> str:
        ref = match.group(1)
        if ref[0] != "#":
            return _NAMED[ref]
        return chr(int(ref[2:], 16) if ref[1] in "xX" else int(ref[1:]))

    return _ENTITY.sub(one, text)


@functools.lru_cache(maxsize=2048)  # the same texts come back while libvirt changes nothing
def source_paths(xml: str) -> tuple[str, ...]:
    """The ``file``/``dev`` paths of every ``<source>`` element in a domain's XML text."""
    return tuple(_unescape(quoted[0] or quoted[1])
                 for attrs in _SOURCE.findall(xml) for quoted in _PATH.findall(attrs))


class Wanted:
    """A volume id and its data's identity, and a cheap, conservative look at a domain's XML
    text that says whether any disk in it can be that volume or that data.

    It answers ``False`` only when no disk can be: a disk *is* the volume when its alias
    encodes the id (``ua-<encoded id>``, written verbatim) or a swap note in virtdriver's
    ``<metadata>`` names it (``volume="<id>"``, if the id is verbatim text; else any note of
    virtdriver's counts); a disk
    *holds the data* when the identity of a ``<source file|dev>`` path (device number, inode,
    resolved path: :mod:`~virtdriver.hypervisor.dataid`, the very function the parsed disk
    uses) is the data's, or, for a network volume, when its name appears (any network source,
    if the name is not verbatim text). Every domain the driver must know about passes; most
    others are never parsed. Path identities are remembered in ``paths`` (one read of the
    host).
    """

    def __init__(self, volume: str | None, data: DataIdentity | None,
                 paths: dict[str, DataIdentity] | None = None) -> None:
        self.volume = volume
        self.data = data
        self._paths: dict[str, DataIdentity] = {} if paths is None else paths
        self._needles: list[str] = []
        self._notes: tuple[str, ...] | None = None  # a swap note naming the volume
        if volume is not None:
            self._needles.append(ALIAS_PREFIX + encode_volume_id(volume))
            self._notes = ((f'volume="{volume}"', f"volume='{volume}'")
                           if VERBATIM_TEXT.fullmatch(volume) else ())
        self._by_path = data is not None and data[0] in ("dev", "inode", "path")
        if data is not None and data[0] == "net":
            name = data[2] if len(data) > 2 else ""
            self._needles.append(name if name and VERBATIM_TEXT.fullmatch(name) else "protocol=")
        elif data is not None and not self._by_path and data[0] != "key":
            self._needles.append("<source")  # an identity of a kind not known here: parse

    def may_be_in(self, xml: str) -> bool:
        if any(needle in xml for needle in self._needles):
            return True
        if self._notes is not None and NS in xml and (
                not self._notes or any(note in xml for note in self._notes)):
            return True
        if not self._by_path:
            return False
        for path in source_paths(xml):
            found = self._paths.get(path)
            if found is None:
                found = self._paths[path] = path_identity(path)
            if found == self.data:
                return True
        return False

    def uses(self, uses: Iterable[Use]) -> list[Use]:
        """Of ``uses``, those that are the volume or hold its data."""
        if self.volume is None:
            return [u for u in uses if self.data is not None and u.data == self.data]
        return users_of(self.volume, self.data, uses)


@dataclasses.dataclass(frozen=True)
class HostView:
    """Every domain of the host as read once (its XML, live and defined), each parsed only when
    it is asked about and could matter."""

    domains: list[DomainXml]
    # Users libvirt does not list (yet): guests expected here by live migration.
    arriving: list[Use] = dataclasses.field(default_factory=list)
    # Path identities found while looking, and the answers given: one read of the host is asked
    # about the same volume and data more than once (before the connect, then per guest).
    _paths: dict[str, DataIdentity] = dataclasses.field(default_factory=dict, repr=False,
                                                        compare=False)
    _answers: dict[tuple[str | None, DataIdentity | None], list[Use]] = dataclasses.field(
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


def _uses(name: str, uuid: str, active: bool, live: bool, domain: DomainDisks) -> list[DiskUse]:
    notes = parse_notes(domain.metadata.get(NS))
    uses = []
    for disk in domain.disks:
        own = disk.alias.name if disk.alias is not None else None
        note = notes.get(own or "")
        inherited = None
        if note is not None and note[1] == source_token(disk):
            inherited = note[0]
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


def host_view(conn: libvirt.virConnect) -> HostView:
    """Every domain on the host, read (two list calls, then each domain's XML)."""
    return HostView(read_domains(list_domains(conn)))


def host_state(conn: libvirt.virConnect, mentioning: str | None = None) -> list[DomainState]:
    """Every domain on the host, parsed (see :meth:`DomainXml.state` for ``mentioning``)."""
    return [domain.state(mentioning) for domain in read_domains(list_domains(conn))]


def host_disks(conn: libvirt.virConnect) -> list[DiskUse]:
    """Every disk of every domain on the host."""
    return [use for state in host_state(conn) for use in state.disks]


def domain_disks(dom: libvirt.virDomain) -> list[DiskUse]:
    """Every disk of one domain (live and persistent)."""
    return DomainState.read(dom).disks
