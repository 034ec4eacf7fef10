"""A lenient reader for live domain XML: its identity and its disks, nothing lost."""

from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from virtdriver.config.disk import Address, Alias, Disk, Target
from virtdriver.config.model import parse_xml


@dataclass
class DomainDisks:
    """What the volume driver needs to know of a domain: its name, UUID and disks.

    Disks are read leniently: parts the model does not declare are kept in ``Disk.unknown`` and
    written back by ``to_xml()``.
    """

    name: str
    uuid: str
    disks: list[Disk]
    controllers: list[tuple[str, str | None]]  # (type, model) of each controller
    metadata: dict[str, str] = field(default_factory=dict)  # namespace -> XML
    # Units taken on SCSI controller 0 (bus 0, target 0) by devices other than disks (hostdevs).
    other_drive_units: set[int] = field(default_factory=set)

    @classmethod
    def from_xml(cls, text: str | bytes, *, placement_only: bool = False) -> DomainDisks:
        """The domain's disks; with ``placement_only``, each disk holds only where it sits
        (``<target>``, ``<address>``, ``<alias>``): what choosing a free device needs, read at a
        third of the cost."""
        root = parse_xml(text)
        devices = root.find("devices")
        disks: list[Disk] = []
        controllers: list[tuple[str, str | None]] = []
        if devices is not None:
            read = _placement if placement_only else _whole
            disks = [read(node) for node in devices.iterfind("disk")]
            controllers = [(c.get("type", ""), c.get("model"))
                           for c in devices.iterfind("controller")]
            other_units = {int(unit) for node in devices if node.tag != "disk"
                           for addr in node.iterfind("address")
                           if addr.get("type") == "drive"
                           and addr.get("controller", "0") == "0"
                           and addr.get("bus", "0") == "0" and addr.get("target", "0") == "0"
                           and (unit := addr.get("unit", "0")).isdigit()}
        else:
            other_units = set()
        metadata: dict[str, str] = {}
        meta = root.find("metadata")
        if meta is not None:
            for node in meta:
                if isinstance(node.tag, str) and node.tag.startswith("{"):
                    metadata[node.tag[1:].partition("}")[0]] = etree.tostring(node,
                                                                               encoding="unicode")
        return cls(name=root.findtext("name", ""), uuid=root.findtext("uuid", ""),
                   disks=disks, controllers=controllers, metadata=metadata,
                   other_drive_units=other_units)


def _whole(node: etree._Element) -> Disk:
    return Disk.from_element(node, strict=False)


def _placement(node: etree._Element) -> Disk:
    target, address, alias = node.find("target"), node.find("address"), node.find("alias")
    return Disk(
        type=node.get("type"), device=node.get("device"),
        target=Target(dev=target.get("dev"), bus=target.get("bus"))
        if target is not None else None,
        address=Address(**{k: address.get(k) for k in _ADDRESS_KEYS})
        if address is not None else None,
        alias=Alias(name=alias.get("name")) if alias is not None else None)


_ADDRESS_KEYS = ("type", "controller", "bus", "target", "unit")
