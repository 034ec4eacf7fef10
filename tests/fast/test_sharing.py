"""The sharing rules as truth tables: pure functions, no libvirtd needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from virtdriver.errors import (
    InvalidRequest,
    MultiattachNotSupported,
    PolicyRefusal,
    SwapRefused,
    VolumeInUse,
)
from virtdriver.policy.identity import (
    alias_for,
    decode_volume_id,
    encode_volume_id,
    volume_id_problem,
    volume_of_alias,
)
from virtdriver.policy.sharing import (
    Use,
    dangers,
    refuse_attach,
    refuse_fan_out,
    still_used,
)
from virtdriver.policy.swap import refuse_swap

DEV = ("dev", "7:3")
OTHER_DEV = ("dev", "7:4")


def use(guest: str, volume: str | None = "v1", *, data=DEV, shareable: bool = True,
        readonly: bool = False, cache: str | None = "none", fmt: str | None = "raw",
        labels: tuple[str, ...] = ()) -> Use:
    return Use(guest=guest, guest_uuid=f"uuid-{guest}", volume=volume, data=data,
               shareable=shareable, readonly=readonly, cache=cache, format=fmt, labels=labels,
               device="sda")


# (existing users, multiattach, refused?) for attaching v1 (data DEV) to guest "new"
ATTACH_TABLE = [
    ([], False, None),
    ([], True, None),
    ([use("a", shareable=False)], False, VolumeInUse),       # second user, not multiattach
    ([use("a")], False, VolumeInUse),                         # same, even if shareable there
    ([use("a")], True, None),                                 # multiattach, shared
    ([use("a", shareable=False)], True, VolumeInUse),         # multiattach but unshared there
    ([use("a", readonly=True)], True, None),
    ([use("new")], True, VolumeInUse),                        # already in this guest
    ([use("a", volume="v2")], True, VolumeInUse),             # same data, another id
    ([use("a", volume=None)], True, VolumeInUse),             # same data outside virtdriver
    ([use("a", volume="v2", data=OTHER_DEV)], False, None),   # other data: no matter
    ([use("a", data=None)], True, None),
]


@pytest.mark.parametrize(("uses", "multiattach", "refusal"), ATTACH_TABLE)
def test_attach_truth_table(uses: list[Use], multiattach: bool, refusal) -> None:
    if refusal is None:
        refuse_attach("v1", DEV, multiattach, "uuid-new", "new", uses)
    else:
        with pytest.raises(refusal) as caught:
            refuse_attach("v1", DEV, multiattach, "uuid-new", "new", uses)
        assert isinstance(caught.value, PolicyRefusal) and caught.value.exit_code == 3
        assert "\n" not in str(caught.value)


def test_same_data_under_another_id_names_the_other_guest_and_volume() -> None:
    with pytest.raises(VolumeInUse, match=r"used by a \(volume v2\)"):
        refuse_attach("v1", DEV, True, "uuid-new", "new", [use("a", volume="v2")])


@pytest.mark.parametrize(("guests", "multiattach", "refusal"), [
    (["a"], False, None),
    (["a", "b"], True, None),
    (["a", "b"], False, MultiattachNotSupported),
    ([], True, InvalidRequest),
    (["a", "a"], True, InvalidRequest),
])
def test_fan_out_truth_table(guests: list[str], multiattach: bool, refusal) -> None:
    if refusal is None:
        refuse_fan_out("v1", multiattach, guests)
    else:
        with pytest.raises(refusal):
            refuse_fan_out("v1", multiattach, guests)


@pytest.mark.parametrize(("uses", "new", "refused"), [
    ([use("g")], "v2", False),
    ([use("g"), use("a", readonly=True)], "v2", False),   # other guest only reads
    ([use("g"), use("a")], "v2", True),                    # other guest writes: lost writes
    ([use("g")], "v1", True),                              # with itself
])
def test_swap_truth_table(uses: list[Use], new: str, refused: bool) -> None:
    if refused:
        with pytest.raises((SwapRefused, VolumeInUse)):
            refuse_swap("v1", new, "uuid-g", "g", uses)
    else:
        refuse_swap("v1", new, "uuid-g", "g", uses)


def test_still_used_counts_the_volume_and_its_data_under_any_name() -> None:
    assert still_used("v1", DEV, []) == []
    assert still_used("v1", DEV, [use("a")]) == ["a"]
    assert still_used("v1", DEV, [use("b", volume="v9")]) == ["b"]
    assert still_used("v1", None, [use("b", volume="v9")]) == []
    assert still_used("v1", DEV, [use("c", volume="v9", data=OTHER_DEV)]) == []


@pytest.mark.parametrize(("uses", "kinds"), [
    ([use("a"), use("b", readonly=True)], []),
    ([use("a", shareable=False), use("b")], ["unshared"]),
    ([use("a", readonly=True, shareable=False), use("b", readonly=True, shareable=False)], []),
    ([use("a", cache="writeback"), use("b")], ["cache"]),
    ([use("a", fmt="qcow2")], ["format"]),
    ([use("a", labels=("dac:relabel=no",)), use("b")], ["labels"]),
    ([use("a"), use("b", volume="v2")], ["identity"]),
])
def test_dangers_truth_table(uses: list[Use], kinds: list[str]) -> None:
    assert [d.kind for d in dangers(uses)] == kinds


@given(st.text(min_size=1, max_size=80))
def test_any_volume_id_round_trips_through_its_alias(vid: str) -> None:
    if volume_id_problem(vid) is not None:
        return
    alias = alias_for(vid)
    assert alias.startswith("ua-") and all(c.isascii() and (c.isalnum() or c in "_-")
                                           for c in alias)
    assert volume_of_alias(alias) == vid
    assert decode_volume_id(encode_volume_id(vid)) == vid
    second = alias_for(vid, {alias})
    assert second != alias and volume_of_alias(second) == vid


@pytest.mark.parametrize(("vid", "alias"), [
    ("4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e", "ua-4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e"),
    ("vol.1", "ua-vol_2e1"),
    ("a_b", "ua-a_5fb"),
])
def test_aliases_are_readable_for_plain_ids(vid: str, alias: str) -> None:
    assert alias_for(vid) == alias


def test_foreign_aliases_name_no_volume() -> None:
    assert volume_of_alias("scsi0-0-0-0") is None
    assert volume_of_alias("ua-bad_zz") is None
    assert volume_of_alias(None) is None


def test_the_users_filter_finds_an_id_carried_encoded_in_an_alias() -> None:
    """nova's "may the host connection go?" reads only XML that mentions the volume: an id such
    as ``vol.1`` stands there only encoded (``ua-vol_2e1``), and must still be found."""
    from virtdriver.hypervisor.domains import _read_xml

    xml = ("<domain><name>g</name><uuid>u</uuid><devices><disk type='file' device='disk'>"
           "<source file='/x'/><target dev='sda' bus='scsi'/><alias name='ua-vol_2e1'/>"
           "</disk></devices></domain>")
    assert len(_read_xml(xml, "vol.1").disks) == 1
    assert _read_xml(xml, "vol-2").disks == []
