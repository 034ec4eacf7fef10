"""Attach and detach on real KVM guests through libvirtd (qemu:///system)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import libvirt
import pytest

from testhosts.guests import ReadOnlyWrite, block_info, read_pattern, write_pattern
from tests.support.volumes import file_volume, local_volume
from virtdriver.errors import AttachFailed, NotAttached, VolumeInUse

pytestmark = pytest.mark.hypervisor


def config_xml(dom: libvirt.virDomain) -> str:
    return dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)


class DisconnectRecorder:
    """Records each os-brick LOCAL disconnect and which guests still had the device then."""

    def __init__(self, conn: libvirt.virConnect) -> None:
        self.conn = conn
        self.calls: list[set[str]] = []

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def record(self, properties: dict) -> None:
        from virtdriver.hypervisor.domains import host_disks

        dev = properties.get("device_path")
        self.calls.append({u.domain_name for u in host_disks(self.conn)
                           if u.disk.source is not None and u.disk.source.dev == dev})


@pytest.fixture
def disconnects(mocker, system_conn):
    """A spy on os-brick's LOCAL connector: calls go through to os-brick, each is recorded."""
    from os_brick.initiator.connectors.local import LocalConnector

    recorder = DisconnectRecorder(system_conn)
    real = LocalConnector.disconnect_volume

    def spy(self, connection_properties, device_info, force=False, ignore_errors=False):
        recorder.record(connection_properties)
        return real(self, connection_properties, device_info, force, ignore_errors)

    mocker.patch.object(LocalConnector, "disconnect_volume", spy)
    return recorder


def test_multiattach_rw_and_ro_share_bytes_and_refuse_ro_writes(
        guests, volume_driver, loop_device, disconnects) -> None:
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    alias = f"ua-{info['data']['volume_id']}"

    att_a = volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    att_b = volume_driver.attach_volume(info, b.UUIDString(), attach_mode="ro")
    assert (att_a.attach_mode, att_b.attach_mode) == ("rw", "ro")
    assert att_a.shareable and att_b.shareable
    assert att_a.device == "/dev/sda" and att_b.serverId == b.UUIDString()

    qa, qb = block_info(a, alias), block_info(b, alias)
    assert (qa.ro, qb.ro) == (False, True)
    assert qa.direct and qb.direct  # cache='none' on both
    for dom in (a, b):
        live, persistent = dom.XMLDesc(0), config_xml(dom)
        for xml in (live, persistent):
            assert alias in xml and "<shareable/>" in xml and "cache='none'" in xml

    write_pattern(a, alias, 0x5A)
    assert read_pattern(b, alias, 0x5A)
    with pytest.raises(ReadOnlyWrite):
        write_pattern(b, alias, 0x11)

    # Detaching A keeps B working and the host connection in place.
    volume_driver.detach_volume(a.name(), info["data"]["volume_id"])
    assert alias not in a.XMLDesc(0) and alias not in config_xml(a)
    assert read_pattern(b, alias, 0x5A)
    assert disconnects.call_count == 0
    assert volume_driver.records.connected() == [info["data"]["volume_id"]]

    # Detaching B, the last user, disconnects the host side.
    volume_driver.detach_volume(b.name(), info["data"]["volume_id"])
    assert alias not in b.XMLDesc(0) and alias not in config_xml(b)
    assert disconnects.call_count == 1
    assert volume_driver.records.connected() == []


def test_non_multiattach_volume_is_refused_for_a_second_guest(
        guests, volume_driver, loop_device) -> None:
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=False)
    volume_driver.attach_volume(info, a.name())
    before = (b.XMLDesc(0), config_xml(b))
    with pytest.raises(VolumeInUse, match="not multiattach"):
        volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    assert (b.XMLDesc(0), config_xml(b)) == before
    assert volume_driver.list_attachments(b.name()) == []
    assert [x.volumeId for x in volume_driver.list_attachments(a.name())] == [
        info["data"]["volume_id"]]


def test_same_device_under_another_volume_id_is_refused(
        guests, volume_driver, loop_device) -> None:
    a, b = guests.start("a"), guests.start("b")
    volume_driver.attach_volume(local_volume(loop_device.device, multiattach=False), a.name())
    other = local_volume(loop_device.device, multiattach=True)
    with pytest.raises(VolumeInUse, match="already used"):
        volume_driver.attach_volume(other, b.name())
    assert volume_driver.list_attachments(b.name()) == []
    assert other["data"]["volume_id"] not in volume_driver.records.connected()


@pytest.mark.parametrize("fan_out", [False, True], ids=["attach", "fan-out"])
def test_a_refused_clash_never_disconnects_the_other_attachments_device(
        fan_out: bool, guests, volume_driver, loop_device, disconnects) -> None:
    """The device belongs to the volume already attached under another id: refusing the second
    id must forget its host record, not disconnect what the first attachment still uses."""
    a, b = guests.start("a"), guests.start("b")
    first = local_volume(loop_device.device, multiattach=False)
    volume_driver.attach_volume(first, a.name())
    other = local_volume(loop_device.device, multiattach=True)
    with pytest.raises(VolumeInUse if not fan_out else AttachFailed, match="already used"):
        if fan_out:
            volume_driver.attach_volume_to_many(other, [b.name()])
        else:
            volume_driver.attach_volume(other, b.name())
    assert disconnects.call_count == 0
    assert volume_driver.records.connected() == [first["data"]["volume_id"]]
    assert volume_driver.list_attachments(b.name()) == []
    assert [x.volumeId for x in volume_driver.list_attachments(a.name())] == [
        first["data"]["volume_id"]]


