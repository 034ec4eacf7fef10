"""The generic reader of the XML model, and how undeclared parts are kept.

Strict reading (the default) refuses anything the model does not declare, naming what would be
lost: an attribute, an element, a second copy of a single element, stray text, a comment or a
processing instruction (anywhere, a text element such as ``<serial>`` included), an entity
reference. Lenient reading (live domain XML) keeps all of it in :class:`Unknown` so that the
writer puts it back with the same meaning: namespaced attributes keep their prefix and
declaration, unknown elements keep their text exactly (only the whitespace between elements is
re-indented), comments are kept, and a declared marker or text element that carries undeclared
parts (such as ``<transient shareBacking='yes'/>``) is kept whole beside its value. An element
with text beside its children (mixed content) is kept in document order, every character of its
text exactly where it was (``Unknown.order``). The document around the root element (the XML
declaration, comments, a DOCTYPE) is :mod:`virtdriver.config.document`'s.
"""

from __future__ import annotations

import copy as copy_module
import re
from dataclasses import dataclass
from typing import Any

from lxml import etree

from virtdriver.errors import InvalidXMLValue, MalformedXML, UndeclaredXML

ATTR, FLAG, TEXT_CHILD, CHILD, CHILDREN = "attr", "flag", "text", "child", "children"
XML_NS = "http://www.w3.org/XML/1998/namespace"
# XML's whitespace: str.strip(XML_SPACE) alone would also drop a no-break space, which is text.
XML_SPACE = " \t\r\n"


@dataclass(frozen=True)
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
    #: Mixed content in document order: ``("text", exact text)``, ``("field", tag)`` for a
    #: declared child (the next of that tag), ``("raw", xml)`` for anything else. ``None``:
    #: element-only content, laid out anew (``children`` then holds the undeclared parts).
    order: tuple[tuple[str, str], ...] | None = None
    #: Only on a document's root: the text before it (XML declaration, DOCTYPE, comments) as
    #: read, and the comments and processing instructions after it.
    prolog: str = ""
    epilog: str = ""


# Blank text is kept: in mixed content every space is meaningful. Layout whitespace between
# elements is ignored by the reader and laid out anew by the writer (see _layout).
_PARSERS: list[Any] = []  # the one parser, made on first use (with lxml's import)


def _parser() -> etree.XMLParser:
    if not _PARSERS:
        _PARSERS.append(etree.XMLParser(resolve_entities=False, no_network=True,
                                        huge_tree=False))
    return _PARSERS[0]


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
        return etree.fromstring(bytes(text), _parser())
    except etree.XMLSyntaxError as exc:
        # libxml2 knows fewer encoding names than Python ('latin-1'): decode those here
        decoded = decode_declared(bytes(text)) if "nsupported encoding" in str(exc) else None
        if decoded is None:
            raise MalformedXML(f"malformed XML: {exc}") from None
    return parse_xml(decoded)


