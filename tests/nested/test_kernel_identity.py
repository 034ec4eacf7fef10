"""The device's identity before a guest gets it (#45, item 2), on a kernel initiator.

tgt serves two LUNs of one target. A stale by-path link (the way a leftover device reached
another tenant in OSSA-2023-003) names LUN 2's disk where os-brick looks for LUN 1: the attach of
LUN 1 is refused before any guest gets that disk, LUN 2's disk is left alone, and once the link
is right again the same attach goes through.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.nested.test_kernel_iscsi import (  # noqa: F401 - fixture
    IQN,
    PORT,
    lun_info,
    tgt_lun,
    tgtadm,
    wait_until,
)
from virtdriver.errors import WrongDevice

pytestmark = pytest.mark.kernel_initiator

BY_PATH = Path("/dev/disk/by-path")


def lun_disk(lun: int) -> str:
    """The SCSI disk (``sdX``) of LUN ``lun`` of the test target's session."""
    found: list[str] = []

    def seen() -> bool:
        for session in Path("/sys/class/iscsi_session").glob("session*"):
            if (session / "targetname").read_text().strip() == IQN:
                found[:] = [p.name for p in session.glob(f"device/target*/*:{lun}/block/*")]
        return bool(found)

    wait_until(seen, 30, f"LUN {lun}'s disk")
    return found[0]


def test_a_device_that_is_another_lun_is_refused_and_left_alone(
        tgt_lun, guests, volume_driver, tmp_path: Path) -> None:
    from tests.nested.conftest import run

    second = tmp_path / "lun2.raw"
    with open(second, "wb") as fh:
        fh.truncate(32 << 20)
    tgtadm("--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", "2", "-b", str(second))
    dom = guests.start("id")
    info = lun_info()
    vid = info["data"]["volume_id"]
    run("iscsiadm", "-m", "discovery", "-t", "st", "-p", f"127.0.0.1:{PORT}")
    run("iscsiadm", "-m", "node", "-T", IQN, "-p", f"127.0.0.1:{PORT}", "--login")
    try:
        lun1, lun2 = lun_disk(1), lun_disk(2)
        link = BY_PATH / f"ip-127.0.0.1:{PORT}-iscsi-{IQN}-lun-1"
        wait_until(link.exists, 30, "udev's by-path link of LUN 1")
        assert os.path.realpath(link) == f"/dev/{lun1}"
        link.unlink()
        link.symlink_to(f"../../{lun2}")  # stale: LUN 2's disk where LUN 1's should be

        with pytest.raises(WrongDevice, match=rf"/dev/{lun2} is LUN 2, connection_info says 1"):
            volume_driver.attach_volume(info, dom.name())
        assert volume_driver.list_attachments(dom.name()) == []
        assert volume_driver.records.connected() == []
        assert Path(f"/sys/block/{lun2}").exists()  # the other LUN's disk is left alone

        link.unlink()  # os-brick's undo removed LUN 1's disk; its rescan brings it back
        made = volume_driver.attach_volume(info, dom.name())
        assert made.volumeId == vid
        volume_driver.detach_volume(dom.name(), vid)
    finally:
        subprocess.run(["iscsiadm", "-m", "node", "-T", IQN, "-p", f"127.0.0.1:{PORT}",
                        "--logout"], capture_output=True, check=False)
        subprocess.run(["udevadm", "trigger", "--subsystem-match=block"], check=False)
