"""SELinux: the same data attached UNSHARED to a second guest (issue #20, item 3).

Guest A has a volume that is not multiattach, read-write. A second guest B asks for the same data
read-write and read-only:

* through virtdriver (same volume id, and the same data under another volume id): refused with
  VolumeInUse before libvirt is asked, so the label is unchanged and A still writes;
* forced around virtdriver with ``virsh attach-device`` (what libvirt does alone): for a file,
  read-write is refused by libvirt ("Setting different SELinux label"); read-only relabels A's
  data to the read-only context, QEMU then refuses the attach, the label is not restored, and
  A's own writes fail. For a block device libvirt labels the node inside each QEMU's private /dev,
  so a second read-write attach succeeds: only virtdriver's refusal stands in the way.
"""

from __future__ import annotations

import subprocess

import libvirt
import pytest

from testhosts.guests import QemuIoError, ReadOnlyWrite, read_pattern, write_pattern
from tests.nested.conftest import qemu_pid, split_context
from tests.nested.selinux_support import (
    READONLY,
    data_file,
    device_label_in_namespace,
    file_label,
    level_of,
    no_guest_denials,
    process_label,
)
from tests.support.volumes import disk_xml, file_volume, local_volume
from virtdriver.errors import VolumeInUse

pytestmark = pytest.mark.lsm_selinux


def virsh_attach(dom: libvirt.virDomain, xml: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / f"disk-{dom.name()}.xml"
    path.write_text(xml)
    return subprocess.run(["virsh", "-c", "qemu:///system", "attach-device", dom.name(),
                           str(path), "--live"], capture_output=True, text=True, timeout=120)


def refused_by_virtdriver(driver, info: dict, a, b, label, alias: str) -> None:
    """B asks for A's data rw and ro, under A's volume id and another one: all refused, B's
    definition and the data's label untouched, A still writes and reads."""
    before_label = label()
    before_b = (b.XMLDesc(0), b.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    other_id = dict(info, serial="other-" + info["serial"],
                    data=dict(info["data"], volume_id="other-" + info["data"]["volume_id"]))
    for asked in (info, other_id):
        for mode in ("rw", "ro"):
            with pytest.raises(VolumeInUse) as refused:
                driver.attach_volume(asked, b.name(), attach_mode=mode)
            assert a.name() in str(refused.value), str(refused.value)
            assert label() == before_label, (asked["data"]["volume_id"], mode)
    assert (b.XMLDesc(0), b.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)) == before_b
    write_pattern(a, alias, 0x5A, offset=8192)
    assert read_pattern(a, alias, 0x5A, offset=8192)


def test_unshared_file_second_guest(guests, volume_driver, audit_window, tmp_path) -> None:
    with data_file("vd-unshared-") as path:
        a, b = guests.start("un-a"), guests.start("un-b")
        info = file_volume(path, multiattach=False)
        alias = f"ua-{info['data']['volume_id']}"
        volume_driver.attach_volume(info, a.name(), attach_mode="rw")

        # A's private label: svirt_image_t with A's own MCS pair, as A's QEMU runs.
        a_level = level_of(process_label(qemu_pid(a)))
        _, _, typ, level = split_context(file_label(path))
        assert (typ, level) == ("svirt_image_t", a_level), file_label(path)
        write_pattern(a, alias, 0x33)

        refused_by_virtdriver(volume_driver, info, a, b, lambda: file_label(path), alias)
        no_guest_denials(audit_window)

        # Around virtdriver, read-write: libvirt refuses, the label stays A's.
        rw = virsh_attach(b, disk_xml(path, "ua-forced-rw", target="sdb"), tmp_path)
        assert rw.returncode != 0
        assert "Setting different SELinux label" in rw.stderr, rw.stderr
        assert level_of(file_label(path)) == a_level
        write_pattern(a, alias, 0x44, offset=4096)

        # Around virtdriver, read-only: the data is relabelled read-only for B, QEMU refuses the
        # attach (A holds the write lock), the label is not restored, and A's writes now fail.
        ro = virsh_attach(b, disk_xml(path, "ua-forced-ro", target="sdc", readonly=True),
                          tmp_path)
        assert ro.returncode != 0, "libvirt attached A's data read-only to B"
        assert "ua-forced-ro" not in b.XMLDesc(0)
        assert file_label(path) == READONLY, file_label(path)
        with pytest.raises(QemuIoError) as failed:
            write_pattern(a, alias, 0x55, offset=4096)
        assert not isinstance(failed.value, ReadOnlyWrite)  # not QEMU's refusal: the label's
        assert "Permission denied" in failed.value.output, failed.value.output


def test_unshared_block_device_second_guest(guests, volume_driver, loop_device, audit_window,
                                            tmp_path) -> None:
    dev = loop_device.device
    a, b = guests.start("unb-a"), guests.start("unb-b")
    info = local_volume(dev, multiattach=False)
    alias = f"ua-{info['data']['volume_id']}"
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    pid_a = qemu_pid(a)
    a_level = level_of(process_label(pid_a))
    _, _, typ, level = split_context(device_label_in_namespace(pid_a, dev))
    assert (typ, level) == ("svirt_image_t", a_level)

    refused_by_virtdriver(volume_driver, info, a, b,
                          lambda: device_label_in_namespace(pid_a, dev), alias)
    no_guest_denials(audit_window)

    # Around virtdriver: libvirt labels the node in B's own /dev, so B gets it read-write too,
    # and both QEMUs write the same device (no label conflict, no image lock across them).
    forced = virsh_attach(b, disk_xml(dev, "ua-forced", target="sdb", block=True), tmp_path)
    assert forced.returncode == 0, forced.stderr
    pid_b = qemu_pid(b)
    assert level_of(device_label_in_namespace(pid_b, dev)) == level_of(process_label(pid_b))
    assert level_of(device_label_in_namespace(pid_a, dev)) == a_level
    write_pattern(b, "ua-forced", 0x66, offset=12288)
    write_pattern(a, alias, 0x77, offset=12288)
    assert read_pattern(b, "ua-forced", 0x77, offset=12288)
