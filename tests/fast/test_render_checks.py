"""The render's checks of portals, targets and host options hold on every call, repeated."""

from __future__ import annotations

import pytest

from virtdriver.errors import InvalidConnectionInfo
from virtdriver.volume.base import split_portal


class Text(str):
    pass


def test_an_invalid_portal_is_refused_every_time_a_valid_one_is_answered_again() -> None:
    for _ in range(2):
        with pytest.raises(InvalidConnectionInfo, match="port"):
            split_portal("192.0.2.5:99999", "data.target_portal")
        with pytest.raises(InvalidConnectionInfo):
            split_portal("bad host name:3260", "data.target_portal")
        assert split_portal("192.0.2.5:3260", "data.target_portal") == ("192.0.2.5", 3260)
        assert split_portal("[2001:db8::5]:3260", "data.target_portal") == ("2001:db8::5", 3260)


def test_a_target_found_valid_does_not_let_a_look_alike_through() -> None:
    from virtdriver import build_disk
    from virtdriver.errors import InvalidRenderOption

    info = {"driver_volume_type": "local", "data": {"device_path": "/dev/sdz"}}
    for _ in range(2):
        assert build_disk(info, target_dev="sdb", bus="scsi", scsi_unit=1).address.unit == "1"
        # equal to the kept key (True == 1, a str subclass == "sdb") but not valid input
        with pytest.raises(InvalidRenderOption, match="scsi_unit"):
            build_disk(info, target_dev="sdb", bus="scsi", scsi_unit=True)
        with pytest.raises(InvalidRenderOption, match="does not fit bus"):
            build_disk(info, target_dev="vdb", bus="scsi")
        with pytest.raises(InvalidRenderOption, match="scsi_unit"):
            build_disk(info, target_dev="sdb", bus="scsi", scsi_unit=20000)
        disk = build_disk(info, target_dev=Text("sdb"), bus="scsi", scsi_unit=1)  # checked
        assert disk.target.dev == "sdb"


def test_host_options_left_at_their_defaults_or_not_are_checked() -> None:
    from virtdriver import build_disk
    from virtdriver.errors import InvalidRenderOption

    info = {"driver_volume_type": "local", "data": {"device_path": "/dev/sdz"}}
    build_disk(info)  # every option at its default
    for bad in ({"native_iscsi": 0}, {"native_glusterfs": "false"}, {"mount_base": ""},
                {"initiator_iqn": "a\nb"}):
        with pytest.raises(InvalidRenderOption):
            build_disk(info, **bad)
    with pytest.raises(InvalidRenderOption, match="shared_image_label"):
        build_disk(info, label_policy="explicit", shared_image_label="bad\x00label")
