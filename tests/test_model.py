"""The disk model: exact round trips, schema validity, strictness and escaping."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from virtdriver.config import Address, Alias, BlockIO, Disk, DomainDisks, Driver, Element, Source, Target
from virtdriver.config.model import CHILD, CHILDREN, declared_fields
from virtdriver.errors import ConfigError, InvalidXMLValue, MalformedXML, UndeclaredXML

from .conftest import FIXTURES

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
