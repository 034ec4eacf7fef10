"""A declarative XML model: every attribute or child is declared once, on a dataclass field.

An element is a dataclass decorated with :func:`element`. Its fields, in element order, are
declared with the helpers below; one generic writer (:meth:`Element.to_xml`) and one generic reader
(:meth:`Element.from_xml`) walk those declarations, so formatting and parsing cannot drift apart.

- ``attr()``            an XML attribute
- ``flag()``            an empty marker child such as ``<readonly/>`` (a ``bool``)
- ``text_child(tag)``   a child holding only text, such as ``<serial>abc</serial>``
- ``child(Cls)``        one nested element
- ``children(Cls)``     a repeated nested element (a ``list``)

The writer produces libvirt's layout: two-space indentation, single-quoted attributes in declared
order, empty elements self-closed. Reading is strict by default (anything undeclared is an error,
so nothing is silently dropped); ``strict=False`` keeps undeclared attributes and children in
``unknown`` and writes them back, which is what live domain XML needs.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from virtdriver.config.lazy_lxml import etree  # imported when first used
from virtdriver.config.document import declared_encoding, read_document
from virtdriver.config.reader import ATTR, CHILD, CHILDREN, FLAG, TEXT_CHILD, Unknown, indented
from virtdriver.config.reader import _escape_text as escape_text
from virtdriver.config.reader import parse_xml, read
from virtdriver.errors import InvalidXMLValue, UndeclaredXML

__all__ = ["ATTR", "CHILD", "CHILDREN", "FLAG", "TEXT_CHILD", "Converter", "Element", "INT", "STR",
           "Unknown", "attr", "child", "children", "declared_fields", "element", "flag",
           "parse_xml", "text_child"]
_META = "virtdriver.xml"

E = TypeVar("E", bound="Element")


@dataclasses.dataclass(frozen=True)
class Converter:
    """How a field's Python value becomes XML text and back."""

    name: str
    parse: Callable[[str], Any]
    format: Callable[[Any], str]
    needs_escape: bool


