"""The rules of live migration as a truth table: no libvirtd needed.

Which guest counts as arriving, which disks may leave, what a disk keeps or must agree on when it
arrives (policy/carryover.py), where the guest is after libvirt's call and what that decides, when
the source may release, and interrupts held back until a checkpoint."""

from __future__ import annotations

import pytest

from virtdriver.config import (
    Address,
    Alias,
    BlockIO,
    Boot,
    Disk,
    Driver,
    IoTune,
    SecLabel,
    Source,
    Target,
)
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


# ---- a disk arrives as it left (policy/carryover.py) --------------------------------------------

def shared_disk(**changes: object) -> Disk:
    disk = Disk(type="block", device="disk",
                driver=Driver(name="qemu", type="raw", cache="none", io="native", discard="unmap"),
                source=Source(dev="/dev/loop7", seclabels=[SecLabel(model="dac", relabel="no")]),
                target=Target(dev="sdb", bus="scsi"), iotune=IoTune(total_iops_sec=100),
                shareable=True, serial="vol-1", alias=Alias(name="ua-vol-1"),
                address=Address.drive(1), boot=Boot(order=2))
    for name, value in changes.items():
        owner, _, field = name.rpartition("__")
        setattr(getattr(disk, owner) if owner else disk, field, value)
    return disk


PROMISED = [  # field, a change of the destination's rendering that breaks it
    ("shareable", {"shareable": False}), ("readonly", {"readonly": True}),
    ("format", {"driver__type": "qcow2"}), ("discard", {"driver__discard": None}),
    ("iotune", {"iotune": None}), ("blockio", {"blockio": BlockIO(logical_block_size=4096)}),
    ("serial", {"serial": "other"}), ("wwn", {"wwn": "5000c5"}),
    ("vendor", {"vendor": "V"}), ("product", {"product": "P"}), ("device", {"device": "lun"}),
    ("sgio", {"sgio": "unfiltered"}), ("rawio", {"rawio": "yes"}),
    ("transient", {"transient": True}), ("labels", {"source__seclabels": []}),
]


@pytest.mark.parametrize("field, change", PROMISED, ids=[f for f, _ in PROMISED])
def test_a_broken_promise_is_named(field, change) -> None:
    from virtdriver.policy.carryover import PROMISES, broken_promises, carried_over, refuse_changed

    leaving, rendered = shared_disk(), shared_disk(**change)
    arriving = carried_over(leaving, rendered)
    assert broken_promises(leaving, arriving) == [field]
    with pytest.raises(MigrationRefused, match=f"would arrive with {field}=") as refused:
        refuse_changed("a", "vol-1", leaving, arriving)
    assert "\n" not in str(refused.value) and PROMISES[field][1] in str(refused.value)
    assert {f for f, _ in PROMISED} == set(PROMISES)  # every promise has a row here


@pytest.mark.parametrize("change", [
    {"driver__cache": "directsync"}, {"driver__io": "threads"}, {"driver__cache": None},
    {"target": None}, {"address": None}, {"alias": None}, {"boot": None},
])
def test_what_is_carried_over_is_the_leaving_disks(change) -> None:
    from virtdriver.policy.carryover import broken_promises, carried_over

    leaving, rendered = shared_disk(), shared_disk(**change)
    arriving = carried_over(leaving, rendered)
    assert broken_promises(leaving, arriving) == []
    assert (arriving.driver, arriving.target, arriving.address, arriving.alias, arriving.boot) \
        == (leaving.driver, leaving.target, leaving.address, leaving.alias, leaving.boot)
    assert arriving.source == rendered.source  # the destination's own


def test_an_attachments_error_policies_are_carried_over() -> None:
    """What ``--error-policy``/``--rerror-policy`` chose at attach arrives as it left (#45)."""
    from virtdriver.policy.carryover import broken_promises, carried_over

    leaving = shared_disk(driver__cache="directsync", driver__error_policy="report",
                          driver__rerror_policy="stop")
    arriving = carried_over(leaving, shared_disk())  # the destination renders neither
    assert arriving.driver is not None and broken_promises(leaving, arriving) == []
    assert (arriving.driver.cache, arriving.driver.error_policy,
            arriving.driver.rerror_policy) == ("directsync", "report", "stop")


