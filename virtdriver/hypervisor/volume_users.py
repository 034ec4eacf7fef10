"""Who uses a volume or its data on this host, decided from libvirt's live state (no database).

A volume attached by virtdriver carries the user alias ``ua-<volume id>``; a disk is also
matched by its source (the same device, file or network volume under another name is the same
data). The domains are read by :mod:`~virtdriver.hypervisor.domains`; here a cheap look at each
domain's XML text (:class:`Wanted`) leaves out those that cannot hold the volume or its data, and
the sharing rules (:func:`virtdriver.policy.sharing.users_of`) decide among the disks of the rest.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from virtdriver.hypervisor.dataid import DataIdentity, path_identity
from virtdriver.hypervisor.metadata import NS
from virtdriver.policy.identity import encode_volume_id, encoded_ids_in
from virtdriver.policy.sharing import Use, users_of

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


class XmlFacts:
    """What :class:`Wanted` looks for in a domain's live XML and definition, found once.

    An attach or detach at many guests then looks each guest up instead of reading it through."""

    __slots__ = ("texts", "sources", "volumes", "noted")

    def __init__(self, texts: tuple[str, ...]) -> None:
        self.texts = texts
        # every <source file|dev> path, once; the encoded volume ids of our aliases
        self.sources = (source_paths(texts[0]) if len(texts) == 1 else
                        tuple(dict.fromkeys(p for xml in texts for p in source_paths(xml))))
        self.volumes: frozenset[str] = frozenset().union(*map(encoded_ids_in, texts))
        self.noted = any(NS in xml for xml in texts)  # virtdriver's <metadata> (swap notes)


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
        self._needles: list[str] = []  # text only a document that can hold the data holds
        self._encoded = None if volume is None else encode_volume_id(volume)
        self._notes: tuple[str, ...] | None = None  # a swap note naming the volume
        if volume is not None:
            self._notes = ((f'volume="{volume}"', f"volume='{volume}'")
                           if VERBATIM_TEXT.fullmatch(volume) else ())
        self._by_path = data is not None and data[0] in ("dev", "inode", "path")
        if data is not None and data[0] == "net":
            name = data[2] if len(data) > 2 else ""
            self._needles.append(name if name and VERBATIM_TEXT.fullmatch(name) else "protocol=")
        elif data is not None and not self._by_path and data[0] != "key":
            self._needles.append("<source")  # an identity of a kind not known here: parse

    def may_be_in(self, facts: XmlFacts) -> bool:
        """Whether a domain whose XML documents hold ``facts`` can hold a disk that is the
        volume or its data."""
        if self._encoded is not None and self._encoded in facts.volumes:
            return True
        notes = self._notes
        if notes is not None and facts.noted:
            for xml in facts.texts:
                if NS in xml and (not notes or any(n in xml for n in notes)):
                    return True
        for needle in self._needles:  # (loops, not any(): asked of every domain)
            for xml in facts.texts:
                if needle in xml:
                    return True
        if not self._by_path:
            return False
        paths, data = self._paths, self.data
        for path in facts.sources:
            found = paths.get(path)
            if found is None:
                found = paths[path] = path_identity(path)
            if found == data:
                return True
        return False

    def uses(self, uses: Iterable[Use]) -> list[Use]:
        """Of ``uses``, those that are the volume or hold its data."""
        if self.volume is None:
            return [u for u in uses if self.data is not None and u.data == self.data]
        return users_of(self.volume, self.data, uses)
