"""virtdriver's own notes in a domain's ``<metadata>``: inherited aliases, and overrides.

A live block copy (swap) keeps the guest device — and so its alias ``ua-<old volume>`` — while
the data now comes from the new volume. The note maps that alias to the new volume id, for the
disk with the new source only, so that a later attach of the old volume is never mistaken for it.

An attach made with ``--allow-shared-write`` (a second writer of a filesystem that is not a
cluster one) is noted under its alias with the filesystem, so that ``audit`` can say who chose it.
"""

from __future__ import annotations

import libvirt
from lxml import etree

NS = "https://virtdriver.dev/xmlns/attachments/1"
PREFIX = "virtdriver"
OVERRIDES_NS = "https://virtdriver.dev/xmlns/overrides/1"
OVERRIDES_PREFIX = "virtdriver-overrides"


def parse_notes(raw: str | None) -> dict[str, tuple[str, str]]:
    """``{alias: (volume id, source token)}`` from our metadata element."""
    if not raw:
        return {}
    root = etree.fromstring(raw)
    return {node.get("alias", ""): (node.get("volume", ""), node.get("source", ""))
            for node in root if etree.QName(node).localname == "inherited"}


def write_notes(dom: libvirt.virDomain, notes: dict[str, tuple[str, str]], flags: int) -> None:
    write_element(dom, "attachments", NS, PREFIX, flags, [
        ("inherited", {"alias": alias, "volume": volume, "source": source})
        for alias, (volume, source) in sorted(notes.items())])


def write_element(dom: libvirt.virDomain, tag: str, ns: str, prefix: str, flags: int,
                  children: list[tuple[str, dict[str, str]]]) -> None:
    """Set (or, without children, remove) our metadata element ``tag`` in namespace ``ns``."""
    # libvirt puts the element into our namespace itself; it must be given without one.
    root = etree.Element(tag)
    for child, attrs in children:
        etree.SubElement(root, child, attrs)
    xml = etree.tostring(root, encoding="unicode") if children else None
    dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, xml, prefix if children else None, ns,
                    flags)


def current_notes(dom: libvirt.virDomain, flags: int) -> dict[str, tuple[str, str]]:
    try:
        return parse_notes(dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NS, flags))
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN_METADATA:
            return {}
        raise


def set_note(dom: libvirt.virDomain, alias: str, volume: str | None, source: str,
             *, live: bool, persistent: bool) -> None:
    """Record (or with ``volume=None`` drop) the inherited alias, live and/or persistently."""
    for wanted, flag in ((live, libvirt.VIR_DOMAIN_AFFECT_LIVE),
                         (persistent, libvirt.VIR_DOMAIN_AFFECT_CONFIG)):
        if not wanted:
            continue
        notes = current_notes(dom, flag)
        if volume is None:
            if notes.pop(alias, None) is None:
                continue
        else:
            notes[alias] = (volume, source)
        write_notes(dom, notes, flag)


def parse_overrides(raw: str | None) -> dict[str, str]:
    """``{alias: filesystem}`` of the shared writes allowed by an override."""
    if not raw:
        return {}
    root = etree.fromstring(raw)
    return {node.get("alias", ""): node.get("filesystem", "") for node in root
            if etree.QName(node).localname == "shared-write"}


def note_shared_write(dom: libvirt.virDomain, alias: str, filesystem: str | None, *,
                      live: bool, persistent: bool) -> None:
    """Note that the disk ``alias`` writes ``filesystem`` beside others by an override (or,
    with ``None``, drop the note: the disk is gone)."""
    for wanted, flag in ((live, libvirt.VIR_DOMAIN_AFFECT_LIVE),
                         (persistent, libvirt.VIR_DOMAIN_AFFECT_CONFIG)):
        if not wanted:
            continue
        try:
            notes = parse_overrides(dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                                                 OVERRIDES_NS, flag))
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN_METADATA:
                raise
            notes = {}
        if filesystem is None:
            if notes.pop(alias, None) is None:
                continue
        else:
            notes[alias] = filesystem
        write_element(dom, "overrides", OVERRIDES_NS, OVERRIDES_PREFIX, flag, [
            ("shared-write", {"alias": a, "filesystem": f}) for a, f in sorted(notes.items())])
