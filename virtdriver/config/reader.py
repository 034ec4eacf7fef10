"""The generic reader of the XML model, and how undeclared parts are kept.

Strict reading (the default) refuses anything the model does not declare: an attribute, an
element, a second copy of a single element, stray text, an entity reference. Lenient reading
(live domain XML) keeps all of it in :class:`Unknown` so that the writer puts it back with the
same meaning: namespaced attributes keep their prefix and declaration, unknown elements keep
their text exactly (only the whitespace between elements is re-indented), comments and stray
text are kept, and a declared marker or text element that carries undeclared parts (such as
``<transient shareBacking='yes'/>``) is kept whole beside its value.
"""

from __future__ import annotations

import copy as copy_module
import dataclasses
import re
from typing import Any

from lxml import etree

from virtdriver.errors import InvalidXMLValue, MalformedXML, UndeclaredXML

ATTR, FLAG, TEXT_CHILD, CHILD, CHILDREN = "attr", "flag", "text", "child", "children"
XML_NS = "http://www.w3.org/XML/1998/namespace"


@dataclasses.dataclass(frozen=True)
class Unknown:
    """Undeclared parts kept by a lenient read.

    ``attrs``: attributes in document order, by qualified name (``prefix:name``), each prefix
    preceded by its ``xmlns:prefix`` declaration. ``children``: compact XML of unknown child
    elements, comments and (escaped) stray text, in order. ``kept``: ``(tag, value, xml)`` of a
    declared marker or text child that carried undeclared parts; the writer uses ``xml`` while
    the field still holds ``value``.
    """

    attrs: tuple[tuple[str, str], ...] = ()
    children: tuple[str, ...] = ()
    kept: tuple[tuple[str, Any, str], ...] = ()


# Blank text is kept: in mixed content every space is meaningful. Layout whitespace between
# elements is ignored by the reader and laid out anew by the writer (see _layout).
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
_DECLARATION = re.compile(r"\s*<\?xml\s[^>]*\?>")


def parse_xml(text: str | bytes) -> etree._Element:
    """Parse XML text, turning every parse failure into :class:`MalformedXML`.

    Bytes are decoded as their XML declaration says (UTF-8 without one). A ``str`` is already
    decoded: an encoding its declaration names does not apply to it and is set aside.
    """
    if isinstance(text, str):
        match = _DECLARATION.match(text)
        if match is not None:
            text = text[match.end():]
        try:
            text = text.encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedXML("malformed XML: the text holds a lone surrogate") from None
    elif not isinstance(text, (bytes, bytearray)):
        raise MalformedXML(f"text: a {type(text).__name__} is not XML text (str or bytes)")
    try:
        return etree.fromstring(bytes(text), _PARSER)
    except etree.XMLSyntaxError as exc:
        raise MalformedXML(f"malformed XML: {exc}") from None


def compact(node: etree._Element) -> str:
    """``node`` (an element, comment or processing instruction) as XML text, without its tail."""
    if not isinstance(node.tag, str):
        copy = etree.Comment(node.text) if node.tag is etree.Comment else node.__copy__()
        copy.tail = None
        return etree.tostring(copy, encoding="unicode")
    copy = copy_module.deepcopy(node)
    copy.tail = None
    _layout(copy, None)
    return etree.tostring(copy, encoding="unicode")


def _layout(node: etree._Element, level: int | None) -> None:
    """Lay out whitespace between elements: none (``level=None``) or indented at ``level``.

    Only element-only content is touched; in mixed content (text beside elements) every
    character is meaningful and is left exactly as it is.
    """
    kids = list(node)
    if not kids or (node.text and node.text.strip()) or any(
            k.tail and k.tail.strip() for k in kids):
        return
    pad = None if level is None else "\n" + "  " * (level + 1)
    node.text = pad
    for kid in kids:
        kid.tail = pad
        if isinstance(kid.tag, str):
            _layout(kid, None if level is None else level + 1)
    kids[-1].tail = None if level is None else "\n" + "  " * level


