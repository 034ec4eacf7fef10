"""Arrivals are read from every host-connection record on every attach and detach; the records
without any are skipped unparsed. Whatever a record's text, what is found is what parsing every
record finds."""

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
