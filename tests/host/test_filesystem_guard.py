"""A second writer only on a cluster filesystem (#45, item 1), on real guests and loop devices.

The volume holds what ``mkfs`` made on the host; the guard reads it with blkid after the host
connect and before any guest gets the disk. Refusals leave the host as it was: no new disk, the
other guest's disk and the host connection in place.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from testhosts.guests import LoopDevice, block_info
from tests.support.volumes import dos_table, local_volume
from virtdriver.errors import SharedWriteRefused
from virtdriver.hypervisor.metadata import OVERRIDES_NS
from virtdriver.ops.audit import audit_host

pytestmark = pytest.mark.hypervisor

MIB = 1 << 20
MKFS = {"ext4": ["mkfs.ext4", "-q", "-F"], "xfs": ["mkfs.xfs", "-q", "-f"],
        "gfs2": ["mkfs.gfs2", "-O", "-q", "-p", "lock_nolock", "-j", "2"]}


@pytest.fixture
def volume(request: pytest.FixtureRequest) -> Iterator[tuple[LoopDevice, dict]]:
    """A multiattach loop-device volume holding the filesystem the test names (or nothing)."""
    kind = getattr(request, "param", "ext4")
    with LoopDevice(320 * MIB) as loop:
        assert loop.device is not None
        if kind in MKFS:
            subprocess.run([*MKFS[kind], loop.device], check=True, capture_output=True)
        elif kind != "raw":
            MADE[kind](loop.device)
        yield loop, local_volume(loop.device, multiattach=True)


def _ambivalent(device: str) -> None:
    """An intact ext4 (e2fsck clean) under a stale FAT16 boot sector: blkid -p exits 8."""
    subprocess.run([*MKFS["ext4"], device], check=True, capture_output=True)
    sector = bytearray(SECTOR)  # what mkfs.vfat writes first: jump, BPB, FAT16 label, 55AA
    sector[0:11] = b"\xeb\x3c\x90MSDOS5.0"
    struct.pack_into("<HBHBHHBHHHII", sector, 11, 512, 4, 4, 2, 512, 0, 0xF8, 64, 32, 2, 0,
                     131072)
    struct.pack_into("<BBBI", sector, 36, 0x80, 0, 0x29, 0x12345678)
    sector[43:62] = b"NO NAME    FAT16   "
    sector[510:512] = b"\x55\xaa"
    with open(device, "r+b") as fh:
        fh.write(sector)
    assert subprocess.run(["e2fsck", "-n", "-f", device], capture_output=True).returncode == 0
    assert subprocess.run(["blkid", "-p", device], capture_output=True).returncode == 8


def _swap(device: str) -> None:
    subprocess.run(["mkswap", device], check=True, capture_output=True)


def _nested(device: str) -> None:
    """A DOS table whose partition 1 holds a DOS table whose partition 1 holds an ext4."""
    dos_table(device, 0, 2048, 300 * 2048)
    dos_table(device, 2048 * SECTOR, 2048, 200 * 2048)
    subprocess.run([*MKFS["ext4"], "-E", f"offset={4096 * SECTOR}", device, "100M"],
                   check=True, capture_output=True)
    assert subprocess.run(["blkid", "-p", "-o", "udev", device], capture_output=True,
                          text=True).stdout.strip() == "ID_PART_TABLE_TYPE=dos"


SECTOR = 512
MADE = {"ambivalent": _ambivalent, "swap": _swap, "nested": _nested}


def _disks(volume_driver, name: str) -> list[str]:
    return [a.volumeId for a in volume_driver.list_attachments(name)]


def test_a_second_writer_of_ext4_is_refused_and_nothing_changes(guests, volume_driver,
                                                                volume) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    loop, info = volume
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    with pytest.raises(SharedWriteRefused, match=rf"volume {vid} holds ext4.*{a.name()}, "
                                                 rf"{b.name()} would.*--allow-shared-write"):
        volume_driver.attach_volume(info, b.name(), attach_mode="rw")
    assert _disks(volume_driver, b.name()) == []
    assert block_info(a, f"ua-{vid}").file == loop.device  # A keeps its disk
    assert volume_driver.records.connected() == [vid]  # and the host its connection


@pytest.mark.parametrize("volume", ["xfs"], indirect=True)
def test_two_writers_at_once_are_refused_before_either_gets_the_disk(guests, volume_driver,
                                                                      volume) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    with pytest.raises(SharedWriteRefused, match="holds xfs"):
        volume_driver.attach_volume_to_many(info, [a.name(), b.name()], attach_mode="rw")
    assert _disks(volume_driver, a.name()) == _disks(volume_driver, b.name()) == []
    assert volume_driver.records.connected() == []  # this call's connect released again


@pytest.mark.parametrize("volume", ["gfs2", "raw"], indirect=True)
def test_a_cluster_filesystem_or_raw_data_takes_two_writers(guests, volume_driver,
                                                            volume) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    made = volume_driver.attach_volume_to_many(info, [a.name(), b.name()], attach_mode="rw")
    assert [m.attach_mode for m in made] == ["rw", "rw"]
    report = audit_host(volume_driver.compute_host.connection.get(), volume_driver.state_dir)
    assert not [d for _, d in report.dangers if d.kind == "filesystem"]


def test_a_reader_beside_the_writer_is_allowed_and_warned_whoever_came_first(
        guests, volume_driver, volume, caplog: pytest.LogCaptureFixture) -> None:
    a, b, c = guests.start("fs-a"), guests.start("fs-b"), guests.start("fs-c")
    _, info = volume
    with caplog.at_level(logging.WARNING, logger="virtdriver"):
        volume_driver.attach_volume(info, b.name(), attach_mode="ro")
        assert not caplog.records  # alone: nothing to say
        volume_driver.attach_volume(info, a.name(), attach_mode="rw")  # the writer second
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "ext4" in said[0]
    assert f"{b.name()} reads it while {a.name()} writes" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="virtdriver"):
        volume_driver.attach_volume(info, c.name(), attach_mode="ro")  # a reader after it
    readers = ", ".join(sorted([b.name(), c.name()]))
    assert any(f"{readers} read it while {a.name()} writes" in r.getMessage()
               for r in caplog.records)
    d = guests.start("fs-d")
    with pytest.raises(SharedWriteRefused):  # and a second writer is still refused
        volume_driver.attach_volume(info, d.name(), attach_mode="rw")


def test_the_override_is_noted_and_audit_names_who_chose_it(guests, volume_driver, volume,
                                                            tmp_path: Path) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    made = volume_driver.attach_volume(info, b.name(), attach_mode="rw", allow_shared_write=True)
    assert made.attach_mode == "rw" and made.shareable
    report = audit_host(volume_driver.compute_host.connection.get(), volume_driver.state_dir)
    found = [d.message for v, d in report.dangers if d.kind == "filesystem" and v.volume == vid]
    assert len(found) == 1
    assert f"written by {a.name()}, {b.name()} ({b.name()} by --allow-shared-write)" in found[0]
    assert "ext4" in found[0]
    # the note lives in the guest's definition too: a restart keeps it
    cli = subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                          "--state-dir", str(volume_driver.state_dir), "audit", "--json"],
                         capture_output=True, text=True, check=False, timeout=120)
    kinds = [d["kind"] for v in json.loads(cli.stdout)["volumes"] if v["volume"] == vid
             for d in v["dangers"]]
    assert "filesystem" in kinds, cli.stderr
    volume_driver.detach_volume(b.name(), vid)  # the note goes with the disk
    for flag in (libvirt.VIR_DOMAIN_AFFECT_LIVE, libvirt.VIR_DOMAIN_AFFECT_CONFIG):
        with pytest.raises(libvirt.libvirtError, match="metadata not found"):
            b.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, OVERRIDES_NS, flag)


def test_the_cli_refuses_with_exit_3_and_one_line(guests, volume_driver, volume,
                                                  tmp_path: Path) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    doc = tmp_path / "volume.json"
    doc.write_text(json.dumps(info))
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")

    def attach(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                               "--state-dir", str(volume_driver.state_dir), "attach", b.name(),
                               str(doc), *extra], capture_output=True, text=True, check=False,
                              timeout=120)

    refused = attach()
    assert refused.returncode == 3, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds ext4" in lines[0] and "--allow-shared-write" in lines[0]
    allowed = attach("--allow-shared-write")
    assert allowed.returncode == 0, allowed.stderr
    assert "--allow-shared-write" in allowed.stderr  # the warning, one line


def test_a_network_volume_qemu_opens_itself_is_said_not_checked(
        guests, backends, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """NBD (as rbd and QEMU's iSCSI): the host never sees the data, so it says so, once."""
    import uuid

    from tests.support.backends import need
    from virtdriver import LibvirtVolumeDriver

    need(backends, "nbd")
    a, b = guests.start("fs-a"), guests.start("fs-b")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "nbd", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "host": backends["VD_NBD_HOST"],
                     "port": int(backends["VD_NBD_PORT"]), "name": backends["VD_NBD_EXPORT"]}}
    try:
        with caplog.at_level(logging.WARNING, logger="virtdriver"):
            driver.attach_volume_to_many(info, [a.name(), b.name()], attach_mode="rw")
        said = [r.getMessage() for r in caplog.records]
        assert said == [f"volume {vid} is shared with a writer, and what it holds is not "
                        "checked: QEMU opens it over the network itself, which this host "
                        "cannot read"]
        for dom in (a, b):
            driver.detach_volume(dom.name(), vid)
    finally:
        driver.close()