def indented(raw: str, indent: str) -> str:
    """A kept part, indented to sit at ``indent``; element text is never touched."""
    if not raw.startswith("<") or raw.startswith(("<!--", "<?")):
        return raw
    try:
        node = etree.fromstring(raw.encode("utf-8"), _PARSER)
    except etree.XMLSyntaxError:  # e.g. an entity reference defined outside it: as it was
        return raw
    _layout(node, len(indent) // 2)
    return etree.tostring(node, encoding="unicode")


def _escape_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _qualified(name: str, node: etree._Element, attrs: list[tuple[str, str]]) -> str:
    """``{uri}local`` as ``prefix:local``, declaring the prefix first if needed."""
    uri, _, local = name[1:].partition("}")
    if uri == XML_NS:
        return f"xml:{local}"
    prefixes = [p for p, u in node.nsmap.items() if u == uri and p]
    prefix = prefixes[0] if prefixes else f"ns{len(attrs)}"
    declaration = (f"xmlns:{prefix}", uri)
    if declaration not in attrs:
        attrs.append(declaration)
    return f"{prefix}:{local}"


def _text_only(sub: etree._Element) -> tuple[str | None, bool]:
    """The text of a text-only element, and whether it carries anything else."""
    parts, other = [sub.text or ""], bool(sub.attrib)
    for node in sub:
        other = True
        if node.tag is etree.Entity or isinstance(node.tag, str):
            return None, True
        parts.append(node.tail or "")
    return "".join(parts), other


def _convert(spec: Any, text: str, where: str) -> Any:
    try:
        return spec.conv.parse(text)
    except ValueError:
        raise InvalidXMLValue(f"{where}: {text!r} is not a valid {spec.conv.name}") from None


def read(cls: Any, node: etree._Element, strict: bool, path: str) -> Any:
    """Read ``node`` into the element class ``cls`` (see the module docstring)."""
    values: dict[str, Any] = {}
    attrs: list[tuple[str, str]] = []
    extra: list[str] = []
    kept: list[tuple[str, Any, str]] = []
    for name, text in node.attrib.items():
        spec = cls._by_attr.get(name)
        if spec is not None:
            values[spec.field] = _convert(spec, text, f"{path}/@{name}")
        elif strict:
            raise UndeclaredXML(f"{path}: undeclared attribute {name!r}")
        else:
            qname = _qualified(name, node, attrs) if name.startswith("{") else name
            attrs.append((qname, text))
    _stray(node.text, strict, path, extra)
    for sub in node:
        if not isinstance(sub.tag, str):  # comments, processing instructions, entities
            if sub.tag is etree.Entity and strict:
                raise UndeclaredXML(f"{path}: entity reference {sub.text!r}")
            if not strict:
                extra.append(compact(sub))
            _stray(sub.tail, strict, path, extra)
            continue
        _read_child(cls, sub, strict, path, values, extra, kept)
        _stray(sub.tail, strict, path, extra)
    if attrs or extra or kept:
        values["unknown"] = Unknown(tuple(attrs), tuple(extra), tuple(sorted(kept, key=_tag)))
    return cls(**values)


def _stray(text: str | None, strict: bool, path: str, extra: list[str]) -> None:
    if text is None or not text.strip():
        return
    if strict:
        raise UndeclaredXML(f"{path}: unexpected text {text.strip()!r}")
    extra.append(_escape_text(text.strip()))


def _read_child(cls: Any, sub: etree._Element, strict: bool, path: str, values: dict[str, Any],
                extra: list[str], kept: list[tuple[str, Any, str]]) -> None:
    spec = cls._by_tag.get(sub.tag)
    where = f"{path}/{sub.tag}"
    if spec is None:
        if strict:
            raise UndeclaredXML(f"{path}: undeclared element <{sub.tag}>")
        extra.append(compact(sub))
        return
    if spec.kind == CHILDREN:
        values.setdefault(spec.field, []).append(read(spec.cls, sub, strict, where))
        return
    if spec.field in values:
        if strict:
            raise UndeclaredXML(f"{where}: element may appear only once")
        extra.append(compact(sub))
        return
    if spec.kind == CHILD:
        values[spec.field] = read(spec.cls, sub, strict, where)
        return
    text, other = _text_only(sub)
    if spec.kind == FLAG:
        other = other or bool((text or "").strip())
        value: Any = True
    elif text is None:
        if strict:
            raise UndeclaredXML(f"{where}: must hold text only")
        extra.append(compact(sub))  # elements inside a text element: not this field at all
        return
    else:
        value = _convert(spec, text, where)
    if other:
        if strict and (spec.kind == FLAG or sub.attrib):
            raise UndeclaredXML(f"{where}: " + ("marker element must be empty"
                                                if spec.kind == FLAG else "must hold text only"))
        if not strict:
            kept.append((spec.xml, value, compact(sub)))
    values[spec.field] = value


def _tag(kept: tuple[str, Any, str]) -> str:
    return kept[0]  # kept parts in one order, however the document ordered them
