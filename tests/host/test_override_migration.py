"""An ``--allow-shared-write`` note travels with its guest (#56, item 11 after a migration).

The note is keyed to the attachment: its volume, the disk's source and the ``index`` libvirt gave
that source in the running guest. A guest that arrives by live migration gets its disk plugged
afresh (another index, and the destination's source), so the note is written for the arriving
disk and keyed to the index it got once it has arrived; an override granted by the destination's
own guard at the arrival is noted too. Real guests on the host's libvirtd and on the private
second one (tests/support/migration.py), a real loop device holding what ``mkfs`` made.
"""

from __future__ import annotations

import subprocess
from typing import Any

import libvirt
import pytest
from lxml import etree

from testhosts.guests import DeviceEvents
from tests.support.migration import (  # noqa: F401 - fixtures, found by name
    dest_conn,
    dest_guests,
    destination_daemon,
    drivers,
    migration_uri,
)
from tests.support.volumes import local_volume
from virtdriver.ops.audit import audit_host

pytestmark = pytest.mark.hypervisor


def ext4_volume(device: str) -> tuple[dict[str, Any], str]:
    subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True, capture_output=True)
    info = local_volume(device, multiattach=True)
    return info, info["data"]["volume_id"]


def written_by(driver: Any, vid: str) -> str:
    """What audit says of the volume's writers on ``driver``'s host (one filesystem danger)."""
    report = audit_host(driver.connection.get(), driver.state_dir)
    (found,) = [d.message for v, d in report.dangers if d.kind == "filesystem" and v.volume == vid]
    return found


def source_index(dom: libvirt.virDomain, alias: str) -> str | None:
    """The ``index`` of the live disk ``alias``'s source."""
    root = etree.fromstring(dom.XMLDesc(0))
    (source,) = root.xpath(f"devices/disk[alias/@name='{alias}']/source")
    return str(source.get("index"))