_DECLARED_ENCODING = re.compile(
    rb"""\s*<\?xml\s[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


def decode_declared(data: bytes) -> str | None:
    """``data`` decoded in the encoding its XML declaration names, when Python knows it (an
    ASCII-compatible declaration); ``None`` otherwise."""
    match = _DECLARED_ENCODING.match(data)
    if match is None:
        return None
    try:
        return data.decode(match.group(1).decode("ascii"))
    except (LookupError, UnicodeDecodeError):
        return None


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
    if not kids or (node.text and node.text.strip(XML_SPACE)) or any(
            k.tail and k.tail.strip(XML_SPACE) for k in kids):
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
        node = etree.fromstring(raw.encode("utf-8"), _parser())
    except etree.XMLSyntaxError:  # e.g. an entity reference defined outside it: as it was
        return raw
    _layout(node, len(indent) // 2)
    return etree.tostring(node, encoding="unicode")


def _escape_text(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\r", "&#13;"))


def describe(node: etree._Element) -> str:
    """A comment, processing instruction or entity reference, in a few words for a message."""
    raw = compact(node) if node.tag is not etree.Entity else node.text or "&?;"
    kind = {etree.Comment: "comment", etree.PI: "processing instruction"}.get(
        node.tag, "entity reference")
    return f"{kind} {raw[:40]!r}"


def _is_mixed(node: etree._Element) -> bool:
    return bool((node.text or "").strip(XML_SPACE)) or any(
        (k.tail or "").strip(XML_SPACE) for k in node)


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


def _text_only(sub: etree._Element, strict: bool, where: str) -> tuple[str | None, bool]:
    """The text of a text-only element, and whether it carries anything else (strict: a
    comment or processing instruction inside it is refused, by name: it would be lost)."""
    parts, other = [sub.text or ""], bool(sub.attrib)
    for node in sub:
        other = True
        if node.tag is etree.Entity or isinstance(node.tag, str):
            return None, True
        if strict:
            raise UndeclaredXML(f"{where}: a {describe(node)} inside <{sub.tag}> would be lost "
                                "(read leniently to keep it)")
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
    order: list[tuple[str, str]] | None = [] if not strict and _is_mixed(node) else None
    _text(node.text, strict, path, order)
    for sub in node:
        if not isinstance(sub.tag, str):  # comments, processing instructions, entities
            if strict:
                raise UndeclaredXML(f"{path}: a {describe(sub)} would be lost (read leniently "
                                    "to keep it)")
            raw: str | None = compact(sub)
        else:
            raw = _read_child(cls, sub, strict, path, values, kept)
        if order is not None:
            order.append(("raw", raw) if raw is not None else ("field", sub.tag))
        elif raw is not None:
            extra.append(raw)
        _text(sub.tail, strict, path, order)
    if attrs or extra or kept or order is not None:
        values["unknown"] = Unknown(tuple(attrs), tuple(extra), tuple(sorted(kept, key=_tag)),
                                    None if order is None else tuple(order))
    return cls(**values)


def _text(text: str | None, strict: bool, path: str,
          order: list[tuple[str, str]] | None) -> None:
    """Text beside child elements: kept exactly in mixed content; layout otherwise."""
    if order is not None:
        if text:
            order.append(("text", text))
    elif text is not None and text.strip(XML_SPACE) and strict:
        raise UndeclaredXML(f"{path}: unexpected text {text.strip(XML_SPACE)!r}")


def _read_child(cls: Any, sub: etree._Element, strict: bool, path: str, values: dict[str, Any],
                kept: list[tuple[str, Any, str]]) -> str | None:
    """Read one child element into ``values``; ``None`` when it became a field, else its XML
    to keep (lenient)."""
    spec = cls._by_tag.get(sub.tag)
    where = f"{path}/{sub.tag}"
    if spec is None:
        if strict:
            raise UndeclaredXML(f"{path}: undeclared element <{sub.tag}>")
        return compact(sub)
    if spec.kind == CHILDREN:
        values.setdefault(spec.field, []).append(read(spec.cls, sub, strict, where))
        return None
    if spec.field in values:
        if strict:
            raise UndeclaredXML(f"{where}: element may appear only once")
        return compact(sub)
    if spec.kind == CHILD:
        values[spec.field] = read(spec.cls, sub, strict, where)
        return None
    text, other = _text_only(sub, strict, where)
    if spec.kind == FLAG:
        other = other or bool((text or "").strip(XML_SPACE))
        value: Any = True
    elif text is None:
        if strict:
            raise UndeclaredXML(f"{where}: must hold text only")
        return compact(sub)  # elements inside a text element: not this field at all
    else:
        value = _convert(spec, text, where)
    if other:
        if strict and (spec.kind == FLAG or sub.attrib):
            raise UndeclaredXML(f"{where}: " + ("marker element must be empty"
                                                if spec.kind == FLAG else "must hold text only"))
        if not strict:
            kept.append((spec.xml, value, compact(sub)))
    values[spec.field] = value
    return None


def _tag(kept: tuple[str, Any, str]) -> str:
    return kept[0]  # kept parts in one order, however the document ordered them
