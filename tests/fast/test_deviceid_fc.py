"""A Fibre Channel device's identity (#45, item 2): remote port and LUN against connection_info.

This machine has no FC HBA, and neither has the nested host: the sysfs an HBA's driver makes is
laid out here as the kernel lays it out (the seam the brief allows a stand-in for). The iSCSI
check runs on a real target in tests/nested/test_kernel_identity.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from virtdriver.hypervisor import deviceid

WWPN = "0x500601603ce0021d"


@pytest.fixture
def sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two FC paths (sdb, sdc) to LUN 3 behind dm-0, as /sys shows them."""
    sys = tmp_path / "sys"
    for disk, host, port in (("sdb", 1, WWPN), ("sdc", 2, "0x500601683ce0021d")):
        scsi = (sys / "devices" / "pci0000:00" / f"host{host}" / f"rport-{host}:0-0"
                / f"target{host}:0:0" / f"{host}:0:0:3")
        scsi.mkdir(parents=True)
        (sys / "block" / disk).mkdir(parents=True)
        (sys / "block" / disk / "device").symlink_to(scsi)
        target = sys / "class" / "fc_transport" / f"target{host}:0:0"
        target.mkdir(parents=True)
        (target / "port_name").write_text(port + "\n")
        (sys / "block" / "dm-0" / "slaves").mkdir(parents=True, exist_ok=True)
        (sys / "block" / "dm-0" / "slaves" / disk).symlink_to(sys / "block" / disk)
    monkeypatch.setattr(deviceid, "SYS", sys)
    return sys


def test_the_lun_and_ports_connection_info_names_pass(sysfs: Path) -> None:
    props = {"target_wwn": [WWPN.removeprefix("0x"), "500601683CE0021D"], "target_lun": 3}
    assert deviceid.mismatch("FIBRE_CHANNEL", props, "/dev/dm-0") is None
    assert deviceid.mismatch("FIBRE_CHANNEL", {"target_lun": 3}, "/dev/sdb") is None


def test_another_lun_is_named(sysfs: Path) -> None:
    said = deviceid.mismatch("FIBRE_CHANNEL", {"target_wwn": WWPN, "target_lun": 4}, "/dev/sdb")
    assert said == "/dev/sdb is LUN 3, connection_info says 4"


def test_a_path_through_another_port_is_named(sysfs: Path) -> None:
    said = deviceid.mismatch("FIBRE_CHANNEL", {"target_wwn": WWPN, "target_lun": 3},
                             "/dev/dm-0")  # sdc goes through the second port
    assert said == "/dev/sdc belongs to target 500601683ce0021d, connection_info says " \
                   "500601603ce0021d"


def test_what_connection_info_does_not_state_is_not_compared(sysfs: Path) -> None:
    assert deviceid.mismatch("FIBRE_CHANNEL", {}, "/dev/dm-0") is None
    assert deviceid.mismatch("LOCAL", {"target_lun": 9}, "/dev/sdb") is None
    assert deviceid.mismatch("FIBRE_CHANNEL", {"target_lun": 9}, None) is None