def test_a_directsync_shared_disk_is_carried_over_not_rendered_anew() -> None:
    from virtdriver.policy.carryover import carried_over

    leaving = shared_disk(driver__cache="directsync")
    arriving = carried_over(leaving, shared_disk(source__dev="/dev/sdz"))
    assert (arriving.driver.cache, arriving.source.dev) == ("directsync", "/dev/sdz")


# ---- where the guest is decides the outcome -----------------------------------------------------

@pytest.mark.parametrize("succeeded, on_source, on_destination, outcome", [
    (True, None, None, "moved"), (True, False, True, "moved"),
    (False, True, None, "stayed"), (False, True, False, "stayed"), (False, True, True, "stayed"),
    (False, False, True, "moved"), (False, None, True, "moved"),
    (False, False, False, "unknown"), (False, False, None, "unknown"),
    (False, None, None, "unknown"), (False, None, False, "unknown"),
])
def test_the_outcome_follows_where_the_guest_is(succeeded, on_source, on_destination,
                                                outcome) -> None:
    from virtdriver.policy.migration import guest_location

    assert guest_location(succeeded, on_source, on_destination) == outcome


@pytest.mark.parametrize("running, defined, leftover, refused", [
    (True, True, False, "still runs on this host"), (True, True, True, "still runs"),
    (False, True, False, "shut off on this host and has not left it"), (False, True, True, None),
    (False, False, False, None), (False, False, True, None),
])
def test_the_source_releases_only_once_the_guest_left(running, defined, leftover,
                                                      refused) -> None:
    from virtdriver.policy.migration import refuse_finish

    if refused is None:
        refuse_finish("a", running, defined, leftover)
    else:
        with pytest.raises(MigrationRefused, match=refused):
            refuse_finish("a", running, defined, leftover)


@pytest.mark.parametrize("running, said", [(True, "already runs on this host"),
                                           (False, "inactive definition .* leftover")])
def test_a_guest_cannot_arrive_over_its_own_definition(running, said) -> None:
    from virtdriver.policy.migration import refuse_arriving_over

    with pytest.raises(MigrationRefused, match=said):
        refuse_arriving_over("a", running)


def test_an_arrival_keeps_its_token() -> None:
    noted = Arrival(UUID, "vol-1", None, True, False, "c0ffee")
    assert Arrival.from_json(noted.to_json()) == noted
    with pytest.raises(ValueError):
        Arrival.from_json(noted.to_json() | {"token": 7})


def test_an_arrival_keeps_the_override_granted_to_it() -> None:
    granted = Arrival(UUID, "vol-1", None, True, False, "c0ffee", "ext4")
    assert Arrival.from_json(granted.to_json()) == granted
    assert "shared_write" not in ARRIVAL.to_json()  # a note of an older virtdriver reads so
    assert Arrival.from_json(ARRIVAL.to_json()).shared_write is None
    with pytest.raises(ValueError):
        Arrival.from_json(granted.to_json() | {"shared_write": True})


def test_override_notes_go_into_a_domain_xml_as_libvirt_keeps_them() -> None:
    from lxml import etree

    from virtdriver.hypervisor.metadata import Override, overrides_in, set_overrides_in

    root = etree.fromstring("<domain><name>g</name></domain>")
    notes = {"ua-v": Override("ext4", "v", "dev|/dev/loop3"), "ua-w": Override("xfs", "w", "", 4)}
    set_overrides_in(root, notes)
    assert overrides_in(root) == notes
    assert etree.fromstring(etree.tostring(root)).find(
        "metadata/{https://virtdriver.dev/xmlns/overrides/1}overrides") is not None
    set_overrides_in(root, {})
    assert overrides_in(root) == {} and root.find("metadata") is not None


# ---- interrupts are held back, not lost -------------------------------------------------------

@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupt_is_held_back_until_a_checkpoint(sig) -> None:
    import os
    import signal

    from virtdriver.driver.interrupts import Interrupted, Interrupts

    number = getattr(signal, sig)
    before = signal.getsignal(number)
    answered: list[int] = []
    with Interrupts() as held:
        with held.answering(lambda: answered.append(1)):
            os.kill(os.getpid(), number)  # handled at once in this (main) thread; no exception
        assert held.received == number and answered == [1]
        with pytest.raises(Interrupted, match=f"{sig}: nothing moved"):
            held.check("nothing moved")
    assert signal.getsignal(number) is before
