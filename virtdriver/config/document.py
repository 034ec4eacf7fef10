"""The document around a root element: its XML declaration, DOCTYPE, comments and processing
instructions outside the root.

Lenient reading keeps them (``Unknown.prolog``, the text before the root exactly as read, and
``Unknown.epilog``); the writer puts them back, and :meth:`Element.to_bytes` encodes the text in
the encoding the declaration names. Strict reading refuses them, naming what would be lost -- all
but an XML declaration that says no more than what the writer's output is anyway (XML 1.0,
UTF-8 or no encoding named), which carries nothing to lose.
"""

from __future__ import annotations

import codecs
import re

from lxml import etree

from virtdriver.config.reader import XML_SPACE, compact, decode_declared, describe, parse_xml
from virtdriver.errors import UndeclaredXML

# One part of a prolog: white space, the declaration or another processing instruction, a
# comment, or a DOCTYPE (its internal subset with quoted strings, comments and PIs in it).
_PART = re.compile(r"""\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE(?:[^\[>"']|"[^"]*"|'[^']*')*"""
                   r"""(?:\[(?:<!--.*?-->|<\?.*?\?>|"[^"]*"|'[^']*'|[^\]"'])*\])?\s*>""", re.S)
_DECLARATION = re.compile(r"<\?xml\s(.*?)\?>", re.S)
_PSEUDO_ATTR = re.compile(r"""(\w+)\s*=\s*(["'])(.*?)\2""", re.S)
_UTF8 = ("utf-8", "utf8")


def read_document(text: str | bytes, strict: bool) -> tuple[etree._Element, str, str]:
    """The root element, the prolog (text before it, as read) and the epilog (comments and
    processing instructions after it); strict refuses any of them that would be lost."""
    root = parse_xml(text)
    decoded = _decoded(text, root)
    start = 1 if decoded.startswith("\ufeff") else 0
    end = start
    while (match := _PART.match(decoded, end)) is not None and match.end() > end:
        end = match.end()
    if not decoded.startswith("<", end) or decoded.startswith(("<?", "<!"), end):
        raise UndeclaredXML(f"the document's prolog (before <{root.tag}>) cannot be kept as it "
                            "is written")
    prolog = decoded[start:end]
    epilog = "".join("\n" + compact(node) for node in root.itersiblings())
    if strict:
        _refuse_outside(prolog, root)
        return root, "", ""
    return root, prolog if prolog.strip(XML_SPACE) else "", epilog


def declared_encoding(prolog: str) -> str | None:
    """The encoding an XML declaration at the start of ``prolog`` names, if any."""
    match = _DECLARATION.match(prolog)
    return None if match is None else _pseudo_attrs(match.group(1)).get("encoding")


def _pseudo_attrs(text: str) -> dict[str, str]:
    return {m.group(1): m.group(3) for m in _PSEUDO_ATTR.finditer(text)}


def _decoded(text: str | bytes, root: etree._Element) -> str:
    if isinstance(text, str):
        return text
    declared = decode_declared(bytes(text))
    if declared is not None:
        return declared
    encoding = root.getroottree().docinfo.encoding or "utf-8"
    try:
        name = codecs.lookup(encoding).name
        return bytes(text).decode("utf-8-sig" if name == "utf-8" else name)
    except (LookupError, UnicodeDecodeError):
        raise UndeclaredXML(f"the document's encoding {encoding!r} cannot be kept (no Python "
                            "codec reads it)") from None


def _refuse_outside(prolog: str, root: etree._Element) -> None:
    """Strict: refuse, by name, what the model would not keep of the document."""
    declaration = _DECLARATION.match(prolog.lstrip())
    if declaration is not None:
        attrs = _pseudo_attrs(declaration.group(1))
        encoding = attrs.get("encoding")
        if encoding is not None and encoding.lower() not in _UTF8:
            raise UndeclaredXML(f"the XML declaration's encoding {encoding!r} would be lost (the "
                                "model writes UTF-8 text; read leniently to keep it)")
        if attrs.get("version", "1.0") != "1.0":
            raise UndeclaredXML(f"the XML declaration's version {attrs['version']!r} would be "
                                "lost (read leniently to keep it)")
    before = list(root.itersiblings(preceding=True))
    if root.getroottree().docinfo.doctype:
        raise UndeclaredXML(f"the DOCTYPE before <{root.tag}> would be lost (read leniently to "
                            "keep it)")
    if before:
        raise UndeclaredXML(f"a {describe(before[-1])} before <{root.tag}> would be lost (read "
                            "leniently to keep it)")
    after = next(root.itersiblings(), None)
    if after is not None:
        raise UndeclaredXML(f"a {describe(after)} after <{root.tag}> would be lost (read "
                            "leniently to keep it)")
