"""A guest arriving by live migration meets the rules an attach meets (#56, items 4 and 12).

On the destination, the preparation of a volume is refused by the shared-write guard as an attach
of the same guest would be; the guest's XML is not rendered with a shared disk cached on the
host; and the note that the guest is arriving goes away under the locks an attach's read relies
on. Real guests, real loop devices holding what ``mkfs`` made, and the private second libvirtd of
tests/support/migration.py.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from typing import Any

import libvirt
import pytest

from tests.support.migration import (  # noqa: F401 - fixtures, found by name
    arriving_notes,
    dest_conn,
    dest_guests,
    destination_daemon,
    drivers,
    migration_uri,
    run_cli,
    shared_volume,
    volume_file,
)
from tests.support.volumes import local_volume
from virtdriver.errors import MigrationRefused, SharedWriteRefused
from virtdriver.hypervisor.dataid import identity_token
from virtdriver.hypervisor.locks import locks

pytestmark = pytest.mark.hypervisor


def ext4(device: str) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True, capture_output=True)


def written_on_destination(dest_guests: Any, destination: Any, device: str) -> tuple[Any, dict]:
    """A guest on the destination that writes a multiattach volume holding ext4."""
    ext4(device)
    n = dest_guests.start("n")
    info = local_volume(device, multiattach=True)
    destination.attach_volume(info, n.name(), attach_mode="rw")
    return n, info


# ---- item 4: the arrival goes through the attach's guard -----------------------------------

def test_an_arrival_as_a_second_writer_of_ext4_is_refused_like_an_attach(
        dest_guests, drivers, loop_device) -> None:
    _, destination = drivers
    n, info = written_on_destination(dest_guests, destination, loop_device.device)
    vid = info["data"]["volume_id"]
    arriving = str(uuid.uuid4())

    with pytest.raises(SharedWriteRefused) as refused:
        destination.prepare_incoming(info, arriving, "rw")
    message = str(refused.value)
    assert f"volume {vid} holds ext4" in message and n.name() in message
    assert f"{arriving} (arriving by live migration)" in message
    assert "--allow-shared-write" in message and "\n" not in message
    # Nothing changed: N keeps the volume and its host connection, no arrival is noted.
    assert destination.records.connected() == [vid] and arriving_notes(destination) == []

    destination.prepare_incoming(info, arriving, "ro")  # a reader beside the writer: allowed
    assert destination.abort_incoming(arriving, vid) is True
    destination.prepare_incoming(info, arriving, "rw", allow_shared_write=True)  # overridden
    assert [a["guest"] for a in arriving_notes(destination)] == [arriving]
    assert destination.abort_incoming(arriving, vid) is True
    destination.detach_volume(n.name(), vid)
    assert destination.records.connected() == []


def test_migrate_prepare_of_a_second_writer_exits_3(dest_guests, drivers, loop_device,
                                                    tmp_path) -> None:
    _, destination = drivers
    n, info = written_on_destination(dest_guests, destination, loop_device.device)
    vid = info["data"]["volume_id"]
    arriving = str(uuid.uuid4())
    argv = ["-c", destination.uri, "--state-dir", str(destination.state_dir), "migrate-prepare",
            str(volume_file(tmp_path, info)), arriving, "--attach-mode", "rw"]

    done = run_cli(*argv)
    assert done.returncode == 3, done.stderr
    assert f"volume {vid} holds ext4" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == "" and arriving_notes(destination) == []

    done = run_cli(*argv, "--allow-shared-write")
    assert done.returncode == 0, done.stderr
    assert destination.abort_incoming(arriving, vid) is True
    destination.detach_volume(n.name(), vid)


def test_a_migration_onto_a_second_writer_is_refused_and_nothing_moves(
        guests, dest_guests, drivers, loop_device) -> None:
    source, destination = drivers
    n, info = written_on_destination(dest_guests, destination, loop_device.device)
    vid = info["data"]["volume_id"]
    a = guests.start("a")
    source.attach_volume(info, a.name())  # the only writer on the source
    xml_before = a.XMLDesc(0)

    with pytest.raises(SharedWriteRefused, match=f"volume {vid} holds ext4"):
        source.migrate(a.name(), destination, [info], uri=migration_uri())

    assert a.isActive() and a.XMLDesc(0) == xml_before
    assert source.records.connected() == [vid]
    assert destination.records.connected() == [vid] and arriving_notes(destination) == []
    assert [x.volumeId for x in destination.list_attachments(n.name())] == [vid]
    source.detach_volume(a.name(), vid)
    destination.detach_volume(n.name(), vid)


def test_the_manual_path_refuses_a_shared_disk_cached_on_the_host(guests, drivers,
                                                                  loop_device) -> None:
    """A compute service's own steps: a shared disk that leaves with cache='writeback' is not
    rendered for the destination (the source's check is the ``migrate`` command's only)."""
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    xml = a.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE)
    assert xml.count("cache='none'") == 1
    cached = xml.replace("cache='none'", "cache='writeback'")  # as a disk attached by hand
    destination.prepare_incoming(info, a.UUIDString(), "rw")

    with pytest.raises(MigrationRefused) as refused:
        destination.incoming_xml(cached, [info])
    message = str(refused.value)
    assert "is shared with cache=writeback" in message and f"volume {vid}" in message
    assert "cache='none'" in message and "\n" not in message
    assert "<shareable/>" in destination.incoming_xml(xml, [info])  # uncached: rendered
    assert destination.abort_incoming(a.UUIDString(), vid) is True
    assert destination.records.connected() == [] and arriving_notes(destination) == []


# ---- item 12: the arrival note goes under the data lock too ----------------------------------

def arrived(guests: Any, volume_driver: Any, device: str) -> tuple[str, str, tuple[str, ...]]:
    """A volume prepared for a guest by name, and that guest started here (it "arrived");
    returns the guest's name, the volume and the data its arrival note names."""
    name = guests.unique_name("arr")
    info = local_volume(device, multiattach=False)
    vid = info["data"]["volume_id"]
    volume_driver.prepare_incoming(info, name, "rw")
    [note] = arriving_notes(volume_driver)
    guests.start_named(name)
    return name, vid, tuple(note["data"])