def _cli(volume_driver, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                           "--state-dir", str(volume_driver.state_dir), *args],
                          capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.parametrize(("volume", "held"), [
    ("ambivalent", "holds vfat and ext4"), ("swap", "holds swap"),
    ("nested", "holds ext4 (partition 1, partition 1)")], indirect=["volume"])
def test_every_signature_counts_for_a_second_writer(guests, volume_driver, volume, held: str,
                                                    tmp_path: Path) -> None:
    """Ambivalent (ext4 under a stale FAT sector), swap, an ext4 in a nested table: refused
    through the API and the CLI (exit 3, one line naming the override); allowed with it."""
    a, b, c = guests.start("fs-a"), guests.start("fs-b"), guests.start("fs-c")
    _, info = volume
    doc = tmp_path / "volume.json"
    doc.write_text(json.dumps(info))
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    with pytest.raises(SharedWriteRefused, match=rf"{re.escape(held)}.*--allow-shared-write"):
        volume_driver.attach_volume(info, b.name(), attach_mode="rw")
    refused = _cli(volume_driver, "attach", c.name(), str(doc))
    assert refused.returncode == 3, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and held in lines[0] and "--allow-shared-write" in lines[0]
    assert _disks(volume_driver, b.name()) == _disks(volume_driver, c.name()) == []
    allowed = _cli(volume_driver, "attach", c.name(), str(doc), "--allow-shared-write")
    assert allowed.returncode == 0, allowed.stderr
    made = volume_driver.attach_volume(info, b.name(), attach_mode="rw", allow_shared_write=True)
    assert made.attach_mode == "rw"


