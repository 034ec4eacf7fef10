"""The model's generic writer: an element as libvirt-style XML text, from its declarations.

:func:`write` walks the same declarations the reader (:mod:`virtdriver.config.reader`) walks,
so the two cannot drift. Values are converted by their field's
:class:`~virtdriver.config.values.Converter` and escaped; what a lenient read kept of the
document (``unknown``) is written back in its place.
"""

from __future__ import annotations

import re
from typing import Any

from virtdriver.config.reader import CHILD, CHILDREN, FLAG, Unknown, indented
from virtdriver.config.reader import _escape_text as escape_text
from virtdriver.config.values import Converter
from virtdriver.errors import InvalidXMLValue

# Anything that must be escaped in an attribute, or that XML 1.0 cannot carry at all.
_SPECIAL = re.compile("[&<>'\"\n\r\t\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _escape(value: str, where: str) -> str:
    if _SPECIAL.search(value) is None:
        return value
    if _FORBIDDEN.search(value):
        raise InvalidXMLValue(f"{where}: {value!r} contains a character XML cannot carry")
    return (value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("'", "&apos;").replace('"', "&quot;").replace("\n", "&#10;")
            .replace("\r", "&#13;").replace("\t", "&#9;"))


def _escape_value(value: Any, conv: Converter, where: str) -> str:
    """The slow path of the writer: convert, type-check and escape one value."""
    try:
        text = conv.format(value)
    except ValueError as exc:
        raise InvalidXMLValue(f"{where}: {exc}") from None
    return _escape(text, where) if conv.needs_escape else text


def _unknown_attrs(unknown: Unknown, tag: str) -> str:
    return "".join(f" {name}='{_escape(value, tag)}'" for name, value in unknown.attrs)


def _unknown_children(unknown: Unknown, inner: str) -> str:
    return "".join("\n" + inner + indented(raw, inner) for raw in unknown.children)


def _kept(unknown: Unknown | None, tag: str, value: Any, inner: str) -> str | None:
    """A declared marker or text child as read, when it carried undeclared parts."""
    if unknown is not None:
        for kept_tag, kept_value, raw in unknown.kept:
            if kept_tag == tag and kept_value == value:
                return indented(raw, inner)
    return None


def _write_mixed(obj: Any, start: str, tag: str, indent: str) -> str:
    """The body of an element read with mixed content: its parts in document order, text
    exactly as read; a declared field set since is added after them, one dropped is left out."""
    cls, order = type(obj), obj.unknown.order
    inner = indent + "  "
    body, used = [], dict.fromkeys(cls._by_tag, 0)
    for kind, value in order:
        if kind == "text":
            body.append(escape_text(value))
        elif kind == "raw":
            body.append(value)
        else:
            body.append(_field_part(obj, cls._by_tag[value], used[value], inner))
            used[value] += 1
    for spec in cls._body:
        values = getattr(obj, spec.field)
        count = len(values) if spec.kind == CHILDREN else int(values not in (None, False))
        body += [_field_part(obj, spec, n, inner) for n in range(used[spec.xml], count)]
    text = "".join(body)
    return start + (f">{text}</{tag}>" if text else "/>")


def _field_part(obj: Any, spec: Any, n: int, inner: str) -> str:
    """The ``n``-th element of a declared field as XML (``""`` when there is none now)."""
    value = getattr(obj, spec.field)
    if spec.kind == CHILDREN:
        value = value[n] if n < len(value) else None
    elif n:
        value = None
    if value is None or value is False:
        return ""
    if spec.kind in (CHILD, CHILDREN):
        return write(value, spec.xml, inner, "")
    return _marker_or_text(obj, spec, value, inner)


def write(obj: Any, tag: str, indent: str, lead: str) -> str:
    """``obj`` as the element ``tag`` at ``indent``, after ``lead`` (a newline and indent)."""
    cls = type(obj)
    start = lead + "<" + tag
    for spec in cls._attrs:
        value = getattr(obj, spec.field)
        if value is not None:
            text = _escape_value(value, spec.conv, f"{cls.TAG}/@{spec.xml}")
            start += f" {spec.xml}='{text}'"
    u = obj.unknown
    if u is not None:
        start += _unknown_attrs(u, tag)
        if u.order is not None:
            return _write_mixed(obj, start, tag, indent)
    inner = indent + "  "
    newline = "\n" + inner
    body = ""
    for spec in cls._body:
        value = getattr(obj, spec.field)
        if spec.kind == CHILD:
            if value is not None:
                body += write(value, spec.xml, inner, newline)
        elif spec.kind == CHILDREN:
            for item in value:
                body += write(item, spec.xml, inner, newline)
        elif value is not None and value is not False:
            body += newline + _marker_or_text(obj, spec, value, inner)
    if u is not None and u.children:
        body += _unknown_children(u, inner)
    if not body:
        return start + "/>"
    return start + ">" + body + "\n" + indent + "</" + tag + ">"


def _marker_or_text(obj: Any, spec: Any, value: Any, inner: str) -> str:
    """A flag (``<readonly/>``) or a text child, or the one a lenient read kept as it was."""
    kept = _kept(obj.unknown, spec.xml, value, inner)
    if kept is not None:
        return kept
    if spec.kind == FLAG:
        return f"<{spec.xml}/>"
    text = _escape_value(value, spec.conv, f"{type(obj).TAG}/{spec.xml}")
    return f"<{spec.xml}>{text}</{spec.xml}>"
