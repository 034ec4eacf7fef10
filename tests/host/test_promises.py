"""The hypervisor path keeps its promises on adversarial input, on real guests: the identity of
data whatever its spelling, ids libvirt cannot carry as they are, swap leaving no old identity
behind, rollbacks that leave the host as it was, and one typed error per failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.volumes import file_volume, local_volume
from virtdriver.errors import (
    InvalidAttachRequest,
    InvalidRenderOption,
    LockTimeout,
    NotAttached,
    StateError,
    VolumeInUse,
)
from virtdriver.hypervisor.locks import volume_lock

pytestmark = pytest.mark.hypervisor


def test_the_same_device_spelled_differently_is_refused_under_another_id(
        guests, volume_driver, loop_device, tmp_path) -> None:
    a, b = guests.start("a"), guests.start("b")
    volume_driver.attach_volume(local_volume(loop_device.device, multiattach=True), a.name())
    link = tmp_path / "same-device"
    link.symlink_to(loop_device.device)
    dev = loop_device.device
    assert dev is not None
    for spelling in (f"/dev//{dev[5:]}", f"/dev/./{dev[5:]}", str(link)):
        with pytest.raises(VolumeInUse, match="under another name"):
            volume_driver.attach_volume(local_volume(spelling, multiattach=True), b.name())
    assert volume_driver.list_attachments(b.name()) == []


def test_an_id_libvirt_cannot_carry_in_an_alias_round_trips(guests, volume_driver,
                                                             tmp_path) -> None:
    a = guests.start("a")
    image = tmp_path / "v.raw"
    subprocess.run(["truncate", "-s", "1M", str(image)], check=True)
    for vid in ("vol.1", "a_b", "ünï:cødé/x"):
        info = file_volume(str(image), multiattach=False, volume_id=vid)
        del info["serial"]  # a disk serial has its own, narrower alphabet
        attached = volume_driver.attach_volume(info, a.name())
        assert attached.volumeId == vid
        assert [x.volumeId for x in volume_driver.list_attachments(a.name())] == [vid]
        volume_driver.detach_volume(a.name(), vid)
        assert volume_driver.list_attachments(a.name()) == []


def test_swap_leaves_no_old_identity_and_the_old_volume_can_come_back(
        guests, volume_driver, tmp_path) -> None:
    a = guests.start("a")
    images = []
    for name in ("x", "w"):
        images.append(tmp_path / f"{name}.raw")
        subprocess.run(["truncate", "-s", "1M", str(images[-1])], check=True)
    x = file_volume(str(images[0]), multiattach=False, volume_id="vol-x")
    w = file_volume(str(images[1]), multiattach=False, volume_id="vol-w")
    volume_driver.attach_volume(x, a.name())
    volume_driver.swap_volume(a.name(), x, w)
    assert [v.volumeId for v in volume_driver.list_attachments(a.name())] == ["vol-w"]
    assert volume_driver.volume_users("vol-x") == []
    again = volume_driver.attach_volume(x, a.name())  # its alias is still held by the device
    assert again.volumeId == "vol-x"
    assert sorted(v.volumeId for v in volume_driver.list_attachments(a.name())) == [
        "vol-w", "vol-x"]
    volume_driver.detach_volume(a.name(), "vol-x")
    volume_driver.detach_volume(a.name(), "vol-w")
    assert volume_driver.list_attachments(a.name()) == []


def test_attach_many_to_no_guest_connects_nothing(volume_driver, loop_device) -> None:
    info = local_volume(loop_device.device, multiattach=True)
    with pytest.raises(InvalidAttachRequest, match="no guest"):
        volume_driver.attach_volume_to_many(info, [])
    assert volume_driver.records.connected() == []


def test_a_guest_with_a_scsi_hostdev_at_unit_0_gets_the_next_unit(
        guests, volume_driver, tmp_path, system_conn) -> None:
    a = guests.start("a")
    image = tmp_path / "h.raw"
    subprocess.run(["truncate", "-s", "1M", str(image)], check=True)
    # A device other than a disk at unit 0: a second, plain disk attached behind our back with
    # an explicit address stands in for a SCSI hostdev in the unit bookkeeping test below.
    from virtdriver.config import DomainDisks

    xml = ("<domain><devices><hostdev mode='subsystem' type='scsi'><source><adapter "
           "name='scsi_host0'/><address bus='0' target='0' unit='0'/></source>"
           "<address type='drive' controller='0' bus='0' target='0' unit='0'/></hostdev>"
           "</devices></domain>")
    assert DomainDisks.from_xml(xml).other_drive_units == {0}
    attached = volume_driver.attach_volume(file_volume(str(image), multiattach=False), a.name())
    assert attached.device == "/dev/sda"


def test_a_detach_timeout_the_clock_cannot_hold_is_one_line(guests, volume_driver) -> None:
    a = guests.start("a")
    for bad in (float("inf"), float("nan"), 1e300, -1):
        with pytest.raises(InvalidRenderOption):
            volume_driver.detach_volume(a.name(), "vol-1", timeout=bad)


def test_a_long_volume_id_is_locked_and_recorded_without_a_too_long_file_name(
        guests, volume_driver, tmp_path) -> None:
    a = guests.start("a")
    image = tmp_path / "l.raw"
    subprocess.run(["truncate", "-s", "1M", str(image)], check=True)
    vid = "v" * 250
    volume_driver.attach_volume(file_volume(str(image), multiattach=False, volume_id=vid),
                                a.name())
    volume_driver.detach_volume(a.name(), vid)
    with pytest.raises(NotAttached, match="is not attached"):
        volume_driver.detach_volume(a.name(), vid)


def test_a_held_volume_lock_bounds_the_wait_and_names_the_holder(volume_driver,
                                                                  loop_device) -> None:
    from virtdriver import LibvirtVolumeDriver

    info = local_volume(loop_device.device, multiattach=False)
    impatient = LibvirtVolumeDriver("qemu:///system", state_dir=volume_driver.state_dir,
                                    lock_timeout=0.3)
    try:
        with volume_lock(volume_driver.lock_dir, info["serial"], operation="a hung peer"):
            with pytest.raises(LockTimeout, match="a hung peer") as caught:
                impatient.attach_volume(info, "no-such-guest")
        assert caught.value.exit_code == 4
    finally:
        impatient.close()


def test_a_damaged_record_fails_in_one_line_and_does_not_block_other_volumes(
        guests, volume_driver, tmp_path, loop_device) -> None:
    a = guests.start("a")
    records = volume_driver.state_dir / "connections"
    records.mkdir(parents=True)
    (records / "broken-vol.json").write_text("{not json")
    info = local_volume(loop_device.device, multiattach=False)
    volume_driver.attach_volume(info, a.name())  # an unrelated volume still works
    volume_driver.detach_volume(a.name(), info["serial"])
    with pytest.raises(StateError, match="damaged"):
        volume_driver.records.load("broken-vol")
    from virtdriver.ops.audit import audit_host

    report = audit_host(volume_driver.connection.get(), volume_driver.state_dir)
    assert any(d.kind == "record" for _, d in report.dangers)


def test_release_frees_a_leak_only_when_no_guest_uses_the_volume(
        guests, volume_driver, loop_device, tmp_path) -> None:
    a = guests.start("a")
    info = local_volume(loop_device.device, multiattach=False)
    volume_driver.attach_volume(info, a.name())
    with pytest.raises(VolumeInUse, match="still used by"):
        volume_driver.release_volume(info["serial"])
    guests.remove(a.name())  # the guest vanishes behind the driver's back
    assert info["serial"] in volume_driver.records.connected()
    done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir",
                           str(volume_driver.state_dir), "release", info["serial"]],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert volume_driver.records.connected() == []


def test_a_corrupted_state_dir_is_one_line_and_a_non_zero_exit(tmp_path) -> None:
    info = tmp_path / "v.json"
    info.write_text(json.dumps(local_volume("/dev/null-nothing", multiattach=False)))
    state = tmp_path / "state"
    state.write_text("a file where a directory should be")
    done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir", str(state),
                           "attach", "no-such-guest", str(info)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert done.returncode != 0 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and state.read_text().startswith("a file")


@pytest.mark.parametrize("bus", ["ide", "sata"])
def test_a_bus_that_cannot_be_hot_plugged_is_refused_before_the_host_is_touched(
        bus: str, guests, volume_driver, loop_device) -> None:
    running = guests.start("hot")
    stopped = guests.start("cold")
    stopped.destroy()  # shut off, still defined: its definition may take any bus
    info = local_volume(loop_device.device, multiattach=True)
    before = running.XMLDesc(0), running.XMLDesc(2)
    with pytest.raises(InvalidRenderOption, match="cannot be hot-plugged"):
        volume_driver.attach_volume(info, running.name(), bus=bus)
    assert (running.XMLDesc(0), running.XMLDesc(2)) == before
    assert volume_driver.records.connected() == []
    attached = volume_driver.attach_volume(info, stopped.name(), bus=bus)
    assert (attached.bus, attached.live) == (bus, False)
    volume_driver.detach_volume(stopped.name(), info["serial"])
    assert volume_driver.records.connected() == []
