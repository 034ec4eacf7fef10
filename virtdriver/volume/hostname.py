"""Host names and addresses in ``connection_info``: one rule for every protocol that takes a host.

A host is an RFC 1123 host name (labels of letters, digits and inner hyphens, 1 to 63 characters
each, dots only between labels, at most 253 characters, the last label not all digits), absolute
with one trailing dot or not, or an IP literal: IPv4 in dotted-quad form, IPv6 in any RFC 4291
text form (an embedded IPv4 part included), bare or in brackets (``[2001:db8::5]``, as portals
and URLs write it; it is rendered bare). An IPv6 form libvirt's schema (``basictypes.rng``,
``ipv6Addr``) does not know is rendered as the same address in a form it does. A scope id
(``fe80::1%eth0``) has no place in libvirt's schema and is refused.
Everything else, ``-`` and ``...`` included, is refused with
:class:`~virtdriver.errors.InvalidConnectionInfo` naming the key.

Used by the protocols that render a ``<host>`` (iSCSI, RBD, NBD, native GlusterFS) and by those
whose share names a host the host mounts from (NFS, GlusterFS, SMB, Quobyte).
"""

from __future__ import annotations

import re
from typing import Any

from virtdriver.errors import InvalidConnectionInfo, show

MAX_HOST_NAME = 253

_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_IPV4_LIKE = re.compile(r"[0-9.]*[0-9][0-9.]*")
# libvirt's ipv6Addr pattern (basictypes.rng), so that no address it refuses is rendered.
_V4 = r"(((25[0-5])|(2[0-4][0-9])|(1[0-9]{2})|([1-9][0-9])|([0-9]))\.){3}" \
      r"((25[0-5])|(2[0-4][0-9])|(1[0-9]{2})|([1-9][0-9])|([0-9]))"
_H = "[0-9A-Fa-f]{1,4}"
_IPV6 = re.compile("|".join([
    rf"({_H}:){{7}}{_H}", rf"({_H}:){{6}}:{_H}", rf"({_H}:){{5}}:({_H}:)?{_H}",
    rf"({_H}:){{4}}:({_H}:){{0,2}}{_H}", rf"({_H}:){{3}}:({_H}:){{0,3}}{_H}",
    rf"({_H}:){{2}}:({_H}:){{0,4}}{_H}", rf"({_H}:){{6}}{_V4}", rf"({_H}:){{0,5}}:{_V4}",
    rf"::({_H}:){{0,5}}{_V4}", rf"{_H}::({_H}:){{0,5}}{_H}", rf"::({_H}:){{0,6}}{_H}",
    rf"({_H}:){{1,7}}:", "::"]))
# IPv4 in dotted-quad form, as ipaddress.IPv4Address takes it (ASCII digits, no leading zeros,
# 0-255): a pattern costs a fifth of the parse, and every render of a portal asks.
_IPV4 = re.compile(_V4)


_NOT_IPV6 = "is not an IPv6 address (RFC 4291 text form, no scope id)"


def host_problem(value: object) -> str | None:
    """Why ``value`` is not a host name or IP literal (a phrase), or ``None`` when it is one."""
    if not isinstance(value, str):
        return "is not a host name or address (not a string)"
    if not value:
        return "is not a host name or address (empty)"
    if value.startswith("[") and value.endswith("]"):
        return None if _ipv6(value[1:-1]) else _NOT_IPV6
    if ":" in value:
        return None if _ipv6(value) else _NOT_IPV6
    if len(value) > MAX_HOST_NAME:
        return f"is not a host name ({len(value)} characters; at most {MAX_HOST_NAME})"
    if _IPV4_LIKE.fullmatch(value):
        return None if _ipv4(value) else "is not an IPv4 address"
    labels = (value[:-1] if value.endswith(".") else value).split(".")  # absolute: one dot more
    if labels[-1].isdigit():
        return None if _ipv4(value) else "is not an IPv4 address"
    if not all(_LABEL.fullmatch(label) for label in labels):
        return ("is not a host name (letters, digits and inner hyphens in labels of at most 63, "
                "dots only between labels: RFC 1123) or an IP address")
    return None


def host_name(value: Any, where: str) -> str:
    """``value`` as the host to render (an IPv6 literal without its brackets), or
    :class:`InvalidConnectionInfo` naming ``where``."""
    problem = host_problem(value)
    if problem is not None:
        raise InvalidConnectionInfo(where, f"{show(value)} {problem}")
    bare: str = value[1:-1] if value.startswith("[") else value
    return _libvirt_form(bare) if ":" in bare else bare


def split_host_port(text: str, where: str) -> tuple[str, str | None]:
    """``host:port``, ``[v6]:port``, a bare host or a bare IPv6 address into host and port text
    (the host checked, the port not)."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise InvalidConnectionInfo(where, f"{show(text)} is not [address]:port")
        return host_name(f"[{host}]", where), (rest[1:] if rest else None)
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host_name(host, where), port
    return host_name(text, where), None


def _ipv4(value: str) -> bool:
    return _IPV4.fullmatch(value) is not None  # refuses leading zeros and out-of-range parts


def _ipv6(value: str) -> bool:
    if "%" in value:
        return False
    import ipaddress  # only for an IPv6 literal

    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


def _libvirt_form(address: str) -> str:
    """``address`` as written when libvirt's schema knows its form, else the same address in
    its shortest form that the schema knows (every address has one: the full eight groups)."""
    if _IPV6.fullmatch(address):
        return address
    import ipaddress

    parsed = ipaddress.IPv6Address(address)
    compressed = parsed.compressed
    return compressed if _IPV6.fullmatch(compressed) else parsed.exploded
