"""A volume held on one device is not attached on another its moved link leads to (#56, 1)."""

from __future__ import annotations

import pytest

from virtdriver.errors import VolumeInUse
from virtdriver.policy.sharing import Use, refuse_moved_device


def use(guest: str, data: tuple[str, ...], *, live: bool = True, volume: str = "v1") -> Use:
    return Use(guest=guest, guest_uuid=guest, volume=volume, data=data, shareable=True,
               readonly=False, live=live)


def test_a_running_guest_on_another_device_refuses() -> None:
    with pytest.raises(VolumeInUse, match="volume v1 is held by a on another device"):
        refuse_moved_device("v1", ("dev", "7:2"), [use("a", ("dev", "7:1"))])


def test_the_same_device_a_definition_or_another_volume_passes() -> None:
    refuse_moved_device("v1", ("dev", "7:1"), [use("a", ("dev", "7:1"))])
    refuse_moved_device("v1", ("dev", "7:2"), [use("a", ("dev", "7:1"), live=False)])
    refuse_moved_device("v1", ("dev", "7:2"), [use("a", ("dev", "7:1"), volume="v2")])


def test_only_block_devices_are_compared() -> None:
    """A network volume's hosts may be listed differently by each attachment's
    connection_info (a monitor added): not a moved device."""
    net = ("net", "rbd", "pool/v1", "mon1:6789")
    refuse_moved_device("v1", ("net", "rbd", "pool/v1", "mon2:6789"), [use("a", net)])
    refuse_moved_device("v1", None, [use("a", ("dev", "7:1"))])
    refuse_moved_device("v1", ("inode", "1:2"), [use("a", ("inode", "1:3"))])
