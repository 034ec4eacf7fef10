"""Who can hold SCSI reservations, as which initiator (audit's ``reservations`` and ``fence``), and
doctor's reservations check, on disks virtdriver renders and on hand-written libvirt XML."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from tests.support.volumes import local_volume
from virtdriver.config import Disk
from virtdriver.hypervisor.domains import DiskUse
from virtdriver.ops.audit import _fence_dangers, attachment_of
from virtdriver.ops.doctor.reservations import configured_pr_helper, reservations_check
from virtdriver.policy.reservations import HOST_INITIATOR, reservation_route
from virtdriver.render import build_disk


def iscsi_info(vid: str) -> dict:
    return {"driver_volume_type": "iscsi", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "target_portal": "192.0.2.5:3260",
                     "target_iqn": "iqn.2026-01.io.example:t", "target_lun": 2,
                     "access_mode": "rw"}}


def lun_on_block(managed: bool) -> Disk:
    disk = Disk.from_xml(
        "<disk type='block' device='lun'><driver name='qemu' type='raw' cache='none'/>"
        "<source dev='/dev/sdz'>"
        + ("<reservations managed='yes'/>" if managed else "") +
        "</source><target dev='sdb' bus='scsi'/><shareable/></disk>")
    return disk


def use(guest: str, disk: Disk, *, live: bool = True) -> DiskUse:
    return DiskUse(domain_name=guest, domain_uuid=str(uuid.uuid5(uuid.NAMESPACE_DNS, guest)),
                   active=True, live=live, disk=disk)


def test_native_iscsi_lun_reaches_the_target_as_the_rendered_initiator() -> None:
    vid = str(uuid.uuid4())
    disk = build_disk(iscsi_info(vid), device="lun", bus="scsi", target_dev="sdb",
                      native_iscsi=True, initiator_iqn="iqn.2026-01.io.example:guest-a")
    how, identity = reservation_route(disk, "u-a")  # type: ignore[misc]
    assert how == "iSCSI as iqn.2026-01.io.example:guest-a, its own session"
    assert identity == ("session", "u-a")
    plain = build_disk(iscsi_info(vid), device="lun", bus="scsi", target_dev="sdb",
                       native_iscsi=True)
    assert reservation_route(plain, "u-a")[0] == (
        "iSCSI as QEMU's default name (from the guest's UUID), its own session")


def test_a_block_lun_reaches_the_target_as_the_host() -> None:
    assert reservation_route(lun_on_block(True), "u") == (
        "libvirt's managed qemu-pr-helper, as the host's initiator", HOST_INITIATOR)
    assert reservation_route(lun_on_block(False), "u")[0].startswith("QEMU itself")  # type: ignore[index]
    emulated = build_disk(local_volume("/dev/sdz", multiattach=True), bus="scsi",
                          target_dev="sdb")
    assert reservation_route(emulated, "u") is None  # device='disk': QEMU answers itself


def test_guests_of_one_host_on_one_block_lun_cannot_fence_each_other() -> None:
    group = [use("a", lun_on_block(True)), use("b", lun_on_block(True))]
    [danger] = _fence_dangers(group)
    assert danger.kind == "fence"
    assert danger.message.startswith("a, b pass SCSI reservations to this volume as one "
                                     "initiator, the host's own initiator")
    assert attachment_of(group[0]).reservations == (
        "libvirt's managed qemu-pr-helper, as the host's initiator")
    # One guest, or a guest only in a definition, fences nobody out.
    assert _fence_dangers(group[:1]) == []
    assert _fence_dangers([group[0], use("b", lun_on_block(True), live=False)]) == []


def test_native_iscsi_guests_are_each_their_own_initiator_port_even_under_one_name() -> None:
    """Each QEMU logs in with a session of its own (name + ISID is the port the target sees);
    tests/inguest/test_reservations.py shows the target fencing one such guest from another."""
    vid = str(uuid.uuid4())

    def lun(iqn: str | None) -> Disk:
        return build_disk(iscsi_info(vid), device="lun", bus="scsi", target_dev="sdb",
                          native_iscsi=True, initiator_iqn=iqn)

    host = "iqn.2026-01.io.example:host"
    assert _fence_dangers([use("a", lun(host)), use("b", lun(host))]) == []
    assert _fence_dangers([use("a", lun(None)), use("b", lun(None))]) == []
    # a guest on the host's device and one on QEMU's initiator: two ports, too
    assert _fence_dangers([use("a", lun(host)), use("b", lun_on_block(True))]) == []


def test_doctor_reports_each_route(tmp_path: Path) -> None:
    conf = tmp_path / "qemu.conf"
    conf.write_text('# pr_helper = "/old"\npr_helper = "/nowhere/qemu-pr-helper"\n')
    assert configured_pr_helper(conf) == "/nowhere/qemu-pr-helper"
    facts: dict = {}
    check = reservations_check(facts, {"raw", "iscsi"}, conf)
    assert check.status == "warn" and check.name == "reservations"
    assert ("host block devices: no (/nowhere/qemu-pr-helper not found" in check.detail
            and "QEMU-native iSCSI: yes" in check.detail), check.detail
    assert facts["reservations"]["host_block_devices"] is False
    conf.write_text("")
    check = reservations_check(facts, {"raw"}, conf)
    assert "QEMU-native iSCSI: no (QEMU's iscsi driver missing" in check.detail
    assert facts["reservations"]["pr_helper"] == "qemu-pr-helper"
    if shutil.which("qemu-pr-helper"):  # this host's own answer, with the host's driver list
        assert check.detail.startswith(
            f"SCSI persistent reservations on device='lun': host block devices: yes "
            f"({shutil.which('qemu-pr-helper')}")


def test_a_rendered_block_lun_goes_through_the_managed_helper() -> None:
    disk = build_disk(local_volume("/dev/sdx", multiattach=True), device="lun", bus="scsi",
                      target_dev="sdb")
    assert reservation_route(disk, "u") == (
        "libvirt's managed qemu-pr-helper, as the host's initiator", HOST_INITIATOR)


def test_a_missing_pr_helper_is_explained() -> None:
    """libvirt's own message when qemu.conf's pr_helper is not there (qemu_process.c)."""
    from virtdriver.hypervisor.access import why_lun_refused

    disk = build_disk(local_volume("/dev/sdx", multiattach=False), device="lun", bus="scsi",
                      target_dev="sdb")
    message = "'qemu-pr-helper' is not a suitable pr helper: No such file or directory"
    assert "install it (Debian: qemu-system-common)" in why_lun_refused(disk, "/dev/sdx",
                                                                          message)
    plain = build_disk(local_volume("/dev/sdx", multiattach=False))
    assert why_lun_refused(plain, "/dev/sdx", message) is None
