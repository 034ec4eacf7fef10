"""Every spelling of a LUN or target name connection_info may carry is compared or refused
(#56, item 10).

Accepted: a LUN as a JSON integer or a decimal string, a target's name as text. Refused where
connection_info is read (and again where the connected device is compared, for a record written
before): ``true`` (Python's 1), ``2.0``, ``"0x2"``, a negative number, a name that is a number.
An iSCSI connection whose device is a SCSI disk outside any iSCSI session is not the volume. This
machine's kernel has no SCSI: the sysfs the kernel lays out for an iSCSI disk and a SATA disk is
built in a temp dir (as tests/fast/test_deviceid_fc.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from virtdriver.driver.request import VolumeRequest
from virtdriver.errors import InvalidConnectionInfo
from virtdriver.hypervisor import deviceid
from virtdriver.volume import RenderOptions

IQN = "iqn.2010-10.org.openstack:volume-1"
BAD = [True, False, 2.0, "0x2", "2.0", " 2", -1, "", None, [2]]
BAD_IDS = ["true", "false", "2.0", "hex", "decimal-text", "space", "negative", "empty", "null",
           "list"]


def iscsi(**data: Any) -> dict[str, Any]:
    return {"driver_volume_type": "iscsi", "data": {
        "volume_id": "v1", "target_iqn": IQN, "target_portal": "192.0.2.5:3260", **data}}


def parse(info: dict[str, Any]) -> VolumeRequest:
    return VolumeRequest.parse(info, RenderOptions())


@pytest.mark.parametrize("value", BAD[:-2], ids=BAD_IDS[:-2])
@pytest.mark.parametrize("key", ["target_lun", "target_luns"])
def test_an_iscsi_lun_that_is_no_number_is_refused(key: str, value: object) -> None:
    info = iscsi(target_lun=value) if key == "target_lun" else iscsi(target_luns=[1, value])
    where = "target_lun" if key == "target_lun" else r"target_luns\[1\]"
    with pytest.raises(InvalidConnectionInfo, match=rf"data\.{where}: .* is not a LUN number"):
        parse(info)


@pytest.mark.parametrize("volume_type", ["iser", "fibre_channel"])
@pytest.mark.parametrize("value", [True, 2.0, "0x2"], ids=["true", "2.0", "hex"])
def test_iser_and_fc_luns_are_read_as_strictly(volume_type: str, value: object) -> None:
    info = iscsi(target_lun=value)
    info["driver_volume_type"] = volume_type
    with pytest.raises(InvalidConnectionInfo, match=r"data\.target_lun: .* is not a LUN number"):
        parse(info)


def test_target_luns_must_be_a_list() -> None:
    with pytest.raises(InvalidConnectionInfo, match=r"data\.target_luns: 2 is not a list"):
        parse(iscsi(target_lun=2, target_luns=2))


def test_integers_and_decimal_strings_are_luns() -> None:
    assert parse(iscsi(target_lun="2", target_luns=[2, "2"])).data_before_connect() == \
        ("key", "iscsi", IQN, "2")
    fc = {"driver_volume_type": "fibre_channel",
          "data": {"volume_id": "v1", "target_wwn": "500601603ce0021d", "target_lun": "3"}}
    parse(fc)


# ---- the connected device, against a sysfs laid out as the kernel does --------------------------


@pytest.fixture
def sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """sdb: LUN 2 of an iSCSI session to IQN; sdc: LUN 2 of a SATA port, in no session."""
    sys = tmp_path / "sys"
    scsi = (sys / "devices" / "platform" / "host3" / "session1" / "target3:0:0" / "3:0:0:2")
    sata = (sys / "devices" / "pci0000:00" / "0000:00:1f.2" / "ata1" / "host0" / "target0:0:0"
            / "0:0:0:2")
    for disk, device in (("sdb", scsi), ("sdc", sata)):
        device.mkdir(parents=True)
        (sys / "block" / disk).mkdir(parents=True)
        (sys / "block" / disk / "device").symlink_to(device)
    session = sys / "class" / "iscsi_session" / "session1"
    session.mkdir(parents=True)
    (session / "targetname").write_text(IQN + "\n")
    monkeypatch.setattr(deviceid, "SYS", sys)
    return sys


@pytest.mark.parametrize("spelling", [2, "2", [2], ["2"], [3, 2]])
def test_the_session_disk_passes_for_its_lun_in_any_accepted_spelling(
        sysfs: Path, spelling: object) -> None:
    key = "target_luns" if isinstance(spelling, list) else "target_lun"
    assert deviceid.mismatch("ISCSI", {"target_iqn": IQN, key: spelling}, "/dev/sdb") is None


@pytest.mark.parametrize("spelling", [3, "3", [3]])
def test_another_lun_in_any_accepted_spelling_is_named(sysfs: Path, spelling: object) -> None:
    key = "target_luns" if isinstance(spelling, list) else "target_lun"
    assert deviceid.mismatch("ISCSI", {"target_iqn": IQN, key: spelling}, "/dev/sdb") == \
        "/dev/sdb is LUN 2, connection_info says 3"


@pytest.mark.parametrize("spelling", [True, 2.0, "0x2", -2, [True], ["0x2"]],
                         ids=["true", "2.0", "hex", "negative", "[true]", "[hex]"])
@pytest.mark.parametrize("protocol", ["ISCSI", "ISER", "FIBRE_CHANNEL"])
def test_a_lun_that_is_no_number_is_a_mismatch_not_skipped(
        sysfs: Path, protocol: str, spelling: object) -> None:
    key = "target_luns" if isinstance(spelling, list) else "target_lun"
    said = deviceid.mismatch(protocol, {"target_iqn": IQN, key: spelling}, "/dev/sdb")
    assert said is not None and said.endswith("is not a LUN number"), said


@pytest.mark.parametrize("protocol", ["ISCSI", "ISER"])
def test_a_scsi_disk_in_no_iscsi_session_is_not_an_iscsi_volume(sysfs: Path,
                                                                protocol: str) -> None:
    for props in ({"target_iqn": IQN, "target_lun": 2}, {"target_lun": 2}, {}):
        assert deviceid.mismatch(protocol, props, "/dev/sdc") == \
            "/dev/sdc is a SCSI disk in no iSCSI session"
    assert deviceid.mismatch(protocol, {"target_lun": 2}, "/dev/sdb") is None


# ---- the names compared beside the LUN: text, or refused ----------------------------------------


@pytest.mark.parametrize(("volume_type", "key", "value"), [
    ("iscsi", "target_iqns", [IQN, 7]), ("iscsi", "target_iqns", IQN),
    ("fibre_channel", "target_wwn", 5),
    ("fibre_channel", "target_wwns", ["500601603ce0021d", None]),
])
def test_a_target_name_that_is_not_text_is_refused(volume_type: str, key: str,
                                                   value: object) -> None:
    info = iscsi(target_lun=2, **{key: value})
    info["driver_volume_type"] = volume_type
    with pytest.raises(InvalidConnectionInfo, match=rf"data\.{key}: .* is not a"):
        parse(info)


@pytest.mark.parametrize(("protocol", "props", "device"), [
    ("ISCSI", {"target_iqns": [IQN, 7], "target_lun": 2}, "/dev/sdb"),
    ("FIBRE_CHANNEL", {"target_wwn": 5, "target_lun": 2}, "/dev/sdb"),
    ("NVMEOF", {"target_nqn": ["nqn.x", 1]}, "/dev/nvme0n1"),
    ("NVMEOF", {"vol_uuid": 123}, "/dev/nvme0n1"),
    ("RBD", {"name": 5}, "/dev/rbd0"),
])
def test_a_recorded_name_that_is_not_text_is_a_mismatch_not_skipped(
        sysfs: Path, protocol: str, props: dict[str, Any], device: str) -> None:
    said = deviceid.mismatch(protocol, props, device)
    assert said is not None and said.endswith("is not a string"), said