def test_a_probe_that_cannot_decide_refuses_a_second_writer(
        guests, volume_driver, volume, monkeypatch: pytest.MonkeyPatch) -> None:
    """blkid that does not answer in time (its real process, given no time): refused, naming
    why and the override; the override lets it through."""
    from virtdriver.hypervisor import signatures

    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    monkeypatch.setattr(signatures, "PROBE_TIMEOUT", 1e-6)
    with pytest.raises(SharedWriteRefused, match=r"could not be decided \(.*could not be read: "
                                                 r"blkid: .*timed out.*--allow-shared-write"):
        volume_driver.attach_volume(info, b.name(), attach_mode="rw")
    made = volume_driver.attach_volume(info, b.name(), attach_mode="rw", allow_shared_write=True)
    assert made.attach_mode == "rw"


@pytest.mark.parametrize("order", ["reader first", "reader between", "reader last"])
def test_a_reader_is_never_refused_beside_writers_whatever_the_order(
        guests, volume_driver, volume, order: str, tmp_path: Path) -> None:
    """Two writers (the second by the override) and a reader: the reader gets the disk with a
    warning whenever it comes, through the API, attach-many and the CLI."""
    a, b = guests.start("fs-a"), guests.start("fs-b")
    r1, r2, r3 = guests.start("fs-r1"), guests.start("fs-r2"), guests.start("fs-r3")
    _, info = volume
    doc = tmp_path / "volume.json"
    doc.write_text(json.dumps(info))
    vid = info["data"]["volume_id"]

    def readers() -> None:
        volume_driver.attach_volume(info, r1.name(), attach_mode="ro")
        volume_driver.attach_volume_to_many(info, [r2.name()], attach_mode="ro")
        cli = _cli(volume_driver, "attach", r3.name(), str(doc), "--attach-mode", "ro")
        assert cli.returncode == 0, cli.stderr

    steps = [lambda: volume_driver.attach_volume(info, a.name(), attach_mode="rw"),
             lambda: volume_driver.attach_volume(info, b.name(), attach_mode="rw",
                                                 allow_shared_write=True)]
    steps.insert({"reader first": 0, "reader between": 1, "reader last": 2}[order], readers)
    for step in steps:
        step()
    for dom in (r1, r2, r3):
        assert _disks(volume_driver, dom.name()) == [vid]
        assert block_info(dom, f"ua-{vid}").ro
    c = guests.start("fs-c")
    with pytest.raises(SharedWriteRefused):  # a third writer without the override still is not
        volume_driver.attach_volume(info, c.name(), attach_mode="rw")


