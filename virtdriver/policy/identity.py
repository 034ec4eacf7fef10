"""Identity rules: what a volume id may be, and how it is carried in a libvirt user alias.

Every disk virtdriver attaches carries the user alias ``ua-<encoded volume id>``; libvirt keeps it
in the live guest and its definition, so attachments are found again without a database. libvirt
keeps a user alias only when it is ``ua-`` followed by letters, digits, ``_`` and ``-`` (anything
else is silently dropped, and the attachment would be lost), so every other character of the id,
``_`` included, is written as ``_`` and two lower-case hex digits per UTF-8 byte: ``vol.1`` becomes
``ua-vol_2e1``. A UUID or any id of letters, digits and ``-`` is carried unchanged.

A guest can hold a device whose alias names a volume it no longer serves (a live swap keeps the
device, and so its alias). A second attachment of that volume to the guest then gets a numbered
alias, ``ua-<id>_x2``: ``x`` is not a hex digit, so the suffix never reads as an escape.
"""

from __future__ import annotations

import functools
import re
from typing import Final

from virtdriver.errors import InvalidConnectionInfo, InvalidRequest, show

ALIAS_PREFIX: Final = "ua-"
MAX_VOLUME_ID: Final = 255  # characters; Cinder's ids are 36
# A UUID as libvirt's schema (basictypes.rng, "UUID") accepts it: the 8-4-4-4-12 form or 32 hex
# digits without dashes. libvirt's own parser is laxer (dashes and spaces between any pairs), but
# XML that the schema rejects is never rendered.
UUID_PATTERN: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{32}")

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_ALIAS = re.compile(r"ua-((?:[A-Za-z0-9-]|_[0-9a-f]{2})+)(?:_x([2-9]|[1-9][0-9]+))?")


def volume_id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a volume id (a phrase to follow the value), or ``None``.

    Any printable text without white space, up to :data:`MAX_VOLUME_ID` characters, is an id;
    characters libvirt does not keep in an alias are encoded, not refused.
    """
    if not isinstance(value, str):
        return "is not a volume id (not a string)"
    if not value:
        return "is not a volume id (empty)"
    if len(value) > MAX_VOLUME_ID:
        return f"is not a volume id ({len(value)} characters; at most {MAX_VOLUME_ID})"
    # Printable text holds one white-space character only, the ASCII space (every other is
    # a separator or control character, which isprintable() refuses): no per-character loop.
    if not value.isprintable() or " " in value:
        return "is not a volume id (white space or control characters)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not a volume id (not valid Unicode text)"
    return None


def check_volume_id(value: object, where: str = "connection_info.data.volume_id") -> str:
    """``value`` as a volume id; :class:`InvalidConnectionInfo` naming ``where`` otherwise."""
    problem = volume_id_problem(value)
    if problem is not None:
        raise InvalidConnectionInfo(where, f"{show(value)} {problem}")
    return value  # type: ignore[return-value]


def check_requested_volume_id(value: object, field: str = "volume_id") -> str:
    """A volume id given by an operator or a caller (detach, release): :class:`InvalidRequest`."""
    problem = volume_id_problem(value)
    if problem is not None:
        raise InvalidRequest(f"{field}: {show(value)} {problem}")
    return value  # type: ignore[return-value]


def check_instance(value: object, field: str = "instance") -> str:
    """A guest named by a caller (name or UUID): one printable line, as libvirt's domain names
    are (checked before libvirt is asked, so that no other type reaches it)."""
    if not isinstance(value, str) or not value or len(value) > 255 or not value.isprintable():
        raise InvalidRequest(f"{field}: {show(value)} is not a guest name or UUID")
    return value


@functools.lru_cache(maxsize=4096)  # every read of the host encodes and decodes each alias
def encode_volume_id(volume_id: str) -> str:
    """The id with every character libvirt drops from an alias escaped (see the module doc)."""
    return "".join(c if c in _PLAIN else "".join(f"_{b:02x}" for b in c.encode("utf-8"))
                   for c in volume_id)


def decode_volume_id(encoded: str) -> str | None:
    """The inverse of :func:`encode_volume_id`; ``None`` for text it cannot have produced."""
    out = bytearray()
    i = 0
    while i < len(encoded):
        c = encoded[i]
        if c == "_":
            pair = encoded[i + 1:i + 3]
            if len(pair) != 2 or any(h not in "0123456789abcdef" for h in pair):
                return None
            out.append(int(pair, 16))
            i += 3
        elif c in _PLAIN:
            out += c.encode()
            i += 1
        else:
            return None
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


def alias_for(volume_id: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """The user alias for an attachment of ``volume_id``: the first one not in ``taken``."""
    base = ALIAS_PREFIX + encode_volume_id(volume_id)
    if base not in taken:
        return base
    return next(alias for n in range(2, len(taken) + 3)
                if (alias := f"{base}_x{n}") not in taken)


def encoded_ids_in(text: str) -> set[str]:
    """The encoded volume ids of the aliases ``text`` holds, and perhaps a few ids more.

    A look at a whole XML document for every alias :func:`alias_for` made (written verbatim
    between quotes: its characters are never escaped), by :func:`encode_volume_id`."""
    return {match.group(1) for match in _ALIAS.finditer(text)}


@functools.lru_cache(maxsize=4096)
def volume_of_alias(alias: str | None) -> str | None:
    """The volume id an alias made by :func:`alias_for` names; ``None`` for any other alias."""
    if not alias:
        return None
    match = _ALIAS.fullmatch(alias)
    return decode_volume_id(match.group(1)) if match else None


def names_guest(name: str, uuid: str, instance: str) -> bool:
    """True when ``instance`` is the guest's name or its UUID (any case, dashes or not)."""
    if instance == name:
        return True
    compact = instance.lower().replace("-", "")
    return len(compact) == 32 and compact == uuid.lower().replace("-", "")
