"""The disk model: exact round trips, schema validity, strictness and escaping."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from tests.conftest import FIXTURES
from virtdriver.config import (
    Address,
    Alias,
    BlockIO,
    Disk,
    DomainDisks,
    Driver,
    Element,
    Source,
    Target,
)
from virtdriver.config.model import CHILD, CHILDREN, declared_fields
from virtdriver.errors import ConfigError, InvalidXMLValue, MalformedXML, UndeclaredXML

MODEL_FIXTURES = sorted((FIXTURES / "model").glob("*.xml"))
# Every golden disk in the repository: the model fixtures and the render goldens.
ALL_GOLDEN_XML = sorted(FIXTURES.rglob("*.xml"))


def _read(path: Path) -> str:
    return path.read_text().rstrip("\n")


@pytest.mark.parametrize("path", ALL_GOLDEN_XML, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_golden_round_trips_exactly(path: Path) -> None:
    text = _read(path)
    disk = Disk.from_xml(text)
    assert disk.to_xml() == text
    assert Disk.from_xml(disk.to_xml()) == disk


@pytest.mark.parametrize("path", ALL_GOLDEN_XML, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_golden_is_valid_for_libvirt(path: Path, schema_valid) -> None:
    schema_valid(_read(path))


def _element_classes(root: type[Element]) -> list[type[Element]]:
    seen: list[type[Element]] = []
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        todo.extend(s.cls for s in declared_fields(cls) if s.kind in (CHILD, CHILDREN))
    return seen


def _used_fields(obj: Element, used: set[tuple[str, str]]) -> None:
    for spec in declared_fields(type(obj)):
        value = getattr(obj, spec.field)
        if value is None or value is False or value == []:
            continue
        used.add((type(obj).__name__, spec.field))
        if spec.kind == CHILD:
            _used_fields(value, used)
        elif spec.kind == CHILDREN:
            for item in value:
                _used_fields(item, used)


def test_every_declared_field_appears_in_a_golden_file() -> None:
    used: set[tuple[str, str]] = set()
    for path in ALL_GOLDEN_XML:
        _used_fields(Disk.from_xml(_read(path)), used)
    declared = {(cls.__name__, spec.field) for cls in _element_classes(Disk)
                for spec in declared_fields(cls)}
    assert declared - used == set(), "declared fields no golden file exercises"


def test_built_disk_round_trips_and_compares_by_value() -> None:
    disk = Disk(type="block", device="disk",
                driver=Driver(name="qemu", type="raw", cache="none", io="native"),
                source=Source(dev="/dev/loop3"), target=Target(dev="sdb", bus="scsi"),
                readonly=True, shareable=True, serial="vol-1", alias=Alias(name="ua-vol-1"),
                address=Address.drive(7))
    again = Disk.from_xml(disk.to_xml())
    assert again == disk
    assert again != dataclasses.replace(disk, readonly=False)


@pytest.mark.parametrize("xml, message", [
    ("<disk type='file' colour='blue'/>", "undeclared attribute 'colour'"),
    ("<disk type='file'><mirror/></disk>", "undeclared element <mirror>"),
    ("<disk><source file='/a'><cookie/></source></disk>", "disk/source: undeclared element"),
    ("<disk><readonly/><readonly/></disk>", "may appear only once"),
    ("<disk><readonly mode='x'/></disk>", "marker element must be empty"),
    ("<disk>stray</disk>", "unexpected text"),
    ("<disk><serial a='1'>x</serial></disk>", "must hold text only"),
    ("<domain/>", "expected <disk>"),
])
def test_strict_parsing_names_what_is_undeclared(xml: str, message: str) -> None:
    with pytest.raises(UndeclaredXML, match=message):
        Disk.from_xml(xml)


def test_bad_integer_is_a_typed_error_naming_the_place() -> None:
    with pytest.raises(InvalidXMLValue, match=r"disk/blockio/@logical_block_size: 'big'"):
        Disk.from_xml("<disk><blockio logical_block_size='big'/></disk>")


@pytest.mark.parametrize("text", ["<disk", "<disk></dusk>", "", "<disk>&bogus;</disk>"])
def test_malformed_xml_is_a_typed_error(text: str) -> None:
    with pytest.raises(MalformedXML, match="malformed XML"):
        Disk.from_xml(text)


def test_wrong_python_type_is_refused_when_writing() -> None:
    with pytest.raises(InvalidXMLValue, match="disk/@type"):
        Disk(type=3).to_xml()  # type: ignore[arg-type]
    with pytest.raises(InvalidXMLValue, match="blockio/@logical_block_size"):
        Disk(blockio=BlockIO(logical_block_size="512")).to_xml()  # type: ignore[arg-type]


@given(st.text(max_size=60))
def test_any_string_value_is_escaped_or_refused(value: str) -> None:
    disk = Disk(type="file", source=Source(file=value), serial=value, alias=Alias(name=value))
    try:
        text = disk.to_xml()
    except InvalidXMLValue:
        return
    assert Disk.from_xml(text) == disk


@pytest.mark.parametrize("value", ["a<b", "a&b", "it's", 'say "hi"', "two\nlines", "tab\there",
                                   "cr\rhere", "]]>"])
def test_specials_survive_the_round_trip(value: str) -> None:
    disk = Disk(source=Source(file=value), serial=value)
    assert Disk.from_xml(disk.to_xml()) == disk


def test_nul_is_refused() -> None:
    with pytest.raises(ConfigError, match="character XML cannot carry"):
        Disk(serial="a\x00b").to_xml()


LIVE_DOMAIN = """<domain type='kvm' id='7'>
  <name>guest-a</name>
  <uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>
  <memory unit='KiB'>131072</memory>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw' cache='none'/>
      <source file='/var/lib/virtdriver/vol1.img' index='1'/>
      <backingStore/>
      <target dev='sda' bus='scsi'/>
      <shareable/>
      <alias name='ua-vol1'/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
      <newfangled mode='x'><inner/></newfangled>
    </disk>
    <controller type='scsi' index='0' model='virtio-scsi'/>
  </devices>
