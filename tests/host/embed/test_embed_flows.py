"""The same attach/detach flows through the in-process driver, qemu:///embed (no daemon)."""

from __future__ import annotations

import pytest

from testhosts.guests import ReadOnlyWrite, block_info, read_pattern, write_pattern
from tests.support.volumes import local_volume
from virtdriver.errors import AttachFailed, VolumeInUse

pytestmark = pytest.mark.hypervisor


def test_multiattach_flow_through_embed(embed_guests, embed_driver, loop_device) -> None:
    a, b = embed_guests.start("ea"), embed_guests.start("eb")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    alias = f"ua-{vid}"
    embed_driver.attach_volume(info, a.name())
    embed_driver.attach_volume(info, b.name(), attach_mode="ro")
    assert block_info(b, alias).ro and block_info(a, alias).direct
    write_pattern(a, alias, 0x77)
    assert read_pattern(b, alias, 0x77)
    with pytest.raises(ReadOnlyWrite):
        write_pattern(b, alias, 0x01)
    embed_driver.detach_volume(a.name(), vid)
    assert read_pattern(b, alias, 0x77)
    assert embed_driver.records.connected() == [vid]
    embed_driver.detach_volume(b.name(), vid)
    assert embed_driver.records.connected() == []
    assert embed_driver.list_attachments(b.name()) == []


def test_refusal_and_rollback_through_embed(embed_guests, embed_driver, loop_device) -> None:
    a, b = embed_guests.start("ea"), embed_guests.start("eb")
    info = local_volume(loop_device.device, multiattach=False)
    embed_driver.attach_volume(info, a.name())
    with pytest.raises(VolumeInUse):
        embed_driver.attach_volume(info, b.name())
    other = local_volume(loop_device.device, multiattach=True)
    with pytest.raises(VolumeInUse, match="under another name"):
        embed_driver.attach_volume(other, b.name())
    assert embed_driver.records.connected() == [info["data"]["volume_id"]]
    embed_driver.detach_volume(a.name(), info["data"]["volume_id"])
    assert embed_driver.records.connected() == []
    with pytest.raises(AttachFailed) as caught:
        embed_driver.attach_volume(other, b.name(), bus="virtio")
    assert "hotplug" in (caught.value.libvirt_message or "")
    assert embed_driver.list_attachments(b.name()) == []
    assert embed_driver.records.connected() == []