def test_failed_attach_leaves_no_disk_and_no_host_connection(
        guests, volume_driver, loop_device, disconnects) -> None:
    a = guests.start("a")
    info = local_volume(loop_device.device, multiattach=True)
    before = (a.XMLDesc(0), config_xml(a))
    # A virtio disk cannot be hot-plugged into this ACPI-less guest: libvirt/QEMU refuse for real.
    with pytest.raises(AttachFailed) as caught:
        volume_driver.attach_volume(info, a.name(), bus="virtio")
    assert caught.value.libvirt_message
    assert (a.XMLDesc(0), config_xml(a)) == before
    assert volume_driver.records.connected() == []
    assert disconnects.call_count == 1


def test_attach_to_a_shut_off_guest_changes_only_its_definition(
        guests, volume_driver, tmp_path) -> None:
    a = guests.start("a")
    a.destroy()
    image = tmp_path / "vol.raw"
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    info = file_volume(str(image), multiattach=False)
    att = volume_driver.attach_volume(info, a.name(), attach_mode="ro")
    assert not att.live and att.attach_mode == "ro"
    assert f"ua-{info['data']['volume_id']}" in config_xml(a)
    volume_driver.detach_volume(a.name(), info["data"]["volume_id"])
    assert f"ua-{info['data']['volume_id']}" not in config_xml(a)


def test_raw_file_multiattach_and_detach_errors(guests, volume_driver, tmp_path) -> None:
    a, b = guests.start("a"), guests.start("b")
    image = tmp_path / "shared.raw"
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    info = file_volume(str(image), multiattach=True)
    alias = f"ua-{info['data']['volume_id']}"
    volume_driver.attach_volume(info, a.name())
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    write_pattern(a, alias, 0x3C)
    assert read_pattern(b, alias, 0x3C)
    with pytest.raises(AttachFailed, match="already attached"):
        volume_driver.attach_volume(info, a.name())
    volume_driver.detach_volume(a.name(), info["data"]["volume_id"])
    with pytest.raises(NotAttached):
        volume_driver.detach_volume(a.name(), info["data"]["volume_id"])
    volume_driver.detach_volume(b.name(), info["data"]["volume_id"])


def test_scsi_units_and_devices_are_allocated_past_sdh(guests, volume_driver, tmp_path) -> None:
    a = guests.start("a")
    made = []
    for i in range(9):
        image = tmp_path / f"v{i}.raw"
        subprocess.run(["truncate", "-s", "1M", str(image)], check=True)
        made.append(volume_driver.attach_volume(file_volume(str(image), multiattach=False),
                                                a.name()))
    assert [m.device for m in made] == [f"/dev/sd{c}" for c in "abcdefghi"]
    assert sorted(x.volumeId for x in volume_driver.list_attachments(a.name())) == sorted(
        m.volumeId for m in made)