def replug_behind_virtdriver(conn: libvirt.virConnect, dom: libvirt.virDomain,
                             alias: str) -> None:
    """Unplug the live disk ``alias`` and plug it again with libvirt alone: a new attachment."""
    (disk,) = etree.fromstring(dom.XMLDesc(0)).xpath(f"devices/disk[alias/@name='{alias}']")
    for node in disk.iter("source"):
        node.attrib.pop("index", None)
    plugged = etree.tostring(disk, encoding="unicode")
    with DeviceEvents(conn) as events:
        dom.detachDeviceFlags(plugged, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        events.wait_removed(dom, alias)
    dom.attachDeviceFlags(plugged, libvirt.VIR_DOMAIN_AFFECT_LIVE)


def test_an_override_note_survives_a_migration(guests, dest_guests, drivers,
                                               loop_device) -> None:
    """B writes by the override on the source, its disk plugged twice there (index 2); it moves
    to a host where it is the only writer, and N joins it there by the override: audit names
    both, not N alone."""
    source, destination = drivers
    info, vid = ext4_volume(loop_device.device)
    a, b = guests.start("a"), guests.start("b")
    source.attach_volume(info, a.name())
    source.attach_volume(info, b.name(), allow_shared_write=True)
    source.detach_volume(b.name(), vid)
    source.attach_volume(info, b.name(), allow_shared_write=True)
    assert f"({b.name()} by --allow-shared-write)" in written_by(source, vid)
    leaving_index = source_index(b, f"ua-{vid}")
    dest_guests.adopt(b.name())

    source.migrate(b.name(), destination, [info], uri=migration_uri())

    moved = destination.connection.get().lookupByName(b.name())
    assert source_index(moved, f"ua-{vid}") != leaving_index  # plugged afresh there
    n = dest_guests.start("n")
    destination.attach_volume(info, n.name(), allow_shared_write=True)
    said = written_by(destination, vid)
    assert f"({b.name()}, {n.name()} by --allow-shared-write)" in said, said
    source.detach_volume(a.name(), vid)
    destination.detach_volume(n.name(), vid)
    destination.detach_volume(b.name(), vid)


def test_an_override_granted_at_the_arrival_is_noted(guests, dest_guests, dest_conn, drivers,
                                                     loop_device) -> None:
    """N writes on the destination; A, the only writer on the source, moves there with
    allow_shared_write: audit on the destination says A chose to write beside N, until A's
    disk is plugged again there behind virtdriver's back."""
    source, destination = drivers
    info, vid = ext4_volume(loop_device.device)
    n = dest_guests.start("n")
    destination.attach_volume(info, n.name())
    a = guests.start("a")
    source.attach_volume(info, a.name())
    dest_guests.adopt(a.name())

    source.migrate(a.name(), destination, [info], uri=migration_uri(), allow_shared_write=True)

    said = written_by(destination, vid)
    assert f"({a.name()} by --allow-shared-write)" in said, said
    # keyed to the disk A got there: the same disk plugged again is not the override's
    replug_behind_virtdriver(dest_conn, dest_conn.lookupByName(a.name()), f"ua-{vid}")
    said = written_by(destination, vid)
    assert "(not by virtdriver's override)" in said, said
    destination.detach_volume(n.name(), vid)
    destination.detach_volume(a.name(), vid)


def test_the_manual_steps_note_the_override_for_the_disk_that_arrived(
        guests, dest_guests, dest_conn, drivers, loop_device) -> None:
    """prepare_incoming with allow_shared_write, incoming_xml, the caller's own migrate3 and
    complete_incoming: audit names A's override; once A's disk is unplugged and plugged again
    with libvirt alone (a new attachment), it no longer does."""
    source, destination = drivers
    info, vid = ext4_volume(loop_device.device)
    n = dest_guests.start("n")
    destination.attach_volume(info, n.name())
    a = guests.start("a", persistent=False)  # nothing of it stays on the source
    source.attach_volume(info, a.name())
    dest_guests.adopt(a.name(), persistent=False)
    uuid, alias = a.UUIDString(), f"ua-{vid}"

    destination.prepare_incoming(info, uuid, "rw", allow_shared_write=True)
    xml = destination.incoming_xml(a.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE), [info])
    a.migrate3(destination.connection.get(), {libvirt.VIR_MIGRATE_PARAM_DEST_XML: xml,
                                              libvirt.VIR_MIGRATE_PARAM_URI: migration_uri()},
               libvirt.VIR_MIGRATE_LIVE)
    source.finish_outgoing(uuid, vid)
    assert destination.complete_incoming(uuid, vid) is True

    said = written_by(destination, vid)
    assert f"({a.name()} by --allow-shared-write)" in said, said
    replug_behind_virtdriver(dest_conn, dest_conn.lookupByUUIDString(uuid), alias)
    said = written_by(destination, vid)
    assert "(not by virtdriver's override)" in said, said
    destination.detach_volume(n.name(), vid)
    destination.detach_volume(a.name(), vid)


def test_a_note_the_disk_no_longer_holds_stays_behind(guests, dest_guests, drivers,
                                                      loop_device) -> None:
    """B's disk, written by the override, is unplugged and plugged again with libvirt alone
    (not the override's attachment any more); B moves, N joins it there by the override: audit
    names N alone."""
    source, destination = drivers
    info, vid = ext4_volume(loop_device.device)
    a, b = guests.start("a"), guests.start("b", persistent=False)
    source.attach_volume(info, a.name())
    source.attach_volume(info, b.name(), allow_shared_write=True)
    replug_behind_virtdriver(b.connect(), b, f"ua-{vid}")
    assert "(not by virtdriver's override)" in written_by(source, vid)
    dest_guests.adopt(b.name(), persistent=False)

    source.migrate(b.name(), destination, [info], uri=migration_uri())

    n = dest_guests.start("n")
    destination.attach_volume(info, n.name(), allow_shared_write=True)
    said = written_by(destination, vid)
    assert f"({n.name()} by --allow-shared-write)" in said, said
    source.detach_volume(a.name(), vid)
    destination.detach_volume(n.name(), vid)
    destination.detach_volume(b.name(), vid)
