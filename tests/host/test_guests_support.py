"""Proof that testhosts.guests works against the real libvirtd: start, attach, qemu-io, cleanup."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import libvirt
import pytest
from lxml import etree

from testhosts import guests as g
from tests.support.volumes import disk_xml


@pytest.mark.hypervisor
def test_guests_start_and_cleanup(system_conn: libvirt.virConnect) -> None:
    with g.Guests(system_conn) as gs:
        persistent = gs.start("p")
        transient = gs.start("t", persistent=False)
        gone = gs.start("gone")
        assert gs.kvm == g.kvm_available()
        for dom in (persistent, transient, gone):
            assert dom.isActive()
            assert dom.name().startswith(g.NAME_PREFIX)
            root = etree.fromstring(dom.XMLDesc(0).encode())
            assert root.get("type") == ("kvm" if gs.kvm else "qemu")
        assert persistent.isPersistent() and not transient.isPersistent()
        assert len(set(gs.names)) == 3
        # A guest that vanished already must not break close().
        gone.destroy()
        gone.undefine()
        names = gs.names
    for name in names:
        with pytest.raises(libvirt.libvirtError) as err:
            system_conn.lookupByName(name)
        assert err.value.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN



@pytest.mark.hypervisor
def test_attach_write_share_readonly_detach(
    guests: g.Guests,
    events: g.DeviceEvents,
    raw_file: Path,
) -> None:
    writer = guests.start("writer")
    reader = guests.start("reader")

    rw_xml = disk_xml(raw_file, "ua-test1")
    writer.attachDeviceFlags(rw_xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    info = g.block_info(writer, "ua-test1")
    assert (info.ro, info.direct, info.writeback) == (False, True, True)
    assert info.file == str(raw_file)
    assert info.driver == "raw"

    out = g.write_pattern(writer, "ua-test1", 0x5A)
    assert "wrote 4096/4096 bytes at offset 0" in out
    assert g.read_pattern(writer, "ua-test1", 0x5A)
    assert not g.read_pattern(writer, "ua-test1", 0x11)
    g.write_pattern(writer, "ua-test1", 0xA5, offset=1 << 20, length=8192)
    assert g.read_pattern(writer, "ua-test1", 0xA5, offset=1 << 20, length=8192)
    # cache='none' is O_DIRECT, so the data is in the file already.
    with open(raw_file, "rb") as fh:
        assert fh.read(4096) == b"\x5a" * 4096

    ro_xml = disk_xml(raw_file, "ua-test2", readonly=True, shareable=True)
    reader.attachDeviceFlags(ro_xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    rinfo = g.block_info(reader, "ua-test2")
    assert rinfo.ro and rinfo.direct
    assert rinfo.file == str(raw_file)
    assert g.read_pattern(reader, "ua-test2", 0x5A)
    with pytest.raises(g.ReadOnlyWrite) as refused:
        g.write_pattern(reader, "ua-test2", 0x11)
    assert "Block node is read-only" in refused.value.output
    assert g.read_pattern(reader, "ua-test2", 0x5A)  # unchanged

    # The block node name works too, without -d.
    assert info.node_name
    assert g.read_pattern(writer, info.node_name, 0x5A, node=True)

    assert g.detach_and_wait(events, reader, ro_xml, "ua-test2") < 10
    assert g.detach_and_wait(events, writer, rw_xml, "ua-test1") < 10
    for dom, alias in ((reader, "ua-test2"), (writer, "ua-test1")):
        with pytest.raises(LookupError):
            g.block_info(dom, alias)
        assert alias not in dom.XMLDesc(0)



@pytest.mark.hypervisor
def test_qemu_io_errors(guests: g.Guests, raw_file: Path) -> None:
    dom = guests.start("err")
    out = g.qemu_io(dom, "ua-nosuch", "read 0 512")
    assert "not found" in out
    with pytest.raises(g.QemuIoError):
        g.read_pattern(dom, "ua-nosuch", 0)
    dom.attachDeviceFlags(disk_xml(raw_file, "ua-e"), libvirt.VIR_DOMAIN_AFFECT_LIVE)
    # Beyond the end of the 16 MiB disk: the read fails inside qemu-io.
    with pytest.raises(g.QemuIoError) as err:
        g.read_pattern(dom, "ua-e", 0, offset=32 << 20)
    assert "read failed" in err.value.output
    assert g.read_pattern(dom, "ua-e", 0)  # fresh sparse file reads zeroes
    # Output of consecutive calls does not leak into each other.
    assert g.qemu_io(dom, "ua-e", "length") == "16 MiB"



@pytest.mark.hypervisor
def test_loop_device_attached_as_block_disk(
    guests: g.Guests, events: g.DeviceEvents
) -> None:
    with g.LoopDevice(8 * 1024 * 1024) as loop:
        dev = loop.device
        assert dev is not None and loop.backing_file is not None
        assert Path(dev).is_block_device()
        assert loop.sysfs_backing_file == str(loop.backing_file)
        listed = subprocess.run(
            ["losetup", "-j", str(loop.backing_file)],
            check=True, capture_output=True, text=True,
        ).stdout
        assert listed.startswith(f"{dev}:")

        dom = guests.start("loop")
        xml = disk_xml(dev, "ua-loop", block=True)
        dom.attachDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        assert g.block_info(dom, "ua-loop").file == dev
        g.write_pattern(dom, "ua-loop", 0x3C, offset=4096)
        fd = os.open(dev, os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 4096) == b"\x3c" * 4096
        finally:
            os.close(fd)
        g.detach_and_wait(events, dom, xml, "ua-loop")

        loop.extend(16 * 1024 * 1024)
        with open(f"/sys/block/{Path(dev).name}/size") as fh:
            assert int(fh.read()) * 512 == 16 * 1024 * 1024
    assert loop.device is None
    # Exactly our device was released (it may be reused by others later).
    sysfs = Path("/sys/block", Path(dev).name, "loop", "backing_file")
    assert not sysfs.exists() or "vdloop-" not in sysfs.read_text()