def data_settled_at(volume_driver: Any, data: tuple[str, ...]) -> int:
    """When the data's lock was last let go (what an attach holding it trusts a read by)."""
    with locks(volume_driver.lock_dir, [], [(identity_token(data), "the test")],
               operation="the test", timeout=10) as held:
        return held.settled_at


def test_complete_incoming_forgets_the_arrival_under_its_data_lock(guests, volume_driver,
                                                                    loop_device) -> None:
    """A read that listed the guests before the guest arrived and read the notes after
    complete removed its note saw neither: the data lock's release after the removal makes an
    attach that holds that lock read again."""
    name, vid, data = arrived(guests, volume_driver, loop_device.device)
    before = time.monotonic_ns()

    assert volume_driver.complete_incoming(name, vid) is True

    assert arriving_notes(volume_driver) == []
    # Not a timing bound: the data lock is last let go either by prepare_incoming (before
    # ``before``) or, as promised, after complete removed the note under it.
    assert data_settled_at(volume_driver, data) > before, \
        "complete_incoming removed the arrival note without holding the note's data lock"
    guests.remove(name)
    assert volume_driver.release_volume(vid) is True


def test_an_arrival_seen_by_a_read_is_forgotten_under_its_data_lock(guests, volume_driver,
                                                                     loop_device) -> None:
    name, vid, data = arrived(guests, volume_driver, loop_device.device)
    before = time.monotonic_ns()

    assert volume_driver.release_volume("some-other-volume") is False  # reads the host

    assert arriving_notes(volume_driver) == []
    assert data_settled_at(volume_driver, data) > before, \
        "the read-time clean-up removed the arrival note without holding its data lock"
    guests.remove(name)
    assert volume_driver.release_volume(vid) is True