def test_parallel_detaches_disconnect_exactly_once_after_the_last(
        guests, tmp_path, loop_device, disconnects) -> None:
    from virtdriver import LibvirtVolumeDriver

    doms = [guests.start(f"p{i}") for i in range(4)]
    state = tmp_path / "state"
    for round_ in range(3):
        info = local_volume(loop_device.device, multiattach=True)
        vid = info["data"]["volume_id"]
        # One driver per worker, as separate compute workers would have; they share state.
        workers = [LibvirtVolumeDriver("qemu:///system", state_dir=state) for _ in doms]
        for worker, dom in zip(workers, doms):
            worker.attach_volume(info, dom.name(), attach_mode="ro" if round_ % 2 else "rw")
        calls_before = disconnects.call_count
        threads = [threading.Thread(target=w.detach_volume, args=(d.name(), vid))
                   for w, d in zip(workers, doms)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        # Exactly one host disconnect, and at that moment no guest had the device any more.
        assert disconnects.calls[calls_before:] == [set()]
        assert workers[0].records.connected() == []
        assert workers[0].volume_users(vid) == []
        for w in workers:
            w.close()


def test_capabilities_come_from_the_running_hypervisor(volume_driver) -> None:
    caps = volume_driver.capabilities()
    assert caps["supports_multiattach"] is True and caps["qemu_share_rw"] is True
    v = volume_driver.connection.get().getLibVersion()  # the daemon's own, whatever its release
    assert caps["libvirt_version"] == f"{v // 1000000}.{v // 1000 % 1000}.{v % 1000}"


def test_connector_properties_carry_the_mode(volume_driver) -> None:
    props = volume_driver.connector_properties("ro")
    assert props["mode"] == "ro"
    assert "host" in props or "ip" in props


def test_the_state_dir_holds_no_lock(tmp_path: Path, guests, volume_driver,
                                     loop_device) -> None:
    from virtdriver.hypervisor.locks import lock_is_free

    a = guests.start("a")
    info = local_volume(loop_device.device, multiattach=True)
    volume_driver.attach_volume(info, a.name())
    volume_driver.detach_volume(a.name(), info["data"]["volume_id"])
    assert lock_is_free(volume_driver.lock_dir, info["data"]["volume_id"])


def test_an_attach_that_lands_between_the_scan_and_the_guest_lock_is_seen(
        guests, volume_driver, tmp_path, mocker) -> None:
    """The disks read with the host are reused under the guest lock only while its lock last
    changed hands before that read began. Another driver (its own process in real life, the same
    state directory) attaches a second volume to the guest in exactly that window: the first
    attach must notice, read the guest again and take the next free device."""
    from virtdriver import LibvirtVolumeDriver
    from virtdriver.driver import attach as driver_module

    a = guests.start("a")
    images = []
    for name in ("first", "second"):
        images.append(tmp_path / f"{name}.raw")
        subprocess.run(["truncate", "-s", "1M", str(images[-1])], check=True)
    first = file_volume(str(images[0]), multiattach=False)
    second = file_volume(str(images[1]), multiattach=False)
    other = LibvirtVolumeDriver("qemu:///system", state_dir=volume_driver.state_dir)
    real_guest_lock = driver_module.guest_lock
    interleaved = []

    def guest_lock_after_another_attach(lock_dir, guest_uuid, **waits):
        if not interleaved:  # the first attach has scanned the host and wants the guest's lock
            interleaved.append(None)  # the other attach goes straight through this seam
            interleaved[0] = other.attach_volume(second, a.name())
        return real_guest_lock(lock_dir, guest_uuid, **waits)

    mocker.patch.object(driver_module, "guest_lock", side_effect=guest_lock_after_another_attach)
    try:
        attached = volume_driver.attach_volume(first, a.name())
    finally:
        other.close()
    assert interleaved[0].device == "/dev/sda"
    assert attached.device == "/dev/sdb"
    assert sorted(x.volumeId for x in volume_driver.list_attachments(a.name())) == sorted(
        [first["serial"], second["serial"]])


def pr_helpers_of(dom: libvirt.virDomain) -> list[str]:
    """Command lines of the qemu-pr-helper processes libvirt runs for ``dom``."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if line.split(" ", 1)[0].endswith("qemu-pr-helper") and dom.name()[:20] in line]


def test_lun_on_a_loop_device_is_refused_clearly_and_defined_with_managed_reservations(
        guests, volume_driver, loop_device) -> None:
    """A loop device takes no SCSI commands (SG_IO): QEMU's scsi-block refuses it for real and
    the error says so; nothing is left behind, the managed qemu-pr-helper included. Into a
    shut-off guest, libvirt takes the definition with ``<reservations managed='yes'/>``."""
    a = guests.start("a")
    info = local_volume(loop_device.device, multiattach=False)
    before = (a.XMLDesc(0), config_xml(a))
    with pytest.raises(AttachFailed, match="device='lun' passes the guest's SCSI commands to "
                       f"{loop_device.device}, which does not take them") as caught:
        volume_driver.attach_volume(info, a.name(), device="lun", bus="scsi")
    assert "SG_IO" in caught.value.libvirt_message
    assert (a.XMLDesc(0), config_xml(a)) == before
    assert pr_helpers_of(a) == []
    assert volume_driver.records.connected() == []

    a.destroy()
    volume_driver.attach_volume(info, a.name(), device="lun", bus="scsi")
    disk = libvirt_disk(config_xml(a), f"ua-{info['data']['volume_id']}")
    assert disk.get("device") == "lun"
    assert disk.find("./source/reservations").get("managed") == "yes"
    volume_driver.detach_volume(a.name(), info["data"]["volume_id"])


def libvirt_disk(domain_xml: str, alias: str):
    from lxml import etree

    disk = etree.fromstring(domain_xml.encode()).find(f"./devices/disk/alias[@name='{alias}']/..")
    assert disk is not None, domain_xml
    return disk


def test_a_volume_id_longer_than_a_scsi_serial_attaches_and_detaches(
        guests, volume_driver, loop_device) -> None:
    """QEMU 8.1 and later refuse a SCSI serial over 36 characters; the guest gets 36 of them."""
    dom = guests.start("long-id")
    vid = "volume-" + "0123456789" * 5  # 57 characters, a Cinder-like id from another backend
    info = local_volume(loop_device.device, multiattach=False, volume_id=vid)
    att = volume_driver.attach_volume(info, dom.name())
    assert f"<serial>{vid[:36]}</serial>" in dom.XMLDesc(0)
    assert {u.volume for u in volume_driver.volume_users(vid)} == {vid}  # found by its alias
    volume_driver.detach_volume(dom.name(), vid)
    assert f"ua-{vid}" not in dom.XMLDesc(0) and att.device == "/dev/sda"
