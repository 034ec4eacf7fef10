"""Per-disk security labels for a security driver this host's libvirt does not run.

libvirt accepts a disk's ``<seclabel model='selinux'>`` at hot-plug whatever its security drivers
are, but refuses to *start* a guest whose definition names a model it does not run ("Security
driver model 'selinux' is not available"). Such a label comes from an older virtdriver (which
wrote ``selinux`` and ``dac`` labels on every host), from an edit by hand, or with a guest that
migrated from a host with other drivers. :func:`foreign_labels` finds them in the persistent
definitions; :func:`repair_definition` removes them from one guest's definition (``defineXML``),
which leaves the running guest as it is: the next start uses the repaired definition.
"""

from __future__ import annotations

from dataclasses import dataclass

import libvirt
from lxml import etree

from virtdriver.config.reader import parse_xml
from virtdriver.errors import HypervisorError
from virtdriver.hypervisor.connection import libvirt_message

_XPATH = "./devices/disk/source/seclabel[@model] | ./devices/disk/source/*/seclabel[@model]"


@dataclass(frozen=True)
class ForeignLabel:
    """One disk of one guest's definition with a label for a model libvirt does not run."""

    guest: str
    guest_uuid: str
    device: str
    model: str

    def message(self, models: tuple[str, ...]) -> str:
        drivers = ", ".join(models) or "none"
        return (f"guest {self.guest}'s definition gives disk {self.device} a <seclabel "
                f"model='{self.model}'>, a security driver this host's libvirt does not run "
                f"(its drivers: {drivers}): the guest's next start fails (\"Security driver model "
                f"'{self.model}' is not available\"); 'virtdriver repair-labels {self.guest}' "
                "removes it from the definition without touching the running guest")


def _foreign(root: etree._Element, models: tuple[str, ...]) -> list[tuple[etree._Element, str]]:
    found = []
    for label in root.xpath(_XPATH):
        model = label.get("model")
        if model not in models:
            disk = label.getparent()
            while disk is not None and disk.tag != "disk":
                disk = disk.getparent()
            target = disk.find("target") if disk is not None else None
            found.append((label, target.get("dev", "?") if target is not None else "?"))
    return found


def _definition(dom: libvirt.virDomain) -> str:
    return dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE | libvirt.VIR_DOMAIN_XML_SECURE)


def foreign_labels(conn: libvirt.virConnect, models: tuple[str, ...]) -> list[ForeignLabel]:
    """Every per-disk label in a persistent definition on this host whose model is not one of
    ``models`` (the host libvirt's security drivers)."""
    found = []
    try:
        domains = conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_PERSISTENT)
        for dom in domains:
            root = parse_xml(_definition(dom))
            found += [ForeignLabel(dom.name(), dom.UUIDString(), dev, label.get("model"))
                      for label, dev in _foreign(root, models)]
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return foreign_labels(conn, models)  # a guest went away meanwhile: read again
        raise HypervisorError("cannot read the guests' definitions",
                              libvirt_message(exc)) from None
    return found


def repair_definition(conn: libvirt.virConnect, dom: libvirt.virDomain,
                      models: tuple[str, ...]) -> list[ForeignLabel]:
    """Remove the labels of models libvirt does not run from ``dom``'s persistent definition;
    the running guest is left alone. Returns what was removed."""
    try:
        root = parse_xml(_definition(dom))
        foreign = _foreign(root, models)
        if not foreign:
            return []
        for label, _ in foreign:
            label.getparent().remove(label)
        conn.defineXML(etree.tostring(root, encoding="unicode"))
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"cannot repair the definition of guest {dom.name()}",
                              libvirt_message(exc)) from None
    return [ForeignLabel(dom.name(), dom.UUIDString(), dev, label.get("model"))
            for label, dev in foreign]
