"""Multi-create fan-out, swap keeping the attach mode, and online extend, on real guests."""

from __future__ import annotations

import subprocess

import libvirt
import pytest

from testhosts.guests import LoopDevice, block_info, read_pattern, write_pattern
from tests.support.volumes import file_volume, local_volume
from virtdriver.errors import (
    AttachFailed,
    AttachRolledBack,
    ExtendRefused,
    MultiattachNotSupported,
    NotAttached,
    VolumeInUse,
)

pytestmark = pytest.mark.hypervisor


@pytest.fixture
def connects(mocker):
    """A spy on os-brick's LOCAL connector connect (calls go through)."""
    from os_brick.initiator.connectors.local import LocalConnector

    return mocker.spy(LocalConnector, "connect_volume")


def test_fan_out_connects_once_and_attaches_everywhere(guests, volume_driver, loop_device,
                                                       connects) -> None:
    doms = [guests.start(f"f{i}") for i in range(4)]
    info = local_volume(loop_device.device, multiattach=True)
    alias = f"ua-{info['data']['volume_id']}"
    seen: list[str] = []
    modes = {doms[0].name(): "rw", doms[1].name(): "ro", doms[2].name(): "ro",
             doms[3].name(): "ro"}
    result = volume_driver.attach_volume_to_many(
        info, [d.name() for d in doms], attach_mode=modes,
        progress=lambda name, outcome: seen.append(name))
    assert connects.call_count == 1
    assert [a.server_name for a in result] == [d.name() for d in doms]
    assert [a.attach_mode for a in result] == ["rw", "ro", "ro", "ro"]
    assert sorted(seen) == sorted(d.name() for d in doms)
    write_pattern(doms[0], alias, 0x42)
    for dom in doms[1:]:
        assert block_info(dom, alias).ro and read_pattern(dom, alias, 0x42)


def test_fan_out_refuses_a_non_multiattach_volume(guests, volume_driver, loop_device,
                                                  connects) -> None:
    doms = [guests.start(f"f{i}") for i in range(2)]
    info = local_volume(loop_device.device, multiattach=False)
    with pytest.raises(MultiattachNotSupported, match="not multiattach"):
        volume_driver.attach_volume_to_many(info, [d.name() for d in doms])
    assert connects.call_count == 0
    assert all(volume_driver.list_attachments(d.name()) == [] for d in doms)


def test_fan_out_refuses_one_guest_named_twice(guests, volume_driver, loop_device,
                                               connects) -> None:
    a, b = guests.start("f0"), guests.start("f1")
    info = local_volume(loop_device.device, multiattach=True)
    with pytest.raises(AttachFailed, match="named twice"):
        volume_driver.attach_volume_to_many(info, [a.name(), b.name(), a.UUIDString()])
    assert connects.call_count == 0
    assert all(volume_driver.list_attachments(d.name()) == [] for d in (a, b))


