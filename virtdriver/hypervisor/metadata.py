"""virtdriver's own notes in a domain's ``<metadata>``: inherited aliases, and overrides.

A live block copy (swap) keeps the guest device — and so its alias ``ua-<old volume>`` — while
the data now comes from the new volume. The note maps that alias to the new volume id, for the
disk with the new source only, so that a later attach of the old volume is never mistaken for it.

An attach made with ``--allow-shared-write`` (a second writer of a filesystem that is not a
cluster one) is noted under its alias with the filesystem, so that ``audit`` can say who chose it.
The note belongs to that one attachment: it also names the volume, the disk's source and, in the
running guest, the ``index`` libvirt gave that source (a new one each time a disk is plugged), so
a disk detached behind virtdriver's back and attached again is not taken for the one noted.
A guest arriving by live migration takes its note along, written for the disk it arrives with
(:func:`set_overrides_in`) and keyed to that disk's index once it runs there.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Override:
    """One noted override: what it let the disk write, and the attachment it belongs to."""

    filesystem: str
    volume: str = ""  # the volume id ("" in a note from before volumes were noted)
    source: str = ""  # the disk's source token (see domains.source_token)
    index: int | None = None  # libvirt's index of that source in the running guest

    def belongs_to(self, volume: str | None, source: str, index: int | None) -> bool:
        """True when this note was made for the disk with this volume, source and index."""
        return ((not self.volume or self.volume == volume)
                and (not self.source or self.source == source)
                and (self.index is None or self.index == index))


def parse_overrides(raw: str | None) -> dict[str, Override]:
    """``{alias: Override}`` of the shared writes allowed by an override."""
    if not raw:
        return {}
    root = etree.fromstring(raw)
    return {node.get("alias", ""): Override(node.get("filesystem", ""), node.get("volume", ""),
                                            node.get("source", ""), _index(node.get("index")))
            for node in root if etree.QName(node).localname == "shared-write"}


def _index(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def note_shared_write(dom: libvirt.virDomain, alias: str, note: Override | None, *,
                      live: bool, persistent: bool,
                      config_note: Override | None = None) -> None:
    """Note that the disk ``alias`` writes beside others by an override (or, with ``None``,
    drop the note: the disk is gone); ``config_note`` is the definition's, when it differs."""
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
        given = config_note if flag == libvirt.VIR_DOMAIN_AFFECT_CONFIG and config_note else note
        if given is None:
            if notes.pop(alias, None) is None:
                continue
        else:
            notes[alias] = given
        write_element(dom, "overrides", OVERRIDES_NS, OVERRIDES_PREFIX, flag, [
            ("shared-write", _attributes(a, o)) for a, o in sorted(notes.items())])


def _attributes(alias: str, note: Override) -> dict[str, str]:
    found = {"alias": alias, "filesystem": note.filesystem, "volume": note.volume,
             "source": note.source}
    if note.index is not None:
        found["index"] = str(note.index)
    return {k: v for k, v in found.items() if v or k in ("alias", "filesystem")}


def overrides_in(domain: etree._Element) -> dict[str, Override]:
    """The override notes in a domain XML's ``<metadata>`` (a migrating guest's, say)."""
    found = domain.find(f"metadata/{{{OVERRIDES_NS}}}overrides")
    return parse_overrides(etree.tostring(found)) if found is not None else {}


def set_overrides_in(domain: etree._Element, notes: dict[str, Override]) -> None:
    """Put ``notes`` into a domain XML's ``<metadata>`` as libvirt keeps them (none: removed)."""
    metadata = domain.find("metadata")
    if metadata is None:
        if not notes:
            return
        metadata = etree.SubElement(domain, "metadata")
    for old in metadata.findall(f"{{{OVERRIDES_NS}}}overrides"):
        metadata.remove(old)
    if not notes:
        return
    element = etree.SubElement(metadata, f"{{{OVERRIDES_NS}}}overrides",
                               nsmap={OVERRIDES_PREFIX: OVERRIDES_NS})
    for alias, note in sorted(notes.items()):
        etree.SubElement(element, f"{{{OVERRIDES_NS}}}shared-write", _attributes(alias, note))