</domain>"""


def test_live_domain_reader_keeps_what_it_does_not_know() -> None:
    domain = DomainDisks.from_xml(LIVE_DOMAIN)
    assert domain.name == "guest-a"
    assert domain.uuid == "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
    assert domain.controllers == [("scsi", "virtio-scsi")]
    (disk,) = domain.disks
    assert disk.alias == Alias(name="ua-vol1")
    assert disk.shareable and disk.source is not None and disk.source.index == 1
    written = disk.to_xml()
    assert "<backingStore/>" in written and "<newfangled mode=\"x\">" in written
    assert "<inner/>" in written
    assert Disk.from_xml(written, strict=False) == disk


# ---- lenient keeps what it does not understand, with its meaning; strict refuses it -------------

def meaning(node: etree._Element) -> str:
    """What an element means, independent of layout: attributes by namespace URI, text exactly,
    comments kept, children of element-only content in any order (the writer puts declared
    parts in declared order), mixed content in document order."""
    if not isinstance(node.tag, str):
        return etree.tostring(node, with_tail=False, encoding="unicode")
    kids = list(node)
    attrs = "".join(f" {k}={v!r}" for k, v in sorted(node.attrib.items()))
    mixed = bool((node.text or "").strip()) or any((k.tail or "").strip() for k in kids)
    if not kids:
        body = node.text or ""
    elif mixed:
        body = (node.text or "") + "".join(meaning(k) + (k.tail or "") for k in kids)
    else:
        body = "".join(sorted(meaning(k) for k in kids))
    return f"<{node.tag}{attrs}>{body}</>"


def assert_lenient_keeps_meaning(xml: str) -> Disk:
    disk = Disk.from_xml(xml, strict=False)
    written = disk.to_xml()
    assert meaning(etree.fromstring(written)) == meaning(etree.fromstring(xml)), written
    again = Disk.from_xml(written, strict=False)
    assert again == disk and again.to_xml() == written  # a fixed point: nothing drifts
    return disk


KEEP = [
    "<disk xmlns:v='http://example.org/v' v:level='3' xml:lang='en'><driver name='qemu'/></disk>",
    "<disk><driver xmlns:v='http://example.org/v' v:a='1' name='qemu'/><target dev='sda'/>"
    "</disk>",
    "<disk><x-note>first line\n    second line\n  <b>  spaced  </b> tail</x-note></disk>",
    "<disk><x-deep><a><b>t</b></a><c/></x-deep></disk>",
    "<disk><transient shareBacking='yes'/><readonly v='1'/><shareable>x</shareable></disk>",
    "<disk><serial foo='1'>abc</serial><wwn>0x5000c50015ea71ac</wwn></disk>",
    "<disk><vendor>AB<!-- a comment -->CD</vendor></disk>",
    "<disk><!-- kept --><driver name='qemu'/><source file='/a'><!-- also kept --></source></disk>",
    "<disk><serial>a &amp; b &lt;c&gt; &#233;</serial></disk>",
    "<disk><x:meta xmlns:x='http://example.org/x' x:attr='1'><x:child/></x:meta></disk>",
]


@pytest.mark.parametrize("xml", KEEP)
def test_lenient_reading_keeps_the_meaning(xml: str) -> None:
    assert_lenient_keeps_meaning(xml)


def test_a_kept_marker_or_text_child_follows_its_field() -> None:
    disk = Disk.from_xml("<disk><transient shareBacking='yes'/><serial foo='1'>abc</serial>"
                         "</disk>", strict=False)
    assert disk.transient and disk.serial == "abc"
    disk.serial = "xyz"
    disk.transient = False
    assert disk.to_xml() == "<disk>\n  <serial>xyz</serial>\n</disk>"


@pytest.mark.parametrize("xml, message", [
    ("<disk><driver/>junk</disk>", "unexpected text 'junk'"),
    ("<disk><source file='/a'/>\n  stray <target dev='sda'/></disk>", "unexpected text 'stray'"),
    ("<disk><transient shareBacking='yes'/></disk>", "marker element must be empty"),
    ("<disk xmlns:v='http://example.org/v' v:a='1'/>", "undeclared attribute"),
])
def test_strict_reading_refuses_what_it_would_lose(xml: str, message: str) -> None:
    with pytest.raises(UndeclaredXML, match=message):
        Disk.from_xml(xml)


def test_stray_text_is_kept_by_lenient_reading() -> None:
    disk = Disk.from_xml("<disk><driver/>junk &amp; more</disk>", strict=False)
    assert "junk &amp; more" in disk.to_xml()


@pytest.mark.parametrize("encoding", ["ISO-8859-1", "latin-1", "UTF-16", "ascii"])
def test_the_xml_declaration_names_how_bytes_are_decoded(encoding: str) -> None:
    text = f"<?xml version='1.0' encoding='{encoding}'?>\n<disk><serial>caf\u00e9</serial></disk>"
    assert Disk.from_xml(text, strict=False).serial == "caf\u00e9"  # a str is already decoded
    if encoding != "ascii":
        assert Disk.from_xml(text.encode(encoding), strict=False).serial == "caf\u00e9"
    # strict would lose the declaration: it says so (see tests/fast/test_reader_lossless.py)
    with pytest.raises(UndeclaredXML, match=f"encoding '{encoding}' would be lost"):
        Disk.from_xml(text)


@pytest.mark.parametrize("value", [None, 3, ["<disk/>"], "\ud800<disk/>"])
def test_not_xml_text_is_a_typed_error(value: object) -> None:
    with pytest.raises(MalformedXML):
        Disk.from_xml(value)  # type: ignore[arg-type]


NAME = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"],
                                      exclude_characters="\x00\r"), max_size=15).filter(
    lambda t: all(c in "\t\n" or c >= " " for c in t) and "\ufffe" not in t and "\uffff" not in t)


@st.composite
def extra_part(draw: st.DrawFn) -> tuple[str, str]:
    """(where, what): an attribute, element, comment or marker extra to put into a disk."""
    kind = draw(st.sampled_from(["nsattr", "attr", "element", "mixed", "comment", "flagattr",
                                 "textattr"]))
    where = draw(st.sampled_from(["disk", "driver", "source", "target"]))
    if kind == "nsattr":
        return where, f" xmlns:p{draw(NAME)}='http://example.org/{draw(NAME)}'"
    if kind == "attr":
        return where, f" x-{draw(NAME)}={quoteattr(draw(TEXT))}"
    if kind == "element":
        return where, f"<x-{draw(NAME)} a={quoteattr(draw(TEXT))}>{escape(draw(TEXT))}</x-el>"
    if kind == "mixed":
        return where, (f"<x-mixed>{escape(draw(TEXT))}<b>{escape(draw(TEXT))}</b>"
                       f"{escape(draw(TEXT))}x</x-mixed>")
    if kind == "comment":
        return where, f"<!--{draw(TEXT).replace('-', '_')}-->"
    if kind == "flagattr":
        return "disk", f"<transient x={quoteattr(draw(TEXT))}/>"
    return "disk", f"<serial x={quoteattr(draw(TEXT))}>{escape(draw(TEXT)) or 's'}</serial>"


def _disk_with(extras: list[tuple[str, str]]) -> str:
    attrs: dict[str, str] = {"disk": "", "driver": "", "source": "", "target": ""}
    inner: dict[str, str] = {"disk": "", "driver": "", "source": "", "target": ""}
    seen: set[str] = set()
    for where, part in extras:
        if part.startswith(" xmlns:"):  # a declaration and one attribute in its namespace
            prefix = part.split("=")[0][len(" xmlns:"):]
            if (where, prefix) not in seen:
                seen.add((where, prefix))
                attrs[where] += part + f" {prefix}:{prefix}='1'"
        elif part.startswith(" "):
            name = part.split("=")[0]
            if (where, name) not in seen:
                seen.add((where, name))
                attrs[where] += part
        elif part.startswith(("<transient", "<serial")):
            if part[:7] not in seen:
                seen.add(part[:7])
                inner["disk"] += part
        else:
            inner[where] += part.replace("</x-el>", "</" + part[1:].split(" ")[0] + ">")
    return (f"<disk type='file'{attrs['disk']}><driver name='qemu'{attrs['driver']}>"
            f"{inner['driver']}</driver><source file='/srv/a.raw'{attrs['source']}>"
            f"{inner['source']}</source><target dev='sda'{attrs['target']}>{inner['target']}"
            f"</target>{inner['disk']}</disk>")


@settings(max_examples=150, deadline=None)
@given(extras=st.lists(extra_part(), max_size=6))
def test_generated_unknown_parts_keep_their_meaning(extras: list[tuple[str, str]]) -> None:
    xml = _disk_with(extras)
    assert_lenient_keeps_meaning(xml)
    try:
        strict = Disk.from_xml(xml)
    except UndeclaredXML:
        assert extras, "a disk of declared parts only reads strictly"
        return
    # Strict read it all, comments included (a comment it cannot keep is refused by name).
    assert meaning(etree.fromstring(xml)) == meaning(etree.fromstring(strict.to_xml()))


def test_elements_compare_and_show_as_dataclasses_would() -> None:
    lenient = Disk.from_xml("<disk type='file' device='disk' x='1'><target dev='vdb'/></disk>",
                            strict=False)
    plain = Disk(type="file", device="disk", target=Target(dev="vdb"))
    # every field compared, what was kept of the document included; the type too
    assert dataclasses.replace(lenient, unknown=None) == plain and lenient != plain
    assert Target(dev="vdb") != Alias(name="vdb") and plain != "disk"
    assert Target(dev="vdb") == Target(dev="vdb") and Target(dev="vdb") != Target(dev="vdc")
    # every field shown but what was kept; mutable, so not hashable
    assert repr(Target(dev="vdb")) == "Target(dev='vdb', bus=None, tray=None, removable=None)"
    assert "unknown" not in repr(lenient)
    with pytest.raises(TypeError):
        hash(plain)
