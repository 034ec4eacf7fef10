"""A declarative XML model: every attribute or child is declared once, on a field.

An element is a dataclass decorated with :func:`element`. Its fields, in element order, are
declared with the helpers below; one generic writer (:meth:`Element.to_xml`, :mod:`.writer`) and
one generic reader (:meth:`Element.from_xml`, :mod:`.reader`) walk those declarations, so
formatting and parsing cannot drift apart; a field's value is converted by its :mod:`.values`
converter.

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

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar, dataclass_transform

from lxml import etree

from virtdriver.config.document import declared_encoding, read_document
from virtdriver.config.reader import (
    ATTR,
    CHILD,
    CHILDREN,
    FLAG,
    TEXT_CHILD,
    Unknown,
    parse_xml,
    read,
)
from virtdriver.config.values import INT, STR, Converter
from virtdriver.config.writer import write
from virtdriver.errors import InvalidXMLValue, UndeclaredXML

__all__ = ["ATTR", "CHILD", "CHILDREN", "FLAG", "TEXT_CHILD", "Converter", "Element", "INT", "STR",
           "Unknown", "attr", "child", "children", "declared_fields", "element", "flag",
           "parse_xml", "text_child"]
_META = "virtdriver.xml"

E = TypeVar("E", bound="Element")


def _declare(kind: str, xml_name: str | None, conv: Converter | None = None,
             cls: type | None = None, **field_kw: Any) -> Any:
    meta = {"kind": kind, "xml": xml_name, "conv": conv, "cls": cls}
    return field(metadata={_META: meta}, **field_kw)


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


@dataclass(frozen=True)
class _Spec:
    kind: str
    field: str
    xml: str
    conv: Converter | None
    cls: Any


class Element:
    """Base of every modelled element; subclasses are dataclasses made with :func:`element`."""

    TAG: ClassVar[str]
    _attrs: ClassVar[tuple[_Spec, ...]]
    _body: ClassVar[tuple[_Spec, ...]]
    _by_attr: ClassVar[dict[str, _Spec]]
    _by_tag: ClassVar[dict[str, _Spec]]
    unknown: Unknown | None

    # ---- writing -----------------------------------------------------------------------------

    def to_xml(self) -> str:
        """This element as libvirt-style indented XML text (no trailing newline), with the
        document around it when it was read leniently from one (declaration, comments)."""
        body = write(self, self.TAG, "", "")
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
            element.unknown = replace(element.unknown or Unknown(), prolog=prolog,
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
        return read(cls, node, strict, cls.TAG)


@dataclass_transform()  # (the helpers above return defaults, as a plain dataclass sees them)
def element(tag: str) -> Callable[[type[E]], type[E]]:
    """Make ``cls`` a value type element with XML tag ``tag`` and compile its declarations."""

    def build(cls: type[E]) -> type[E]:
        cls.__annotations__["unknown"] = "Unknown | None"
        cls.unknown = field(default=None, repr=False)
        cls = dataclass(cls)
        cls.TAG = tag
        every = fields(cls)  # type: ignore[arg-type]
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
        return cls

    return build


def declared_fields(cls: type[Element]) -> tuple[_Spec, ...]:
    """The declarations of ``cls`` in element order (attributes first)."""
    return cls._attrs + cls._body
