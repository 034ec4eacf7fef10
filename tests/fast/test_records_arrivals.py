"""Arrivals are read from every host-connection record on every attach and detach: whatever a
record's text, what is found is what parsing every record finds."""

from __future__ import annotations

import json
from pathlib import Path

from virtdriver.errors import StateError
from virtdriver.hypervisor.hostconn import HostConnections, HostRecord
from virtdriver.policy.migration import Arrival

ARRIVAL = {"guest": "g1", "volume": "v", "data": ["dev", "7:1"], "shareable": True,
           "readonly": False}


def slow_arrivals(records: HostConnections) -> list[Arrival]:
    found = []
    for path in records._paths():
        try:
            _, record = records._read(path)
        except StateError:
            continue
        found += [Arrival.from_json(a) for a in (record.arriving if record else [])]
    return found


def test_arrivals_match_a_full_parse_of_every_record(tmp_path: Path) -> None:
    records = HostConnections(tmp_path)
    records.save("none", HostRecord(protocol="LOCAL", properties={"device_path": "/dev/x"}))
    records.save("one", HostRecord(arriving=[ARRIVAL]))
    records.save("nested", HostRecord(properties={"arriving": [], "x": '"arriving": []'},
                                      arriving=[dict(ARRIVAL, guest="g2")]))
    records.save("nested-only", HostRecord(properties={"arriving": [ARRIVAL]}))
    (records.records / "hand.json").write_text(json.dumps(
        {"volume_id": "hand", "arriving": [dict(ARRIVAL, guest="g3")]}, indent=1))
    (records.records / "dupe.json").write_text(
        '{"volume_id": "dupe", "arriving": [], "arriving": [' + json.dumps(ARRIVAL) + ']}')
    (records.records / "damaged.json").write_text('{"arriving": [{"guest": 1}]')
    (records.records / "binary.json").write_bytes(b"\xff\xfe")
    (records.records / "empty.json").write_text("")
    found = sorted(a.guest for a in records.arrivals())
    assert found == sorted(a.guest for a in slow_arrivals(records)) == ["g1", "g1", "g2", "g3"]


def test_the_listing_that_finds_arrivals_says_which_volumes_have_a_record(tmp_path: Path) -> None:
    """An attach reads the host (arrivals included) under the volume's lock, and only that
    lock's holder makes or removes the volume's record: the listing then says whether the
    volume has one, so a new volume's record is not looked for again. A damaged record in the
    listing still stops the attach; without a listing, the record is read as before."""
    from virtdriver.driver.compute_host import ComputeHost
    from virtdriver.driver.options import HostOptions
    from virtdriver.errors import DamagedRecord
    from virtdriver.hypervisor.domains import DomainsView

    host = ComputeHost("qemu:///system", HostOptions(state_dir=tmp_path))
    assert host.records.arrivals_listed() == ([], frozenset())  # no directory yet
    host.records.save("kept", HostRecord(protocol="LOCAL", arriving=[ARRIVAL]))
    (host.records.records / "damaged.json").write_text("{")
    found, names = host.records.arrivals_listed()
    assert [a.guest for a in found] == ["g1"]
    assert names == frozenset({"kept.json", "damaged.json"})
    view = DomainsView([], [], names)
    assert host.check_record("kept", view).protocol == "LOCAL"
    assert host.check_record("new", view) == HostRecord()
    for seen in (view, DomainsView([], [], None), None):
        try:
            host.check_record("damaged", seen)
            raise AssertionError("a damaged record was not refused")
        except DamagedRecord:
            pass
    # a listing taken before a record appeared (never the case under the volume's lock) is
    # what is believed: the listing, not another look, answers
    host.records.save("later", HostRecord(protocol="LOCAL"))
    assert host.check_record("later", view) == HostRecord()
    assert host.check_record("later", None).protocol == "LOCAL"


def test_the_kept_names_follow_every_change_another_process_makes(tmp_path: Path) -> None:
    """A long-running driver reads the records on every look: after any mix of saves, removals,
    renames over a record, a record removed and made again between two looks, and files that
    are not records, what it finds is what a fresh look (a new process) finds."""
    import os
    import random

    kept = HostConnections(tmp_path)
    other = HostConnections(tmp_path)  # another process
    other.save("v0", HostRecord(protocol="LOCAL"))
    kept.arrivals_listed()
    rng = random.Random(23)
    ids = [f"v{i}" for i in range(12)]
    for step in range(300):
        for _ in range(rng.randint(0, 3)):
            vid = rng.choice(ids)
            what = rng.random()
            if what < 0.4:
                arriving = [dict(ARRIVAL, guest=f"g{step}")] if rng.random() < 0.5 else []
                other.save(vid, HostRecord(protocol="LOCAL", arriving=arriving))
            elif what < 0.6:
                other.forget(vid)
            elif what < 0.75:  # removed and made again, with other notes, before a look
                other.forget(vid)
                other.save(vid, HostRecord(arriving=[dict(ARRIVAL, guest=f"again{step}")]))
            elif what < 0.9 and other.path(vid).exists():  # renamed to another record's name
                os.rename(other.path(vid), other.path(rng.choice(ids)))
            else:  # not a record: never listed
                (other.records / f"{vid}.json.tmp").write_text("{")
        found, names = kept.arrivals_listed()
        fresh, fresh_names = HostConnections(tmp_path).arrivals_listed()
        assert names == fresh_names, step
        assert sorted(a.guest for a in found) == sorted(a.guest for a in fresh), step
