"""Answers kept for inputs once found valid (``virtdriver/answers.py``): never a refusal, only
keys of exactly the declared type, at most ``limit`` of them; and the render paths that use it
still refuse an invalid portal, share host or QoS limit every time."""

from __future__ import annotations

import pytest

from virtdriver.answers import ValidAnswers
from virtdriver.errors import InvalidConnectionInfo
from virtdriver.volume.base import split_portal


class Text(str):
    pass


def test_kept_only_for_exact_keys_and_up_to_the_limit() -> None:
    answers: ValidAnswers[str, int] = ValidAnswers(str, 2)
    assert answers.get("a") is None
    assert answers.keep("a", 1) == 1 and answers.get("a") == 1
    assert answers.keep(Text("b"), 2) == 2 and answers.get(Text("b")) is None  # a subclass
    assert answers.get(["unhashable"]) is None  # an input of another type is never looked up
    answers.keep("b", 2)
    answers.keep("c", 3)  # full: answered, not kept
    assert (answers.get("b"), answers.get("c"), len(answers)) == (2, None, 2)


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