def _parse_int(text: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
        raise ValueError(f"{text!r} is not an integer")
    return int(text)


def _format_int(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return str(value)


def _format_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


STR = Converter("string", str, _format_str, True)
INT = Converter("integer", _parse_int, _format_int, False)


def _declare(kind: str, xml_name: str | None, conv: Converter | None = None,
             cls: type | None = None, **field_kw: Any) -> Any:
    meta = {"kind": kind, "xml": xml_name, "conv": conv, "cls": cls}
    return dataclasses.field(metadata={_META: meta}, **field_kw)


def attr(name: str | None = None, *, conv: Converter = STR) -> Any:
    """An attribute; ``name`` defaults to the field name."""
    return _declare(ATTR, name, conv, default=None)


def flag(tag: str | None = None) -> Any:
    """An empty marker element, present when the field is true."""
    return _declare(FLAG, tag, default=False)


def text_child(tag: str | None = None, *, conv: Converter = STR) -> Any:
    """A child element holding only text."""
    return _declare(TEXT_CHILD, tag, conv, default=None)


def child(cls: type[Element], tag: str | None = None) -> Any:
    """One nested element; ``tag`` overrides the class's own tag for this position."""
    return _declare(CHILD, tag, cls=cls, default=None)


def children(cls: type[Element], tag: str | None = None) -> Any:
    """A repeated nested element."""
    return _declare(CHILDREN, tag, cls=cls, default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Spec:
    kind: str
    field: str
    xml: str
    conv: Converter | None
    cls: Any


class Element:
    """Base of every modelled element. Subclasses are made with :func:`element`."""

    TAG: ClassVar[str]
    _attrs: ClassVar[tuple[_Spec, ...]]
    _body: ClassVar[tuple[_Spec, ...]]
    _by_attr: ClassVar[dict[str, _Spec]]
    _by_tag: ClassVar[dict[str, _Spec]]
    _writer: ClassVar[Callable[[Any, str, str, str], str]]
    _compared: ClassVar[Callable[[Any], tuple[Any, ...]]]
    _shown: ClassVar[tuple[str, ...]]
    unknown: Unknown | None

    # Equality and repr as a dataclass's, once for every element: a dataclass generates (and
    # compiles) its own for each class, which every process start would pay for.

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared(self) == self._compared(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{type(self).__qualname__}({shown})"

    # ---- writing -----------------------------------------------------------------------------

    def to_xml(self) -> str:
        """This element as libvirt-style indented XML text (no trailing newline), with the
        document around it when it was read leniently from one (declaration, comments)."""
        body = self._writer(self, self.TAG, "", "")
        u = self.unknown
        if u is not None and (u.prolog or u.epilog):
            return u.prolog + body + u.epilog
        return body

    def to_bytes(self) -> bytes:
        """:meth:`to_xml` encoded as its XML declaration says (UTF-8 without one); characters
        that encoding lacks are written as character references."""
        u = self.unknown
        encoding = (declared_encoding(u.prolog) if u is not None else None) or "utf-8"
        try:
            return self.to_xml().encode(encoding, "xmlcharrefreplace")
        except LookupError:
            raise InvalidXMLValue(f"the declared encoding {encoding!r} has no Python "
                                  "codec") from None

    def to_element(self) -> etree._Element:
        """This element as an lxml element."""
        return parse_xml(self.to_xml())

    # ---- reading -----------------------------------------------------------------------------

    @classmethod
    def from_xml(cls: type[E], text: str | bytes, *, strict: bool = True) -> E:
        """Read XML text whose root is this element."""
        if not isinstance(strict, bool):
            raise InvalidXMLValue(f"strict: {strict!r:.40} is not true or false")
        root, prolog, epilog = read_document(text, strict)
        element = cls.from_element(root, strict=strict)
        if prolog or epilog:
            element.unknown = dataclasses.replace(element.unknown or Unknown(), prolog=prolog,
                                                  epilog=epilog)
        return element

    @classmethod
    def from_element(cls: type[E], node: etree._Element, *, strict: bool = True) -> E:
        """Read an lxml element into this class."""
        if not isinstance(strict, bool):
            raise InvalidXMLValue(f"strict: {strict!r:.40} is not true or false")
        if not isinstance(node, etree._Element):
            raise InvalidXMLValue(f"node: a {type(node).__name__} is not an lxml element")
        if node.tag != cls.TAG:
            raise UndeclaredXML(f"expected <{cls.TAG}>, found <{node.tag}>")
        return read(cls, node, strict, cls.TAG)  # type: ignore[no-any-return]


def element(tag: str) -> Callable[[type[E]], type[E]]:
    """Make ``cls`` a dataclass element with XML tag ``tag`` and compile its declarations."""

    def build(cls: type[E]) -> type[E]:
        cls.__annotations__["unknown"] = "Unknown | None"
        cls.unknown = dataclasses.field(default=None, repr=False)  # type: ignore[assignment]
        # (no slots: a slotted dataclass is made twice, a quarter of the time every command's
        # start spends building the model's classes; attribute reads cost the same)
        cls = dataclasses.dataclass(eq=False, repr=False)(cls)  # type: ignore[assignment]
        cls.TAG = tag
        every = dataclasses.fields(cls)  # type: ignore[arg-type]
        cls._compared = operator.attrgetter(*(f.name for f in every if f.compare))
        cls._shown = tuple(f.name for f in every if f.repr)
        specs: list[_Spec] = []
        for f in every:
            meta = f.metadata.get(_META)
            if meta is None:
                continue
            c = meta["cls"]
            xml = meta["xml"] or (c.TAG if c is not None and meta["kind"] in (CHILD, CHILDREN)
                                  else f.name)
            specs.append(_Spec(meta["kind"], f.name, xml, meta["conv"], c))
        cls._attrs = tuple(s for s in specs if s.kind == ATTR)
        cls._body = tuple(s for s in specs if s.kind != ATTR)
        cls._by_attr = {s.xml: s for s in cls._attrs}
        cls._by_tag = {s.xml: s for s in cls._body}
        cls._writer = staticmethod(_write_first)  # type: ignore[assignment]
        return cls

    return build


def declared_fields(cls: type[Element]) -> tuple[_Spec, ...]:
    """The declarations of ``cls`` in element order (attributes first)."""
    return cls._attrs + cls._body


# ---- the generic writer --------------------------------------------------------------------------

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


