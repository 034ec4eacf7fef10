"""The identity of a disk a guest holds is the device its QEMU opened (#56, item 1).

os-brick hands over by-path links; an iSCSI re-login or a rescan repoints such a link to another
device (the OSSA-2023-003 mechanism). Here the link is our own symlink to a real loop device,
repointed to a second one while a real guest holds the first: a second volume naming the first
device directly must still be refused, and ``audit`` must name the moved link.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from testhosts.guests import LoopDevice, qemu_io
from tests.support.volumes import local_volume, repoint
from virtdriver.errors import VolumeInUse, WrongDevice
from virtdriver.hypervisor.locks import volume_lock
from virtdriver.ops.audit import audit_host

pytestmark = pytest.mark.hypervisor


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "transient"])
def test_a_moved_link_does_not_hide_the_device_a_guest_holds(
        persistent: bool, guests, volume_driver, system_conn, loop_device, second_loop,
        tmp_path: Path) -> None:
    l1, l2 = loop_device.device, second_loop.device
    assert l1 is not None and l2 is not None
    a, c = guests.start("a", persistent=persistent), guests.start("c", persistent=persistent)
    link = tmp_path / "ip-192.0.2.5:3260-iscsi-iqn.2010-10.org.openstack:v1-lun-1"
    link.symlink_to(l1)
    first = local_volume(str(link), multiattach=False)
    vid = first["data"]["volume_id"]
    volume_driver.attach_volume(first, a.name())
    repoint(link, l2)

    # A's QEMU writes the first device, whatever the link says now.
    qemu_io(a, f"ua-{vid}", "write -P 0x5a 0 4096")
    with open(l1, "rb") as dev:
        assert dev.read(4096) == b"\x5a" * 4096

    second = local_volume(l1, multiattach=False)
    with pytest.raises(VolumeInUse, match="under another name"):
        volume_driver.attach_volume(second, c.name())
    assert volume_driver.list_attachments(c.name()) == []

    volume = audit_host(system_conn, volume_driver.state_dir).volume(vid)
    assert volume is not None
    moved = [d.message for d in volume.dangers if d.kind == "link"]
    assert len(moved) == 1, volume.dangers
    assert str(link) in moved[0] and l1 in moved[0] and l2 in moved[0], moved

    volume_driver.detach_volume(a.name(), vid)
    assert volume_driver.list_attachments(a.name()) == []
    assert volume_driver.records.connected() == []


def test_a_link_that_stays_is_no_danger(guests, volume_driver, system_conn, loop_device,
                                        tmp_path: Path) -> None:
    assert loop_device.device is not None
    a = guests.start("a")
    link = tmp_path / "by-path-link"
    link.symlink_to(loop_device.device)
    info = local_volume(str(link), multiattach=False)
    made = volume_driver.attach_volume(info, a.name())
    volume = audit_host(system_conn, volume_driver.state_dir).volume(made.volumeId)
    assert volume is not None and volume.dangers == []
    # the definition keeps the link (a restart opens what it names then); the guest, the device
    config = a.XMLDesc(0x2)  # VIR_DOMAIN_XML_INACTIVE
    assert f"dev='{link}'" in config
    assert f"dev='{loop_device.device}'" in a.XMLDesc(0)


def test_the_same_volume_is_not_attached_on_the_device_a_moved_link_leads_to(
        guests, volume_driver, loop_device, second_loop, tmp_path: Path) -> None:
    l1, l2 = loop_device.device, second_loop.device
    assert l1 is not None and l2 is not None
    a, b = guests.start("a"), guests.start("b")
    link = tmp_path / "by-path-link"
    link.symlink_to(l1)
    info = local_volume(str(link), multiattach=True)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name())
    repoint(link, l2)
    with pytest.raises(VolumeInUse, match=f"volume {vid} is held by {a.name()} on another "
                                          "device than its device path leads to now"):
        volume_driver.attach_volume(info, b.name())
    assert volume_driver.list_attachments(b.name()) == []
    assert volume_driver.records.connected() == [vid]  # A's connection stays
    repoint(link, l1)
    volume_driver.attach_volume(info, b.name())  # back where A's device is: shared as before
    assert [x.volumeId for x in volume_driver.list_attachments(b.name())] == [vid]


def test_a_swap_onto_a_link_holds_the_device_too(guests, volume_driver, system_conn,
                                                 loop_device, second_loop,
                                                 tmp_path: Path) -> None:
    l1, l2 = loop_device.device, second_loop.device
    assert l1 is not None and l2 is not None
    a, c = guests.start("a"), guests.start("c")
    with LoopDevice(64 * 1024 * 1024) as old_dev:
        assert old_dev.device is not None
        old = local_volume(old_dev.device, multiattach=False)
        link = tmp_path / "by-path-link"
        link.symlink_to(l1)
        new = local_volume(str(link), multiattach=False)
        vid = new["data"]["volume_id"]
        volume_driver.attach_volume(old, a.name())
        after = volume_driver.swap_volume(a.name(), old, new)
        assert after.volumeId == vid and after.source == l1
        assert f"dev='{link}'" in a.XMLDesc(0x2)  # the definition keeps the link
        repoint(link, l2)
        with pytest.raises(VolumeInUse, match="under another name"):
            volume_driver.attach_volume(local_volume(l1, multiattach=False), c.name())
        volume = audit_host(system_conn, volume_driver.state_dir).volume(vid)
        assert volume is not None and [d.kind for d in volume.dangers] == ["link"]
        assert [x.volumeId for x in volume_driver.list_attachments(a.name())] == [vid]
        volume_driver.detach_volume(a.name(), vid)
        assert volume_driver.list_attachments(a.name()) == []
        assert l1 not in a.XMLDesc(0x2) and str(link) not in a.XMLDesc(0x2)


def test_the_cli_refuses_with_exit_3_and_audit_names_the_link_with_exit_1(
        guests, loop_device, second_loop, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from virtdriver.cli import main

    l1, l2 = loop_device.device, second_loop.device
    assert l1 is not None and l2 is not None
    a, c = guests.start("a"), guests.start("c")
    state = ["--state-dir", str(tmp_path / "state")]
    link = tmp_path / "by-path-link"
    link.symlink_to(l1)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    info = local_volume(str(link), multiattach=False)
    first.write_text(json.dumps(info))
    second.write_text(json.dumps(local_volume(l1, multiattach=False)))
    assert main([*state, "attach", a.name(), str(first)]) == 0
    repoint(link, l2)
    capsys.readouterr()
    assert main([*state, "attach", c.name(), str(second)]) == 3
    err = capsys.readouterr().err
    assert "under another name" in err and len(err.strip().splitlines()) == 1, err
    assert main([*state, "audit"]) == 1
    out = capsys.readouterr().out
    assert f"DANGER link: {a.name()} holds {l1}, but the volume's device path {link} now " \
           f"leads to {l2}" in out, out
    assert main([*state, "detach", a.name(), info["data"]["volume_id"]]) == 0


def test_a_link_that_moves_while_the_attach_waits_for_its_lock_is_refused(
        guests, volume_driver, loop_device, second_loop, tmp_path: Path) -> None:
    """The attach locked and checked the device its link led to when it was asked: a link that
    leads elsewhere once the attach holds its locks is refused, nothing attached."""
    l1, l2 = loop_device.device, second_loop.device
    assert l1 is not None and l2 is not None
    a = guests.start("a")
    link = tmp_path / "by-path-link"
    link.symlink_to(l1)
    info = local_volume(str(link), multiattach=False)
    outcome: list[object] = []

    def attach() -> None:
        try:
            outcome.append(volume_driver.attach_volume(info, a.name()))
        except Exception as exc:  # noqa: BLE001 - looked at below
            outcome.append(exc)

    with volume_lock(volume_driver.lock_dir, info["serial"], operation="a peer"):
        waiting = threading.Thread(target=attach)
        waiting.start()
        time.sleep(1.0)  # the attach found its data (L1) and waits for the volume's lock
        repoint(link, l2)
    waiting.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], WrongDevice), outcome
    rdev = os.stat(l1).st_rdev
    assert f"{link} led to device {os.major(rdev)}:{os.minor(rdev)} when the attach was asked " \
           f"and leads to {l2} (" in str(outcome[0]), outcome
    assert volume_driver.list_attachments(a.name()) == []
    assert volume_driver.records.connected() == []
