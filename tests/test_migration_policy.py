"""The rules of live migration as a truth table: no libvirtd needed."""

from __future__ import annotations

import pytest

from virtdriver.errors import MigrationRefused, VolumeInUse
from virtdriver.policy.migration import Arrival, refuse_leaving, refuse_unprepared, still_arriving
from virtdriver.policy.sharing import Use, refuse_attach, still_used

UUID = "0b7c8d4e-1f2a-4b3c-8d9e-0f1a2b3c4d5e"
ARRIVAL = Arrival(UUID, "vol-1", ("dev", "7:0"), shareable=False, readonly=False)


def disk(cache: str | None, shareable: bool = True) -> Use:
    return Use("a", UUID, "vol-1", ("dev", "7:0"), shareable=shareable, readonly=False,
               cache=cache, device="sdb")


@pytest.mark.parametrize("present, waiting", [
    ([], True),
    ([("other", "11111111-2222-3333-4444-555555555555")], True),
    ([("guest-a", UUID)], False),                      # arrived: its own disk counts now
    ([("guest-a", UUID.upper().replace("-", ""))], False),  # UUIDs in any spelling
])
def test_an_arrival_counts_until_its_guest_is_there(present, waiting) -> None:
    assert (still_arriving([ARRIVAL], present) == [ARRIVAL]) is waiting


def test_an_arriving_guest_is_a_user_for_the_sharing_rules() -> None:
    use = ARRIVAL.as_use()
    assert still_used("vol-1", None, [use]) == [f"{UUID} (arriving by live migration)"]
    with pytest.raises(VolumeInUse, match="not multiattach"):
        refuse_attach("vol-1", None, False, "someone-else", "b", [use])
    with pytest.raises(VolumeInUse, match="under another name"):
        refuse_attach("vol-2", ("dev", "7:0"), True, "someone-else", "b", [use])


@pytest.mark.parametrize("cache, shareable, refused", [
    ("none", True, False), ("directsync", True, False), ("writeback", True, True),
    (None, True, True), ("writeback", False, False), ("unsafe", True, True),
])
def test_a_shared_disk_may_leave_only_uncached(cache, shareable, refused) -> None:
    if refused:
        with pytest.raises(MigrationRefused, match="cache='none'"):
            refuse_leaving("a", [disk(cache, shareable)])
    else:
        refuse_leaving("a", [disk(cache, shareable)])


def test_every_volume_must_be_prepared() -> None:
    refuse_unprepared("a", ["v1", "v2"], {"v1": 1, "v2": 2})
    with pytest.raises(MigrationRefused, match="volumes v2, v3 were not prepared"):
        refuse_unprepared("a", ["v1", "v2", "v3"], ["v1"])


@pytest.mark.parametrize("raw", [
    {"guest": 1, "volume": "v"}, {"guest": "g"}, {"guest": "g", "volume": "v", "data": "x"},
    {"guest": "g", "volume": "v", "data": [1]},
])
def test_a_damaged_arrival_is_refused(raw) -> None:
    with pytest.raises(ValueError):
        Arrival.from_json(raw)


def test_an_arrival_round_trips() -> None:
    assert Arrival.from_json(ARRIVAL.to_json()) == ARRIVAL
    unknown = Arrival("g", "v", None, True, True)
    assert Arrival.from_json(unknown.to_json()) == unknown