def test_fan_out_is_all_or_nothing(guests, volume_driver, loop_device, system_conn) -> None:
    from testhosts.guests import guest_xml, kvm_available

    doms = [guests.start(f"f{i}") for i in range(2)]
    # A third guest without a SCSI controller: its disk goes on virtio, and QEMU refuses to
    # hot-plug that into this ACPI-less machine, for real.
    xml = guest_xml(guests.unique_name("noscsi"), kvm=kvm_available()).replace(
        "<controller type='scsi' index='0' model='virtio-scsi'/>", "")
    odd = system_conn.createXML(xml, 0)
    try:
        info = local_volume(loop_device.device, multiattach=True)
        names = [doms[0].name(), odd.name(), doms[1].name()]
        heard: dict[str, object] = {}
        with pytest.raises(AttachFailed, match=rf"failed at {odd.name()} .*hotplug.*attachments "
                                               "made were undone"):
            volume_driver.attach_volume_to_many(info, names, progress=heard.__setitem__)
        # Each guest once: the one that failed with its own error, the others "rolled back".
        assert set(heard) == set(names)
        assert not isinstance(heard[odd.name()], AttachRolledBack)
        assert "hotplug" in str(heard[odd.name()])
        for dom in doms:
            assert isinstance(heard[dom.name()], AttachRolledBack)
            assert str(heard[dom.name()]) == (f"{dom.name()} took the disk; rolled back because "
                                              f"the attach failed at {odd.name()}")
        for dom in [*doms, odd]:
            assert volume_driver.list_attachments(dom.name()) == []
            assert info["data"]["volume_id"] not in dom.XMLDesc(0)
        assert volume_driver.records.connected() == []
    finally:
        odd.destroy()


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_swap_keeps_device_and_attach_mode_and_data(guests, volume_driver, mode) -> None:
    dom = guests.start("swap")
    with LoopDevice(32 << 20) as old_dev, LoopDevice(32 << 20) as new_dev:
        old = local_volume(old_dev.device, multiattach=False)
        new = local_volume(new_dev.device, multiattach=False)
        before = volume_driver.attach_volume(old, dom.name(), attach_mode="rw")
        write_pattern(dom, f"ua-{old['data']['volume_id']}", 0x6B, offset=8192)
        if mode == "ro":  # re-attach read-only to check the mode survives the swap
            volume_driver.detach_volume(dom.name(), old["data"]["volume_id"])
            before = volume_driver.attach_volume(old, dom.name(), attach_mode="ro")
        after = volume_driver.swap_volume(dom.name(), old, new)
        assert (after.volumeId, after.device, after.attach_mode) == (
            new["data"]["volume_id"], before.device, mode)
        assert after.source == new_dev.device
        device_alias = f"ua-{old['data']['volume_id']}"  # the guest device keeps its alias
        info = block_info(dom, device_alias)
        assert info.file == new_dev.device and info.ro is (mode == "ro")
        assert read_pattern(dom, device_alias, 0x6B, offset=8192)
        with open(new_dev.device, "rb") as fh:  # the bytes really are on the new volume
            fh.seek(8192)
            assert fh.read(4096) == b"\x6b" * 4096
        assert volume_driver.records.connected() == [new["data"]["volume_id"]]
        assert old_dev.device not in dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        # The old volume is free again, and the new one detaches by its own id.
        assert volume_driver.volume_users(old["data"]["volume_id"]) == []
        volume_driver.detach_volume(dom.name(), new["data"]["volume_id"])
        assert volume_driver.list_attachments(dom.name()) == []
        assert volume_driver.records.connected() == []


def test_swap_from_a_volume_written_by_another_guest_is_refused(guests, volume_driver,
                                                                loop_device) -> None:
    a, b = guests.start("a"), guests.start("b")
    old = local_volume(loop_device.device, multiattach=True)
    volume_driver.attach_volume(old, a.name(), attach_mode="rw")
    volume_driver.attach_volume(old, b.name(), attach_mode="ro")
    with LoopDevice(16 << 20) as new_dev:
        new = local_volume(new_dev.device, multiattach=False)
        with pytest.raises(VolumeInUse, match="attached read-write to"):
            volume_driver.swap_volume(b.name(), old, new)
        assert [x.volumeId for x in volume_driver.list_attachments(b.name())] == [
            old["data"]["volume_id"]]
        with pytest.raises(NotAttached):
            volume_driver.swap_volume(b.name(), new, old)


def test_swap_on_a_shut_off_guest_changes_its_definition(guests, volume_driver,
                                                         tmp_path) -> None:
    dom = guests.start("off")
    dom.destroy()
    paths = []
    for name in ("old.raw", "new.raw"):
        paths.append(tmp_path / name)
        subprocess.run(["truncate", "-s", "4M", str(paths[-1])], check=True)
    old = file_volume(str(paths[0]), multiattach=False)
    new = file_volume(str(paths[1]), multiattach=False)
    volume_driver.attach_volume(old, dom.name(), attach_mode="ro")
    after = volume_driver.swap_volume(dom.name(), old, new)
    assert after.attach_mode == "ro" and after.source == str(paths[1])
    assert str(paths[0]) not in dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)


