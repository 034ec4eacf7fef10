"""The XML reader loses nothing of valid XML, or (strict) refuses naming what it would lose (#25).

Lenient reading keeps text after a child exactly where it was (mixed content in document order),
the document's XML declaration (its encoding too: ``to_bytes()`` writes that encoding), comments
and processing instructions inside and around the root, a DOCTYPE. Strict reading keeps only
what the model declares and refuses anything else by name: a comment inside ``<serial>``, a
processing instruction inside ``<disk>``, an encoding declaration other than UTF-8, text beside
elements. The oracles: lxml's own reading of the original text (what it means), libvirt's
RelaxNG schema, and -- with a hypervisor -- libvirt's parser, which must read the same disk from
the original and from what was written.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from tests.fast.test_model import meaning
from virtdriver.config import Disk
from virtdriver.config.schema import SchemaViolation, validate_disk
from virtdriver.errors import UndeclaredXML

SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

DECLARATION = re.compile(r"\s*(<\?xml\s[^>]*\?>)")


# ---- the four reported losses -------------------------------------------------------------------

def test_lenient_keeps_text_after_a_child_where_it_was() -> None:
    xml = "<disk type='file'><driver name='qemu'/> after driver <source file='/a'/>\n  end </disk>"
    disk = Disk.from_xml(xml, strict=False)
    assert disk.to_xml() == xml.replace('"', "'")
    assert meaning(etree.fromstring(disk.to_xml())) == meaning(etree.fromstring(xml))
    assert disk.source is not None and disk.source.file == "/a"  # still read as the model
    with pytest.raises(UndeclaredXML, match="unexpected text 'after driver'"):
        Disk.from_xml(xml)


@pytest.mark.parametrize("as_bytes", [False, True])
def test_the_encoding_declaration_is_kept_or_refused_by_name(as_bytes: bool) -> None:
    text = ("<?xml version='1.0' encoding='latin-1'?>\n"
            "<disk type='file'><serial>caf\u00e9</serial></disk>")
    source: Any = text.encode("latin-1") if as_bytes else text
    disk = Disk.from_xml(source, strict=False)
    assert disk.serial == "caf\u00e9"
    assert disk.to_xml().startswith("<?xml version='1.0' encoding='latin-1'?>\n<disk")
    assert disk.to_bytes() == disk.to_xml().encode("latin-1")
    assert Disk.from_xml(disk.to_bytes(), strict=False) == disk
    with pytest.raises(UndeclaredXML, match="the XML declaration's encoding 'latin-1' would be "
                                            "lost"):
        Disk.from_xml(source)


def test_strict_refuses_a_comment_inside_serial_by_name() -> None:
    xml = "<disk type='file'><serial>ab<!-- note -->cd</serial></disk>"
    with pytest.raises(UndeclaredXML, match=r"^disk/serial: a comment '<!-- note -->' inside "
                                            r"<serial> would be lost"):
        Disk.from_xml(xml)
    kept = Disk.from_xml(xml, strict=False)
    assert kept.serial == "abcd" and "<!-- note -->" in kept.to_xml()


def test_strict_refuses_a_processing_instruction_inside_disk_by_name() -> None:
    xml = "<disk type='file'><?app hint?><target dev='vdb' bus='virtio'/></disk>"
    with pytest.raises(UndeclaredXML, match=r"^disk: a processing instruction '<\?app hint\?>' "
                                            "would be lost"):
        Disk.from_xml(xml)
    assert "<?app hint?>" in Disk.from_xml(xml, strict=False).to_xml()


def test_a_utf8_declaration_carries_nothing_to_lose() -> None:
    plain = Disk.from_xml("<disk type='file'/>")
    for declaration in ("<?xml version='1.0'?>", '<?xml version="1.0" encoding="UTF-8"?>',
                        "<?xml version='1.0' encoding='utf-8' standalone='yes'?>"):
        assert Disk.from_xml(declaration + "\n<disk type='file'/>") == plain
        lenient = Disk.from_xml(declaration + "\n<disk type='file'/>", strict=False)
        assert lenient.to_xml() == declaration + "\n<disk type='file'/>"


def test_a_model_changed_after_a_mixed_read_writes_the_change() -> None:
    disk = Disk.from_xml("<disk>a<serial>s</serial>b<readonly/>c</disk>", strict=False)
    disk.serial, disk.readonly, disk.shareable = None, False, True
    assert disk.to_xml() == "<disk>abc<shareable/></disk>"


# ---- generated documents ------------------------------------------------------------------------

ENCODINGS = [None, "UTF-8", "utf-8", "latin-1", "ISO-8859-1", "ascii", "UTF-16"]
CHARS = st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"],
                      exclude_characters="\ufffe\uffff")
TEXT = st.text(alphabet=st.one_of(CHARS, st.sampled_from(" \n\t&<>'\"")), min_size=1, max_size=8)
WORD = st.text(alphabet="abcxyz 019", min_size=1, max_size=6)
COMMENT = WORD.map(lambda t: f"<!--{t}-->")
PI = WORD.map(lambda t: f"<?app {t}?>")
SPACE = st.sampled_from(["\n  ", " ", "\n"])
BETWEEN = st.one_of(SPACE, TEXT.map(lambda t: t.replace("&", "&amp;").replace("<", "&lt;")
                                    .replace(">", "&gt;")), COMMENT, PI)
CHILDREN = ["<driver name='qemu' type='raw' cache='none'/>", "<source file='/srv/a.raw'/>",
            "<target dev='sdb' bus='scsi'/>", "<serial>S1</serial>", "<readonly/>"]


@st.composite
def documents(draw: st.DrawFn) -> tuple[Any, str | None]:
    """A disk libvirt's schema accepts, with text, comments and processing instructions drawn
    between its children and inside <serial>, a declaration and parts around the root."""
    parts = []
    for child in CHILDREN:
        parts.append(draw(st.lists(BETWEEN, max_size=2).map("".join)))
        if child.startswith("<serial>"):
            child = f"<serial>S{draw(st.one_of(st.just(''), COMMENT, PI))}1</serial>"
        parts.append(child)
    parts.append(draw(st.lists(BETWEEN, max_size=2).map("".join)))
    body = "<disk type='file' device='disk'>" + "".join(parts) + "</disk>"
    encoding = draw(st.sampled_from(ENCODINGS))
    declaration = "" if encoding is None and draw(st.booleans()) else (
        "<?xml version='1.0'" + (f" encoding='{encoding}'" if encoding else "") + "?>\n")
    before = draw(st.lists(st.one_of(COMMENT, PI), max_size=2).map("\n".join))
    after = draw(st.lists(st.one_of(COMMENT, PI), max_size=2).map("\n".join))
    text = declaration + before + ("\n" if before else "") + body + ("\n" + after if after else "")
    if draw(st.booleans()) or encoding is None:
        return text, encoding
    return text.encode(encoding, "xmlcharrefreplace"), encoding


def as_text(document: Any, encoding: str | None) -> str:
    if isinstance(document, str):
        return document
    return document.decode("utf-16" if encoding == "UTF-16" else encoding or "utf-8")


def what_it_says(text: str) -> tuple[str, str, list[str], list[str]]:
    """An independent reading: the declaration as written, the root's meaning, and the
    comments and processing instructions before and after it."""
    match = DECLARATION.match(text)
    declaration = match.group(1) if match else ""
    body = text[match.end():] if match else text
    root = etree.fromstring(body.encode(), etree.XMLParser(resolve_entities=False))
    before = [etree.tostring(n, encoding="unicode", with_tail=False)
              for n in root.itersiblings(preceding=True)][::-1]
    after = [etree.tostring(n, encoding="unicode", with_tail=False) for n in root.itersiblings()]
    return declaration, meaning(root), before, after


NAMES = ("comment", "processing instruction", "unexpected text", "encoding")


@SETTINGS
@given(doc=documents())
def test_lenient_reading_of_generated_documents_loses_nothing(doc: tuple[Any, str | None]) -> None:
    document, encoding = doc
    disk = Disk.from_xml(document, strict=False)
    written = disk.to_xml()
    assert what_it_says(written) == what_it_says(as_text(document, encoding)), written
    again = Disk.from_xml(written, strict=False)
    assert again == disk and again.to_xml() == written  # a fixed point
    assert Disk.from_xml(disk.to_bytes(), strict=False) == disk
    # libvirt's schema judges the written disk as it judges the original
    original = DECLARATION.sub("", as_text(document, encoding), count=1)
    assert schema_accepts(etree.tostring(disk.to_element(), encoding="unicode")) == \
        schema_accepts(etree.tostring(etree.fromstring(original.encode()), encoding="unicode"))


def schema_accepts(xml: str) -> bool:
    try:
        validate_disk(xml)
    except SchemaViolation:
        return False
    return True


@SETTINGS
@given(doc=documents())
def test_strict_reading_of_generated_documents_is_whole_or_names_the_loss(
        doc: tuple[Any, str | None]) -> None:
    document, encoding = doc
    try:
        disk = Disk.from_xml(document)
    except UndeclaredXML as exc:
        assert any(name in str(exc) for name in NAMES), exc
        assert "\n" not in str(exc)
        return
    declaration, root, before, after = what_it_says(as_text(document, encoding))
    assert not before and not after
    assert encoding in (None, "UTF-8", "utf-8")
    assert meaning(etree.fromstring(disk.to_xml())) == root  # nothing of the disk was dropped


# ---- libvirt's parser as the oracle -------------------------------------------------------------


def test_a_no_break_space_beside_elements_is_text_and_is_kept() -> None:
    """XML's whitespace is four characters: a no-break space after a child is text."""
    doc = ("<disk type='file' device='disk'><driver name='qemu' type='raw' cache='none'/>"
           "<source file='/srv/a.raw'/><target dev='sdb' bus='scsi'/><serial>S1</serial>"
           "<readonly/>\xa0</disk>")
    disk = Disk.from_xml(doc, strict=False)
    assert disk.to_xml() == doc
    assert not schema_accepts(etree.tostring(disk.to_element(), encoding="unicode"))  # text
    with pytest.raises(UndeclaredXML, match="unexpected text"):
        Disk.from_xml(doc)