def _disk_xml(dom: libvirt.virDomain, alias: str) -> str:
    """The definition's ``<disk>`` with user alias ``alias``, as libvirt gives it."""
    from lxml import etree

    root = etree.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    (disk,) = root.xpath(f"devices/disk[alias/@name='{alias}']")
    return etree.tostring(disk, encoding="unicode")


def _unplug_behind_virtdriver(dom: libvirt.virDomain, alias: str, events, flags: int) -> None:
    """What ``virsh detach-device`` does: libvirt alone, no virtdriver."""
    dom.detachDeviceFlags(_disk_xml(dom, alias), flags)
    events.wait_removed(dom, alias)


def _override_named(volume_driver, vid: str) -> str:
    report = audit_host(volume_driver.compute_host.connection.get(), volume_driver.state_dir)
    (found,) = [d.message for v, d in report.dangers if d.kind == "filesystem" and v.volume == vid]
    return found


def test_an_override_note_is_not_taken_by_the_next_attachment(guests, volume_driver, volume,
                                                              events) -> None:
    """B writes by the override; its disk is detached behind virtdriver's back (live and
    defined), B attaches the volume again as its only writer without the flag, then A by the
    override: audit names A only."""
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="rw", allow_shared_write=True)
    assert f"({b.name()} by --allow-shared-write)" in _override_named(volume_driver, vid)
    _unplug_behind_virtdriver(b, f"ua-{vid}", events,
                              libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    volume_driver.detach_volume(a.name(), vid)
    volume_driver.attach_volume(info, b.name(), attach_mode="rw")  # alone: no flag needed
    volume_driver.attach_volume(info, a.name(), attach_mode="rw", allow_shared_write=True)
    said = _override_named(volume_driver, vid)
    assert f"({a.name()} by --allow-shared-write)" in said, said


def test_an_override_note_is_not_taken_by_a_disk_plugged_again_outside_virtdriver(
        guests, volume_driver, volume, events) -> None:
    """The disk B wrote by the override is unplugged and plugged again with libvirt alone (same
    alias, same source, a new attachment): audit no longer says B chose to write."""
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="rw", allow_shared_write=True)
    disk = _disk_xml(b, f"ua-{vid}")
    _unplug_behind_virtdriver(b, f"ua-{vid}", events, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    b.attachDeviceFlags(disk, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    said = _override_named(volume_driver, vid)
    assert "(not by virtdriver's override)" in said, said


def test_in_a_storm_readers_and_override_writers_join_and_a_plain_writer_does_not(
        guests, volume_driver, volume) -> None:
    """Two writers in place (one by the override); then at once three readers, a writer by the
    override and a plain writer: each reader and the override get the disk, the plain writer
    alone is refused, whatever order the storm takes."""
    from concurrent.futures import ThreadPoolExecutor

    first, second = guests.start("fs-w1"), guests.start("fs-w2")
    readers = [guests.start(f"fs-r{n}") for n in range(3)]
    override, plain = guests.start("fs-o"), guests.start("fs-p")
    _, info = volume
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, first.name(), attach_mode="rw")
    volume_driver.attach_volume(info, second.name(), attach_mode="rw", allow_shared_write=True)
    asks = [(dom, "ro", False) for dom in readers] + [(override, "rw", True),
                                                      (plain, "rw", False)]
    with ThreadPoolExecutor(len(asks)) as pool:
        futures = {dom.name(): pool.submit(volume_driver.attach_volume, info, dom.name(),
                                           attach_mode=mode, allow_shared_write=allowed)
                   for dom, mode, allowed in asks}
    for dom in [*readers, override]:
        assert futures[dom.name()].result().volumeId == vid
    assert isinstance(futures[plain.name()].exception(), SharedWriteRefused)
    assert _disks(volume_driver, plain.name()) == []
