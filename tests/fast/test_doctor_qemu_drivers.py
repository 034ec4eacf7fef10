"""Doctor reads QEMU's list of block drivers in both layouts QEMU prints it."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from virtdriver.ops.doctor.storage import listed_block_drivers


@pytest.mark.parametrize("version", ["7.2", "10.0"])
def test_qemu_img_help_of_each_layout_lists_the_network_drivers(version: str) -> None:
    text = (FIXTURES / "qemu-img" / f"help-{version}.txt").read_text()
    drivers = listed_block_drivers(text)
    assert {"nbd", "rbd", "iscsi", "gluster", "file", "host_device", "raw", "vvfat"} <= drivers
    assert not drivers & {"See", "Supported", "formats:", "<https://qemu.org>."}


def test_no_list_is_no_driver() -> None:
    assert listed_block_drivers("qemu-img version 10.0\nusage: qemu-img command\n") == set()
