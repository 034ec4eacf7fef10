"""Swap keeps the two promises attach keeps: no shared data overwritten, no read-only widened.

Each test reproduces a defect found from outside (#46) on real guests and loop-device volumes.
"""

from __future__ import annotations

import time

import pytest

from testhosts.guests import LoopDevice, block_info, read_pattern, write_pattern
from tests.support.volumes import local_volume
from virtdriver.errors import SwapRefused, VolumeInUse

pytestmark = pytest.mark.hypervisor

MIB = 1 << 20


def _first_block(device: str) -> bytes:
    with open(device, "rb") as fh:
        return fh.read(4096)


def test_swap_onto_a_multiattach_volume_another_guest_reads_is_refused(guests,
                                                                       volume_driver) -> None:
    b, c = guests.start("b"), guests.start("c")
    with LoopDevice(16 * MIB) as old_dev, LoopDevice(16 * MIB) as new_dev:
        old = local_volume(old_dev.device, multiattach=False)
        new = local_volume(new_dev.device, multiattach=True)
        volume_driver.attach_volume(old, b.name(), attach_mode="rw")
        write_pattern(b, f"ua-{old['data']['volume_id']}", 0x11)
        volume_driver.attach_volume(new, c.name(), attach_mode="ro")
        before = _first_block(new_dev.device)
        with pytest.raises(VolumeInUse, match=rf"attached to {c.name()}.*no other guest uses"):
            volume_driver.swap_volume(b.name(), old, new)
        assert _first_block(new_dev.device) == before  # C's data untouched
        assert [a.volumeId for a in volume_driver.list_attachments(b.name())] == [
            old["data"]["volume_id"]]
        assert sorted(volume_driver.records.connected()) == sorted(
            [old["data"]["volume_id"], new["data"]["volume_id"]])


def _meant_read_only(info: dict, shape: str) -> dict:
    """The new volume's connection_info saying read-only, in each shape Cinder or nova uses."""
    if shape == "legacy":
        return {**info, "data": {**info["data"], "access_mode": "ro"}}
    flat = {"driver_volume_type": info["driver_volume_type"], **info["data"]}
    if shape == "flat":
        return {**flat, "access_mode": "ro"}
    return {"attachment": {"attach_mode": "ro", "connection_info": {**flat,
                                                                    "access_mode": "rw"}}}


@pytest.mark.parametrize("shape", ["legacy", "flat", "record"])
def test_swap_of_a_rw_disk_onto_a_volume_meant_read_only_is_refused(guests, volume_driver,
                                                                     shape) -> None:
    dom = guests.start("ro")
    with LoopDevice(16 * MIB) as old_dev, LoopDevice(16 * MIB) as new_dev:
        old = local_volume(old_dev.device, multiattach=False)
        new = _meant_read_only(local_volume(new_dev.device, multiattach=False), shape)
        volume_driver.attach_volume(old, dom.name(), attach_mode="rw")
        with pytest.raises(SwapRefused, match="read-only"):
            volume_driver.swap_volume(dom.name(), old, new)
        alias = f"ua-{old['data']['volume_id']}"
        assert block_info(dom, alias).file == old_dev.device
        assert volume_driver.records.connected() == [old["data"]["volume_id"]]


def test_swap_of_a_ro_disk_onto_a_volume_meant_read_only_keeps_it_read_only(
        guests, volume_driver) -> None:
    dom = guests.start("roro")
    with LoopDevice(16 * MIB) as old_dev, LoopDevice(16 * MIB) as new_dev:
        old = local_volume(old_dev.device, multiattach=False)
        new = _meant_read_only(local_volume(new_dev.device, multiattach=False), "record")
        volume_driver.attach_volume(old, dom.name(), attach_mode="ro")
        after = volume_driver.swap_volume(dom.name(), old, new)
        assert after.attach_mode == "ro"
        assert block_info(dom, f"ua-{old['data']['volume_id']}").ro


def test_swap_onto_the_same_data_under_another_id_is_refused_at_once(guests,
                                                                     volume_driver) -> None:
    dom = guests.start("same")
    with LoopDevice(16 * MIB) as dev:
        old = local_volume(dev.device, multiattach=False)
        new = local_volume(dev.device, multiattach=False)  # another id, the same device
        volume_driver.attach_volume(old, dom.name(), attach_mode="rw")
        started = time.monotonic()
        with pytest.raises(VolumeInUse, match="same data"):
            volume_driver.swap_volume(dom.name(), old, new)
        # Not a wait on its own lock until the lock timeout (300 s): refused at once. The bound
        # is far above any real refusal and far below the lock's timeout.
        assert time.monotonic() - started < 60
        assert volume_driver.records.connected() == [old["data"]["volume_id"]]


def test_swap_onto_a_volume_of_another_size_is_refused_before_the_copy(guests,
                                                                       volume_driver) -> None:
    dom = guests.start("size")
    with LoopDevice(16 * MIB) as old_dev, LoopDevice(24 * MIB) as new_dev:
        old = local_volume(old_dev.device, multiattach=False)
        new = local_volume(new_dev.device, multiattach=False)
        volume_driver.attach_volume(old, dom.name(), attach_mode="rw")
        write_pattern(dom, f"ua-{old['data']['volume_id']}", 0x22)
        with pytest.raises(SwapRefused, match=r"16\.0 MiB.*24\.0 MiB"):
            volume_driver.swap_volume(dom.name(), old, new)
        assert volume_driver.records.connected() == [old["data"]["volume_id"]]
        assert read_pattern(dom, f"ua-{old['data']['volume_id']}", 0x22)
