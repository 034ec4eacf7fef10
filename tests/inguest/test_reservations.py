"""SCSI-3 persistent reservations fence a guest out: two Linux guests, the test target's (tgt)
reservations LUN as ``device='lun'``, each guest's QEMU logging in under its own initiator name.

The evidence is what sg_persist and sg_raw print inside the guests.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from testhosts.guests import SYSTEM_URI
from tests.support.backends import need
from tests.support.linuxguest import disk_by_vendor, wait_disk_gone
from virtdriver.ops.audit import audit_host

pytestmark = pytest.mark.hypervisor

KEY = "0xa1"
#: WRITE(10) of one 512-byte block at LBA 0; -s sends that many bytes from -i.
WRITE_LBA0 = "sg_raw -s 512 -i /dev/zero /dev/{d} 2a 00 00 00 00 00 00 00 01 00"


IQN = "iqn.2026-01.io.virtdriver.test:guest-{}"


def _drivers(tmp_path: Path, names: tuple[str, str]):
    from virtdriver import LibvirtVolumeDriver

    made = [LibvirtVolumeDriver(SYSTEM_URI, state_dir=tmp_path / "state", detach_timeout=20,
                                native_iscsi=True, initiator_iqn=IQN.format(name))
            for name in names]
    yield made
    for driver in made:
        driver.close()


@pytest.fixture
def lun_drivers(tmp_path: Path):
    """One LibvirtVolumeDriver per guest, each QEMU's iSCSI initiator under its own name (one
    state directory: one host)."""
    yield from _drivers(tmp_path, ("a", "b"))


@pytest.fixture
def one_name_drivers(tmp_path: Path):
    """Both guests' QEMU log in under one initiator name (the host's, as by default)."""
    yield from _drivers(tmp_path, ("host", "host"))


def pr_volume(backends) -> dict:
    need(backends, "iscsi")
    if not backends.get("VD_ISCSI_PR_LUN"):  # a backend started by an older script
        reason = "the iscsi test backend has no reservations LUN (restart it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    vid = str(uuid.uuid4())
    return {"driver_volume_type": "iscsi", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "target_portal": backends["VD_ISCSI_PORTAL"],
                     "target_iqn": backends["VD_ISCSI_IQN"],
                     "target_lun": int(backends["VD_ISCSI_PR_LUN"]), "access_mode": "rw"}}


def test_a_write_exclusive_reservation_fences_the_other_guest(
        backends, linux_pair, lun_drivers) -> None:
    info = pr_volume(backends)
    vid = info["data"]["volume_id"]
    (a, b), attached = linux_pair, []
    try:
        for guest, driver in zip((a, b), lun_drivers):
            driver.attach_volume(info, guest.name(), device="lun", bus="scsi")
            attached.append((guest, driver))
        da, db = disk_by_vendor(a, "IET"), disk_by_vendor(b, "IET")
        # audit: each guest reaches the target under its own name; nothing to warn about
        volume = audit_host(lun_drivers[0].connection.get(), lun_drivers[0].state_dir).volume(vid)
        assert volume is not None and volume.dangers == []
        assert {(x.guest, x.reservations) for x in volume.attachments} == {
            (a.name(), f"iSCSI as {IQN.format('a')}, its own session"),
            (b.name(), f"iSCSI as {IQN.format('b')}, its own session")}
        a.check(f"sg_persist -n --out --register --param-sark={KEY} /dev/{da}")
        a.check(f"sg_persist -n --out --reserve --param-rk={KEY} --prout-type=1 /dev/{da}")
        shown = b.check(f"sg_persist -n --in --read-reservation /dev/{db}")
        assert "Write Exclusive" in shown, shown

        fenced = b.run(WRITE_LBA0.format(d=db))
        assert fenced.rc != 0 and "reservation conflict" in fenced.output.lower(), fenced.output
        assert a.run(WRITE_LBA0.format(d=da)).rc == 0  # the holder writes

        a.check(f"sg_persist -n --out --release --param-rk={KEY} --prout-type=1 /dev/{da}")
        freed = b.run(WRITE_LBA0.format(d=db))
        assert freed.rc == 0, freed.output
    finally:
        for guest, _driver in attached[:1]:  # leave the shared LUN without our registration
            guest.run(f"d=$(grep -lx 'IET *' /sys/block/sd*/device/vendor | cut -d/ -f4);"
                      f" sg_persist -n --out --register --param-rk={KEY} --param-sark=0 /dev/$d")
        for guest, driver in attached:
            driver.detach_volume(guest.name(), vid)
    assert da not in wait_disk_gone(a, da).split() and db not in wait_disk_gone(b, db).split()


def test_two_guests_under_one_initiator_name_are_still_fenced_apart(
        backends, linux_pair, one_name_drivers) -> None:
    """virtdriver's default gives every guest of a host the host's initiator name; each QEMU
    still logs in with its own session (name + ISID: its own initiator port), so the target
    fences one from the other, and audit has nothing to warn about."""
    info = pr_volume(backends)
    vid = info["data"]["volume_id"]
    (a, b), attached = linux_pair, []
    try:
        for guest, driver in zip((a, b), one_name_drivers):
            driver.attach_volume(info, guest.name(), device="lun", bus="scsi")
            attached.append((guest, driver))
        da, db = disk_by_vendor(a, "IET"), disk_by_vendor(b, "IET")
        driver = one_name_drivers[0]
        volume = audit_host(driver.connection.get(), driver.state_dir).volume(vid)
        assert volume is not None and volume.dangers == []
        assert {x.reservations for x in volume.attachments} == {
            f"iSCSI as {IQN.format('host')}, its own session"}

        a.check(f"sg_persist -n --out --register --param-sark={KEY} /dev/{da}")
        a.check(f"sg_persist -n --out --reserve --param-rk={KEY} --prout-type=1 /dev/{da}")
        fenced = b.run(WRITE_LBA0.format(d=db))
        assert fenced.rc != 0 and "reservation conflict" in fenced.output.lower(), fenced.output
        a.check(f"sg_persist -n --out --release --param-rk={KEY} --prout-type=1 /dev/{da}")
        assert b.run(WRITE_LBA0.format(d=db)).rc == 0
    finally:
        for guest, _driver in attached[:1]:
            guest.run(f"d=$(grep -lx 'IET *' /sys/block/sd*/device/vendor | cut -d/ -f4);"
                      f" sg_persist -n --out --release --param-rk={KEY} --prout-type=1 /dev/$d;"
                      f" sg_persist -n --out --register --param-rk={KEY} --param-sark=0 /dev/$d")
        for guest, driver in attached:
            driver.detach_volume(guest.name(), vid)
    assert da not in wait_disk_gone(a, da).split() and db not in wait_disk_gone(b, db).split()
