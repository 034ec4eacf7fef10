"""SELinux: a read-only attachment that is not shared gets the read-only context, and network
disks are not labelled at all (issue #20, item 5).

NBD is served by qemu-nbd on 127.0.0.1 inside the nested host, and QEMU-native iSCSI (QEMU's own
initiator, from Debian's qemu-block-extra) logs in to tgt on 127.0.0.1 (the fixture of
test_kernel_iscsi). RBD's rendering without per-disk labels is covered by the host's own tests.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator

import libvirt
import pytest
from lxml import etree

from testhosts.guests import ReadOnlyWrite, block_info, read_pattern, write_pattern
from tests.nested.conftest import qemu_pid, split_context
from tests.nested.selinux_support import (
    READONLY,
    data_file,
    device_label_in_namespace,
    file_label,
    no_guest_denials,
    process_label,
)
from tests.nested.test_kernel_iscsi import BLOCK, IQN, sessions, share_lun, tgt_lun  # noqa: F401
from tests.support.sharedio import writer_shares_with_reader
from tests.support.volumes import file_volume, local_volume
from virtdriver import LibvirtVolumeDriver

pytestmark = pytest.mark.lsm_selinux

NBD_PORT = 10809


def _fill(path: str, pattern: int, offset: int, length: int = 4096) -> None:
    """Write ``pattern`` into the data from the host, as a previous user of the volume did."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(bytes([pattern]) * length)
        fh.flush()


@pytest.mark.parametrize("kind", ["file", "block"])
def test_readonly_unshared_gets_readonly_context(kind, guests, volume_driver, loop_device,
                                                 audit_window) -> None:
    with data_file("vd-ro-") as path:
        dev = loop_device.device if kind == "block" else path
        info = (local_volume(dev, multiattach=False) if kind == "block"
                else file_volume(dev, multiattach=False))
        _fill(dev, 0x2B, 65536)
        a = guests.start("ro-a")
        volume_driver.attach_volume(info, a.name(), attach_mode="ro")
        alias = f"ua-{info['data']['volume_id']}"
        xml = a.XMLDesc(0)
        assert "<readonly/>" in xml and "<shareable/>" not in xml
        assert block_info(a, alias).ro
        pid = qemu_pid(a)
        found = device_label_in_namespace(pid, dev) if kind == "block" else file_label(dev)
        assert found == READONLY, found
        assert split_context(process_label(pid))[2] == "svirt_t"
        assert read_pattern(a, alias, 0x2B, offset=65536)
        with pytest.raises(ReadOnlyWrite):
            write_pattern(a, alias, 0x01, offset=65536)
        volume_driver.detach_volume(a.name(), info["data"]["volume_id"])
        no_guest_denials(audit_window)


@pytest.fixture
def nbd_export() -> Iterator[tuple[str, str]]:
    """qemu-nbd serving a raw file as export ``vd`` on 127.0.0.1 (shared by several clients)."""
    with data_file("vd-nbd-") as path:
        proc = subprocess.Popen(["qemu-nbd", "--persistent", "--shared=8", "--format=raw",
                                 "--bind=127.0.0.1", f"--port={NBD_PORT}", "--export-name=vd",
                                 "--cache=none", path],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            for _ in range(100):
                ss = subprocess.run(["ss", "-Htln", f"( sport = :{NBD_PORT} )"],
                                    capture_output=True, text=True).stdout
                if ss.strip() or proc.poll() is not None:
                    break
                time.sleep(0.1)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            yield path, "vd"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_nbd_is_not_labelled(guests, volume_driver, nbd_export, audit_window) -> None:
    path, export = nbd_export
    before = file_label(path)
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "nbd", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "host": "127.0.0.1", "port": NBD_PORT, "name": export}}
    a, b = guests.start("nbd-a"), guests.start("nbd-b")
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    alias = f"ua-{vid}"
    for dom in (a, b):
        for xml in (dom.XMLDesc(0), dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)):
            disks = etree.fromstring(xml.encode()).findall("./devices/disk[@type='network']")
            assert [d.find("source").get("protocol") for d in disks] == ["nbd"]
            assert disks[0].findall(".//seclabel") == []
        assert split_context(process_label(qemu_pid(dom)))[2] == "svirt_t"
    pattern, offset = writer_shares_with_reader(a, b, alias)
    # The guests' I/O went over the network, to the file qemu-nbd serves, whose label libvirt
    # never touched.
    with open(path, "rb") as fh:
        fh.seek(offset)
        assert fh.read(4096) == bytes([pattern]) * 4096
    assert file_label(path) == before
    volume_driver.detach_volume(a.name(), vid)
    volume_driver.detach_volume(b.name(), vid)
    no_guest_denials(audit_window)


def _network_disks(dom: libvirt.virDomain, protocol: str) -> None:
    """``dom``'s one network disk speaks ``protocol`` and carries no per-disk label, in its live
    and its stored definition."""
    for xml in (dom.XMLDesc(0), dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)):
        disks = etree.fromstring(xml.encode()).findall("./devices/disk[@type='network']")
        assert [d.find("source").get("protocol") for d in disks] == [protocol], xml
        assert disks[0].findall(".//seclabel") == [], xml


@pytest.mark.kernel_initiator  # tgt_lun loads iscsi_tcp and runs tgtd, as the kernel tests do
def test_native_iscsi_is_not_labelled(tgt_lun, guests, tmp_path, audit_window) -> None:
    """QEMU's own iSCSI initiator, rw in A and ro in B: no per-disk label, no kernel session,
    A's data reaches B and the target's file, whose label nothing touched; no denial."""
    before = file_label(str(tgt_lun))
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 native_iscsi=True, detach_timeout=60)
    try:
        a, b = guests.start("iscsi-a"), guests.start("iscsi-b")
        _, vid, alias = share_lun(driver, a, b)
        assert IQN not in sessions()  # QEMU's own logins, not the kernel's
        assert not block_info(a, alias).ro and block_info(b, alias).ro
        for dom in (a, b):
            _network_disks(dom, "iscsi")
            assert split_context(process_label(qemu_pid(dom)))[2] == "svirt_t"
        pattern, offset = writer_shares_with_reader(a, b, alias)
        with open(tgt_lun, "rb") as fh:  # over the network, to the file tgt serves
            fh.seek(offset)
            assert fh.read(BLOCK) == bytes([pattern]) * BLOCK
        assert file_label(str(tgt_lun)) == before
        driver.detach_volume(a.name(), vid)
        driver.detach_volume(b.name(), vid)
        assert driver.records.load(vid) is None
    finally:
        driver.close()
    no_guest_denials(audit_window)