def test_online_extend_grows_what_qemu_reports(guests, volume_driver) -> None:
    dom = guests.start("grow")
    with LoopDevice(16 << 20) as loop:
        info = local_volume(loop.device, multiattach=False)
        att = volume_driver.attach_volume(info, dom.name())
        assert dom.blockInfo(att.target_dev)[0] == 16 << 20
        with pytest.raises(ExtendRefused, match="extend it on the storage side first"):
            volume_driver.extend_volume(dom.name(), info, 32 << 20)
        loop.extend(32 << 20)  # the storage grows (truncate + losetup -c)
        assert volume_driver.extend_volume(dom.name(), info, 32 << 20) == 32 << 20
        assert dom.blockInfo(att.target_dev)[0] == 32 << 20
        with pytest.raises(ExtendRefused, match="shrinking"):
            volume_driver.extend_volume(dom.name(), info, 8 << 20)
        loop.extend(48 << 20)  # a size below what the host sees: refused, both sizes named
        with pytest.raises(ExtendRefused, match=r"at 48\.0 MiB .* more than the 40\.0 MiB"):
            volume_driver.extend_volume(dom.name(), info, 40 << 20)
        assert dom.blockInfo(att.target_dev)[0] == 32 << 20


def test_extend_reaches_every_guest_rw_and_ro(guests, volume_driver) -> None:
    """A volume rw in A, ro in B and in C (shut off): one extend on the host, every QEMU shows
    the new size; B's read-only node was opened anew (libvirt refuses to resize it) and B reads
    what A wrote beyond the old end, and still cannot write."""
    from testhosts.guests import ReadOnlyWrite, query_block

    a, b, c = guests.start("ga"), guests.start("gb"), guests.start("gc")
    with LoopDevice(16 << 20) as loop:
        info = local_volume(loop.device, multiattach=True)
        vid, alias = info["data"]["volume_id"], f"ua-{info['data']['volume_id']}"
        volume_driver.attach_volume(info, a.name(), attach_mode="rw")
        volume_driver.attach_volume(info, b.name(), attach_mode="ro")
        volume_driver.attach_volume(info, c.name(), attach_mode="ro")
        c.destroy()
        loop.extend(48 << 20)
        result = volume_driver.extend_volume_on_host(info)  # the size os-brick now sees
        assert result.complete and result.size == result.host_size == 48 << 20
        seen = {g.guest: g for g in result.guests}
        assert (seen[a.name()].how, seen[a.name()].guest_notified) == ("resized", True)
        assert (seen[b.name()].how, seen[b.name()].guest_notified) == ("reopened", False)
        assert (seen[c.name()].how, seen[c.name()].running) == ("at start", False)
        for dom in (a, b):
            sizes = [e["inserted"]["image"]["virtual-size"] for e in query_block(dom)
                     if e.get("qdev") == alias]
            assert sizes == [48 << 20] and dom.blockInfo("sda")[0] == 48 << 20
        write_pattern(a, alias, 0x5C, offset=40 << 20)
        assert read_pattern(b, alias, 0x5C, offset=40 << 20)
        with pytest.raises(ReadOnlyWrite):
            write_pattern(b, alias, 0x11)
        again = volume_driver.extend_volume_on_host(info, instance=b.name())
        assert [g.how for g in again.guests] == ["unchanged"]
        # libvirt still knows its nodes: detach is clean and leaves nothing in QEMU.
        volume_driver.detach_volume(b.name(), vid)
        assert [e for e in query_block(b) if e.get("inserted")] == []
        volume_driver.detach_volume(a.name(), vid)
        assert volume_driver.records.connected() == [vid]  # C's definition still has it


def test_extend_one_read_only_guest_through_the_compute_api(guests, volume_driver) -> None:
    dom = guests.start("ro")
    with LoopDevice(16 << 20) as loop:
        info = local_volume(loop.device, multiattach=True)
        volume_driver.attach_volume(info, dom.name(), attach_mode="ro")
        loop.extend(32 << 20)
        assert volume_driver.extend_volume(dom.name(), info, 32 << 20) == 32 << 20
        assert dom.blockInfo("sda")[0] == 32 << 20
        volume_driver.detach_volume(dom.name(), info["data"]["volume_id"])
