"""The model's generic writer: an element as libvirt-style XML text, from its declarations.

Each element class's writer is one straight-line function generated from the same declarations
the reader (:mod:`virtdriver.config.reader`) walks, compiled on the class's first write
(:func:`_write_first`, which :func:`virtdriver.config.model.element` installs). Values are
converted by their field's :class:`~virtdriver.config.values.Converter` and escaped; what a
lenient read kept of the document (``unknown``) is written back in its place.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from virtdriver.config.reader import CHILD, CHILDREN, FLAG, Unknown, indented
from virtdriver.config.reader import _escape_text as escape_text
from virtdriver.config.values import INT, STR, Converter
from virtdriver.errors import InvalidXMLValue

if TYPE_CHECKING:
    from virtdriver.config.model import Element

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
        return value._writer(value, spec.xml, inner, "")  # type: ignore[no-any-return]
    kept = _kept(obj.unknown, spec.xml, value, inner)
    if kept is not None:
        return kept
    if spec.kind == FLAG:
        return f"<{spec.xml}/>"
    text = _escape_value(value, spec.conv, f"{type(obj).TAG}/{spec.xml}")
    return f"<{spec.xml}>{text}</{spec.xml}>"


# Strings already found to need no escaping. Most values come from a small vocabulary (types,
# cache modes, buses, drivers), so remembering them spares the writer most regular-expression
# scans. Bounded, so unique values (paths, serials) cannot grow it without limit.
_SAFE: set[str] = set()
_SAFE_MAX = 4096


def _value_lines(conv: Converter, name: str, where: str) -> list[str]:
    """Generated lines that turn ``v`` into its XML text (fast paths first)."""
    if conv is STR:
        return ["        if v.__class__ is not str:",
                f"            v = _slow(v, {name}, {where})",
                "        elif v not in _safe:",
                "            if _search(v) is not None:",
                f"                v = _slow(v, {name}, {where})",
                f"            elif len(_safe) < {_SAFE_MAX}:",
                "                _safe.add(v)"]
    if conv is INT:
        return [f"        v = str(v) if v.__class__ is int else _slow(v, {name}, {where})"]
    return [f"        v = _slow(v, {name}, {where})"]


def _write_first(obj: Any, tag: str, indent: str, lead: str) -> str:
    """A class's writer until its first use: compiles the real one, puts it in its place and
    writes with it (compiling every class's writer up front would cost each process start
    several milliseconds, most of them for elements it never writes)."""
    cls = type(obj)
    writer = _compile_writer(cls)
    cls._writer = staticmethod(writer)
    return writer(obj, tag, indent, lead)


def _compile_writer(cls: type[Element]) -> Callable[[Any, str, str, str], str]:
    """Turn the declarations of ``cls`` into one straight-line writer function.

    The writer is generated from the same declarations the reader uses, so the two cannot drift;
    generating it removes the per-field interpretation cost (render throughput is a product goal).
    A plain string that needs no escaping is written as is; everything else takes the checked
    slow path, :func:`_escape_value`.
    """
    names: dict[str, Any] = {"_search": _SPECIAL.search, "_slow": _escape_value, "_safe": _SAFE,
                             "_ua": _unknown_attrs, "_uc": _unknown_children, "_STR": STR,
                             "_k": _kept, "_mixed": _write_mixed}
    lines = ["def write(obj, tag, indent, lead):",
             "    s = lead + '<' + tag"]
    for i, spec in enumerate(cls._attrs):
        names[f"_c{i}"] = spec.conv
        where = repr(f"{cls.TAG}/@{spec.xml}")
        lines.append(f"    v = obj.{spec.field}")
        lines.append("    if v is not None:")
        lines += _value_lines(spec.conv, f"_c{i}", where)  # type: ignore[arg-type]
        lines.append(f"        s += f\" {spec.xml}='{{v}}'\"")
    lines += ["    u = obj.unknown",
              "    if u is not None:",
              "        s += _ua(u, tag)",
              "        if u.order is not None:",
              "            return _mixed(obj, s, tag, indent)",
              "    inner = indent + '  '",
              "    il = '\\n' + inner",
              "    b = ''"]
    for i, spec in enumerate(cls._body):
        lines.append(f"    v = obj.{spec.field}")
        if spec.kind == CHILD:
            lines.append("    if v is not None:")
            lines.append(f"        b += v._writer(v, {spec.xml!r}, inner, il)")
        elif spec.kind == CHILDREN:
            lines.append("    for x in v:")
            lines.append(f"        b += x._writer(x, {spec.xml!r}, inner, il)")
        elif spec.kind == FLAG:
            lines.append("    if v:")
            lines.append(f"        k = _k(u, {spec.xml!r}, v, inner) if u is not None else None")
            lines.append(f"        b += il + (k or '<{spec.xml}/>')")
        else:
            names[f"_t{i}"] = spec.conv
            where = repr(f"{cls.TAG}/{spec.xml}")
            lines.append("    if v is not None:")
            lines.append(f"        k = _k(u, {spec.xml!r}, v, inner) if u is not None else None")
            lines.append("        if k is not None:")
            lines.append("            b += il + k")
            lines.append("        else:")
            lines += ["    " + x for x in _value_lines(spec.conv, f"_t{i}", where)]  # type: ignore[arg-type]
            lines.append(f"            b += f'{{il}}<{spec.xml}>{{v}}</{spec.xml}>'")
    lines += ["    if u is not None and u.children:",
              "        b += _uc(u, inner)",
              "    if not b:",
              "        return s + '/>'",
              "    return s + '>' + b + '\\n' + indent + '</' + tag + '>'"]
    exec("\n".join(lines), names)  # noqa: S102 - source built above from declarations only
    return names["write"]  # type: ignore[no-any-return]
