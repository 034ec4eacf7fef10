"""``audit`` on a volume several guests write whose probe cannot decide, or that holds swap.

The filesystem guard refuses a second writer of a volume whose probe cannot decide what it holds
(#56, item 2), so guests that write one together got there by the override or behind
virtdriver's back: audit names that as a danger, as it names ext4. And swap is said as what it
is: two guests swapping on one device overwrite each other's pages. Real guests, real loop
devices, a second writer attached with libvirt alone.
"""

from __future__ import annotations

import subprocess
from typing import Any

import libvirt
import pytest
from lxml import etree

from tests.support.volumes import dos_table, local_volume
from virtdriver.hypervisor import signatures
from virtdriver.ops.audit import audit_host

pytestmark = pytest.mark.hypervisor

SECTOR = 512
NESTED = 5  # partition tables, each in partition 1 of the one before: one more than blkid reads


def _nested_too_deep(device: str) -> None:
    """Partition tables nested deeper than the probe looks (each 1 MiB into the one before)."""
    for level in range(NESTED):
        dos_table(device, level * 2048 * SECTOR, 2048, (50 - level) * 2048)


def _written_by_two(guests: Any, volume_driver: Any, device: str) -> tuple[str, str, str]:
    """A writes the volume through virtdriver, B through the same disk attached with libvirt
    alone (behind virtdriver's back); returns the volume id and both guests' names."""
    a, b = guests.start("fs-a"), guests.start("fs-b")
    info = local_volume(device, multiattach=True)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    root = etree.fromstring(a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    (disk,) = root.xpath(f"devices/disk[alias/@name='ua-{vid}']")
    b.attachDeviceFlags(etree.tostring(disk, encoding="unicode"), libvirt.VIR_DOMAIN_AFFECT_LIVE)
    return vid, a.name(), b.name()


def _filesystem_danger(volume_driver: Any, vid: str) -> list[str]:
    report = audit_host(volume_driver.compute_host.connection.get(), volume_driver.state_dir)
    return [d.message for v, d in report.dangers if d.kind == "filesystem" and v.volume == vid]


def test_audit_names_writers_of_a_volume_whose_partition_tables_it_cannot_read(
        guests, volume_driver, loop_device) -> None:
    _nested_too_deep(loop_device.device)
    vid, a, b = _written_by_two(guests, volume_driver, loop_device.device)

    (said,) = _filesystem_danger(volume_driver, vid)
    assert f"written by {', '.join(sorted((a, b)))} (not by virtdriver's override)" in said
    assert "could not be decided (partition tables nested more than 4 deep" in said, said
    assert "--allow-shared-write" in said and "journal" not in said and "\n" not in said


def test_audit_names_writers_of_a_volume_the_probe_cannot_read_in_time(
        guests, volume_driver, loop_device, monkeypatch: pytest.MonkeyPatch) -> None:
    """blkid's real process, given no time: the probe cannot decide, and audit says so."""
    subprocess.run(["mkfs.ext4", "-q", "-F", loop_device.device], check=True,
                   capture_output=True)
    vid, _, _ = _written_by_two(guests, volume_driver, loop_device.device)
    monkeypatch.setattr(signatures, "PROBE_TIMEOUT", 1e-6)

    (said,) = _filesystem_danger(volume_driver, vid)
    assert f"could not be decided ({loop_device.device} could not be read: blkid" in said, said
    assert "timed out" in said and "--allow-shared-write" in said


def test_audit_says_what_two_writers_do_to_a_swap_area(guests, volume_driver,
                                                       loop_device) -> None:
    subprocess.run(["mkswap", loop_device.device], check=True, capture_output=True)
    vid, _, _ = _written_by_two(guests, volume_driver, loop_device.device)

    (said,) = _filesystem_danger(volume_driver, vid)
    assert "holds a swap area (swap)" in said and "pages" in said, said
    assert "journal" not in said and "filesystem" not in said
