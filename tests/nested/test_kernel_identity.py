"""The device's identity before a guest gets it (#45, item 2), on a kernel initiator.

os-brick finds an iSCSI volume's disk by the session and LUN its properties name, so on a
healthy host it finds the right one. What is read from the real disk's sysfs (its session's
target, its SCSI address's LUN) is compared here with connection_info: the right LUN passes and
is attached; a connection_info whose per-path keys (``target_luns``) name LUN 2 while os-brick
connects LUN 1 -- the disagreement a stale device would show -- is refused before any guest gets
the disk, and this call's connect is undone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.nested.test_kernel_iscsi import (  # noqa: F401 - fixture
    IQN,
    lun_info,
    sessions,
    tgt_lun,
    tgtadm,
)
from virtdriver.errors import WrongDevice
from virtdriver.hypervisor import deviceid

pytestmark = pytest.mark.kernel_initiator


def test_the_real_disk_is_read_and_another_lun_is_refused(tgt_lun, guests, volume_driver,
                                                           tmp_path: Path) -> None:
    from testhosts.guests import block_info

    second = tmp_path / "lun2.raw"
    with open(second, "wb") as fh:
        fh.truncate(32 << 20)
    tgtadm("--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", "2", "-b", str(second))
    dom = guests.start("id")
    info = lun_info()
    vid = info["data"]["volume_id"]

    made = volume_driver.attach_volume(info, dom.name())  # the identity check passes
    disk = block_info(dom, f"ua-{vid}").file
    real = os.path.realpath(disk)
    props = info["data"]
    assert deviceid.mismatch("ISCSI", props, disk) is None
    assert deviceid.mismatch("ISCSI", {**props, "target_lun": 2}, disk) == \
        f"{real} is LUN 1, connection_info says 2"
    other = "iqn.2024-01.dev.virtdriver.nested:other"
    assert deviceid.mismatch("ISCSI", {**props, "target_iqn": other}, disk) == \
        f"{real} belongs to target {IQN}, connection_info says {other}"
    volume_driver.detach_volume(dom.name(), made.volumeId)
    assert IQN not in sessions()

    wrong = lun_info(target_luns=[2])  # os-brick connects target_lun 1; the paths say 2
    with pytest.raises(WrongDevice, match=r"/dev/sd[a-z]+ is LUN 1, connection_info says 2"):
        volume_driver.attach_volume(wrong, dom.name())
    assert volume_driver.list_attachments(dom.name()) == []
    assert volume_driver.records.connected() == []
    assert IQN not in sessions()  # this call's login undone
