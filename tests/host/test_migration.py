"""Live migration of a guest that shares a multiattach volume, between two real libvirt daemons.

The source is the host's libvirtd; the destination a private libvirtd in its own mount namespace
with its own ``host_uuid`` (libvirt refuses to migrate to "the same host"; see
tests/support/migration.py). Each side has its own driver and state directory, so each keeps its
own host-connection accounting as two machines would. On one machine both see the same ``/dev``:
a ``local`` volume on a loop device is the same data on both sides, which lets guest B on the
source read what guest A writes after it moved.

The issue's classes, each against both daemons: (1) a disk arrives as it left or nothing moves;
(2) a detach racing a migration never claims success; (3) an interrupt's outcome follows where
the guest is; (4) an arrival note never outlives the guest's stay; (5) what messages say.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import libvirt
import pytest

from testhosts.guests import read_pattern, write_pattern
from tests.support.migration import (  # noqa: F401 - fixtures, found by name
    MIGRATED_IN,
    MIGRATED_OUT,
    STARTED,
    STOPPED,
    Lifecycle,
    arriving_notes,
    dest_conn,
    dest_guests,
    destination_daemon,
    drivers,
    has_open,
    lock_file,
    migrate_argv,
    migration_uri,
    resume_with,
    run_cli,
    runs_on,
    shared_volume,
    start_cli,
    stop_process,
    volume_file,
    wait_until,
)
from tests.support.volumes import local_volume
from virtdriver.errors import MigrationFailed, MigrationRefused, VolumeInUse

pytestmark = pytest.mark.hypervisor


def test_a_guest_moves_and_its_neighbour_keeps_the_volume(guests, dest_guests, drivers,
                                                          loop_device) -> None:
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    [before] = source.list_attachments(a.name())
    dest_guests.adopt(a.name())  # removed with the destination's guests once it arrived

    kept = source.migrate(a.name(), destination, [info], uri=migration_uri())

    # A runs on the destination, the volume shareable, writable, uncached, alias and target kept.
    assert kept == [vid]
    moved = destination.connection.get().lookupByName(a.name())
    assert moved.isActive() and moved.isPersistent()
    [after] = destination.list_attachments(a.name())
    assert (after.attach_mode, after.shareable, after.cache) == ("rw", True, "none")
    assert (after.target_dev, after.bus, after.serverId) == (before.target_dev, before.bus,
                                                             before.serverId)
    assert vid in moved.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)  # persisted there, too
    with pytest.raises(libvirt.libvirtError):
        source.connection.get().lookupByName(a.name())  # gone from the source, definition too
    # B, still on the source, reads what A writes on the destination.
    alias = f"ua-{vid}"
    write_pattern(moved, alias, 0x6B, offset=8192)
    assert read_pattern(b, alias, 0x6B, offset=8192)
    # Each host keeps its connection for its own guest; the arrival note is gone.
    assert source.records.connected() == [vid] and destination.records.connected() == [vid]
    assert arriving_notes(destination) == []

    source.detach_volume(b.name(), vid)
    assert source.records.connected() == []
    destination.detach_volume(a.name(), vid)
    assert destination.records.connected() == []


def test_a_refused_migration_leaves_both_hosts_as_they_were(guests, dest_guests, drivers,
                                                            loop_device) -> None:
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    # Another guest of the same name already runs on the destination: libvirt refuses there.
    dest_guests.start_named(a.name())
    xml_before = a.XMLDesc(0)

    with pytest.raises(MigrationFailed) as refused:
        source.migrate(a.name(), destination, [info], uri=migration_uri())
    assert "still runs on the source" in str(refused.value)

    assert a.isActive() and a.XMLDesc(0) == xml_before
    assert source.records.connected() == [vid]
    assert destination.records.connected() == [] and arriving_notes(destination) == []
    write_pattern(a, f"ua-{vid}", 0x2C)
    assert read_pattern(b, f"ua-{vid}", 0x2C)


def test_a_shared_disk_cached_on_the_host_is_refused_before_anything_moves(
        guests, drivers, loop_device) -> None:
    source, destination = drivers
    a = guests.start("a")
    a.attachDeviceFlags(f"""<disk type='block' device='disk'>
        <driver name='qemu' type='raw' cache='writeback'/>
        <source dev='{loop_device.device}'/><target dev='sdc' bus='scsi'/><shareable/>
      </disk>""", libvirt.VIR_DOMAIN_AFFECT_LIVE)

    with pytest.raises(MigrationRefused) as refused:
        source.migrate(a.name(), destination, [], uri=migration_uri())
    assert "cache='none'" in str(refused.value) and "sdc" in str(refused.value)
    assert a.isActive() and destination.records.connected() == []


def test_an_arriving_guest_uses_the_volume_on_the_destination_until_aborted(
        dest_guests, drivers, loop_device) -> None:
    source, destination = drivers
    neighbour = dest_guests.start("n")
    info = local_volume(loop_device.device, multiattach=False)
    vid = info["data"]["volume_id"]
    arriving = str(uuid.uuid4())

    destination.prepare_incoming(info, arriving, "rw")
    assert destination.records.connected() == [vid]
    from virtdriver.ops.audit import audit_host

    report = audit_host(destination.connection.get(), destination.state_dir)
    assert not [d for _, d in report.dangers if d.kind == "leak"]  # expected, not leaked
    with pytest.raises(VolumeInUse) as refused:  # not multiattach: the arriving guest has it
        destination.attach_volume(info, neighbour.name())
    assert "arriving by live migration" in str(refused.value)
    assert destination.records.connected() == [vid]  # the refusal kept the prepared connection

    assert destination.abort_incoming(arriving, vid) is True
    assert destination.records.connected() == [] and arriving_notes(destination) == []
    assert destination.abort_incoming(arriving, vid) is False
    destination.attach_volume(info, neighbour.name())  # free again
    destination.detach_volume(neighbour.name(), vid)
    assert destination.records.connected() == []


def test_the_cli_migrates_like_the_api(guests, dest_guests, drivers, loop_device,
                                       tmp_path) -> None:
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    dest_guests.adopt(a.name())

    done = run_cli(*migrate_argv(source, destination, a.name(), volume_file(tmp_path, info)))

    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.splitlines() == [
        f"Guest {a.name()} migrated to {destination.uri}",
        f"Volume {vid} stays connected on this host: other guests here still use it"]
    assert [x.attach_mode for x in destination.list_attachments(a.name())] == ["rw"]
    assert source.records.connected() == [vid] == destination.records.connected()
    source.detach_volume(b.name(), vid)
    destination.detach_volume(a.name(), vid)
    assert source.records.connected() == [] == destination.records.connected()


@pytest.mark.parametrize("instance", ["", "a\nb", "x" * 300, None])
def test_an_unusable_instance_is_refused_before_the_host_is_touched(
        instance: Any, drivers, loop_device) -> None:
    from virtdriver.errors import InvalidRequest

    _, destination = drivers
    info = local_volume(loop_device.device, multiattach=True)
    with pytest.raises(InvalidRequest, match="is not a guest name or UUID"):
        destination.prepare_incoming(info, instance, "rw")
    assert destination.records.connected() == []


# ---- (3) an interrupt: the outcome follows where the guest is ----------------------------------

def assert_stayed(a: Any, source: Any, destination: Any, vid: str, xml_before: str) -> None:
    """The guest runs on the source as before; the destination holds nothing for it."""
    assert a.isActive() and a.XMLDesc(0) == xml_before
    assert a.state()[0] == libvirt.VIR_DOMAIN_RUNNING  # not left paused (see jobwatch)
    assert not runs_on(destination.connection.get(), a.name())
    assert source.records.connected() == [vid]
    assert destination.records.connected() == [] and arriving_notes(destination) == []


def assert_moved(a: Any, b: Any, source: Any, destination: Any, vid: str) -> None:
    """The guest runs on the destination with its shared disk; the source kept the volume for
    B only; no arrival note is left."""
    assert runs_on(destination.connection.get(), a.name())
    assert not runs_on(source.connection.get(), a.name())
    [moved] = destination.list_attachments(a.name())
    assert (moved.attach_mode, moved.shareable, moved.cache) == ("rw", True, "none")
    assert source.records.connected() == [vid] == destination.records.connected()
    assert arriving_notes(destination) == []
    source.detach_volume(b.name(), vid)
    destination.detach_volume(a.name(), vid)
    assert source.records.connected() == [] == destination.records.connected()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_before_libvirt_moved_anything_undoes_the_preparation(
        sig: int, guests, drivers, loop_device, tmp_path) -> None:
    from virtdriver.hypervisor.locks import volume_lock

    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    xml_before = a.XMLDesc(0)
    # The destination's volume lock, held here, stops the command inside its preparation; it
    # holds the source's lock of the volume by then (seen in its open files).
    with volume_lock(destination.lock_dir, vid, operation="the test"):
        proc = start_cli(*migrate_argv(source, destination, a.name(),
                                       volume_file(tmp_path, info)))
        wait_until(lambda: has_open(proc.pid, lock_file(destination, vid)),
                   "the command to wait for the destination's lock")
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)

    assert (proc.returncode, out) == (130, ""), err
    assert err.startswith("virtdriver: error: interrupted (SIGINT: " if sig == signal.SIGINT
                          else "virtdriver: error: interrupted (SIGTERM: "), err
    assert "still runs on the source" in err and len(err.splitlines()) == 1, err
    assert_stayed(a, source, destination, vid, xml_before)
    write_pattern(a, f"ua-{vid}", 0x3D)
    assert read_pattern(b, f"ua-{vid}", 0x3D)


def test_an_interrupt_after_libvirt_moved_the_guest_completes_the_migration(
        guests, dest_guests, drivers, loop_device, tmp_path, destination_daemon) -> None:
    """The issue's timing: libvirt's call succeeds while the command cannot run (stopped), and
    the interrupt is delivered as it returns. Peer to peer, so the daemons finish the migration
    by themselves meanwhile."""
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    dest_guests.adopt(a.name())
    on_source, on_destination = Lifecycle("qemu:///system"), Lifecycle(destination_daemon.uri)
    try:
        proc = start_cli(*migrate_argv(source, destination, a.name(),
                                       volume_file(tmp_path, info), "--p2p"))
        on_destination.when(a.name(), STARTED, MIGRATED_IN, lambda: stop_process(proc))
        on_source.wait(a.name(), STOPPED, MIGRATED_OUT)  # libvirt moved it: the call succeeded
        resume_with(proc, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        on_source.close()
        on_destination.close()

    assert proc.returncode == 0, err
    assert out.splitlines() == [
        f"Guest {a.name()} migrated to {destination.uri}",
        f"Volume {vid} stays connected on this host: other guests here still use it"]
    assert err == ("virtdriver: SIGINT came after the guest had moved: the migration was "
                   "completed\n")
    assert_moved(a, b, source, destination, vid)


def test_an_interrupt_while_libvirt_migrates_cancels_or_completes_by_where_the_guest_is(
        guests, dest_guests, drivers, loop_device, tmp_path, destination_daemon) -> None:
    """Stopped as the destination starts the incoming guest, interrupted, resumed: the command
    asks libvirt to cancel at once. Whether libvirt still finished first is libvirt's race; the
    outcome must follow where the guest is, either way."""
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    xml_before = a.XMLDesc(0)
    dest_guests.adopt(a.name())
    on_destination = Lifecycle(destination_daemon.uri)
    try:
        proc = start_cli(*migrate_argv(source, destination, a.name(),
                                       volume_file(tmp_path, info)))
        on_destination.when(a.name(), STARTED, MIGRATED_IN,
                            lambda: (stop_process(proc), resume_with(proc, signal.SIGINT)))
        out, err = proc.communicate(timeout=120)
    finally:
        on_destination.close()

    if runs_on(source.connection.get(), a.name()):
        assert proc.returncode == 130, err
        assert "the migration was cancelled" in err and len(err.splitlines()) == 1
        assert_stayed(a, source, destination, vid, xml_before)
    else:
        assert proc.returncode == 0, err
        assert_moved(a, b, source, destination, vid)
    print("outcome:", proc.returncode, err)


# ---- (1) a disk arrives as it left, or nothing moves --------------------------------------------

def qos_volume(device: str) -> dict[str, Any]:
    info = local_volume(device, multiattach=True)
    info["data"]["qos_specs"] = {"total_iops_sec": 1000, "total_iops_sec_max": 2000,
                                 "read_bytes_sec": 4096000}
    info["data"]["discard"] = True
    return info


def test_a_shared_disk_arrives_with_every_promise_kept(guests, dest_guests, drivers,
                                                       loop_device) -> None:
    """A shared disk attached directsync (the sharing rules allow it; virtdriver renders none)
    with throttles, discard and a serial arrives exactly so: only its source is the
    destination's."""
    from virtdriver.config import Disk
    from virtdriver.render import build_disk

    source, destination = drivers
    a, b = guests.start("a"), guests.start("b")
    info = qos_volume(loop_device.device)
    vid = info["data"]["volume_id"]
    source.attach_volume(info, b.name(), attach_mode="ro")
    disk = build_disk(info, target_dev="sdb", bus="scsi", scsi_unit=1)
    disk.driver.cache = "directsync"
    a.attachDeviceFlags(disk.to_xml(), libvirt.VIR_DOMAIN_AFFECT_LIVE
                        | libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    dest_guests.adopt(a.name())

    def disk_of(dom: Any, flags: int = 0) -> Any:
        xml = dom.XMLDesc(flags)
        start = xml.rindex("<disk", 0, xml.index(f"ua-{vid}"))
        return Disk.from_xml(xml[start:xml.index("</disk>", start) + 7], strict=False)

    leaving, leaving_config = disk_of(a), disk_of(a, libvirt.VIR_DOMAIN_XML_INACTIVE)
    source.migrate(a.name(), destination, [info], uri=migration_uri())

    moved = destination.connection.get().lookupByName(a.name())
    for before, after in ((leaving, disk_of(moved)),
                          (leaving_config, disk_of(moved, libvirt.VIR_DOMAIN_XML_INACTIVE))):
        assert after.driver.cache == "directsync" and after.shareable and not after.readonly
        assert (after.driver, after.iotune, after.serial, after.target, after.address,
                after.alias) == (before.driver, before.iotune, before.serial, before.target,
                                 before.address, before.alias)
    write_pattern(moved, f"ua-{vid}", 0x4E)
    assert read_pattern(b, f"ua-{vid}", 0x4E)  # still one shared disk, written from there
    source.detach_volume(b.name(), vid)
    destination.detach_volume(a.name(), vid)
    assert source.records.connected() == [] == destination.records.connected()


def without_multiattach(info: dict[str, Any]) -> None:
    del info["multiattach"]  # as Cinder's initialize_connection gives it


@pytest.mark.parametrize("field, change", [
    ("shareable", without_multiattach),
    ("iotune", lambda i: i["data"].update(qos_specs={"total_iops_sec": 500})),
    ("discard", lambda i: i["data"].update(discard=False)),
    ("serial", lambda i: i.update(serial="another-serial")),
    ("readonly", lambda i: i["data"].update(access_mode="ro")),
])
def test_a_disk_that_would_arrive_otherwise_is_refused_before_anything_moves(
        field: str, change: Any, guests, drivers, loop_device) -> None:
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device,
                                    info=qos_volume(loop_device.device))
    xml_before = a.XMLDesc(0)
    there = json.loads(json.dumps(info))
    change(there)

    with pytest.raises(MigrationRefused) as refused:
        source.migrate(a.name(), destination, [there], uri=migration_uri())
    message = str(refused.value)
    assert f"would arrive with {field}=" in message and "nothing was moved" in message
    assert vid in message and "\n" not in message
    assert_stayed(a, source, destination, vid, xml_before)


def test_the_manual_path_refuses_an_unshared_arrival_of_a_shared_disk(
        guests, drivers, loop_device) -> None:
    """The caller's own steps: the destination renders the guest's XML from Cinder's
    connection_info (no multiattach): refused, naming the field, before the caller migrates."""
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    cinders = json.loads(json.dumps(info))
    without_multiattach(cinders)
    destination.prepare_incoming(cinders, a.UUIDString(), "rw")
    xml = a.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE)

    with pytest.raises(MigrationRefused, match="would arrive with shareable=false but leaves "
                                               "with shareable=true"):
        destination.incoming_xml(xml, [cinders])
    assert destination.abort_incoming(a.UUIDString(), vid) is True
    assert destination.records.connected() == [] and arriving_notes(destination) == []


# ---- (2) a detach racing a migration is never reported as done ----------------------------------

@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_a_detach_during_a_migration_waits_for_it_and_does_not_claim_success(
        persistent: bool, guests, dest_guests, drivers, loop_device) -> None:
    """The migration holds the source's lock of the volume: the detach (another process) waits
    for it, then finds the guest gone to the other host -- with its disk."""
    from virtdriver.hypervisor.locks import volume_lock

    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device, persistent=persistent)
    dest_guests.adopt(a.name())
    outcome: list[Any] = []
    with volume_lock(destination.lock_dir, vid, operation="the test"):  # holds it in prepare
        mover = threading.Thread(target=lambda: outcome.append(
            source.migrate(a.name(), destination, [info], uri=migration_uri())))
        mover.start()
        wait_until(lambda: has_open(os.getpid(), lock_file(destination, vid)),
                   "the migration to wait for the destination's lock")
        detach = start_cli("--state-dir", str(source.state_dir), "detach", a.name(), vid)
        wait_until(lambda: has_open(detach.pid, lock_file(source, vid)),
                   "the detach to wait for the volume's lock")
    mover.join(180)
    out, err = detach.communicate(timeout=120)

    assert outcome == [[vid]]
    assert detach.returncode == 1 and out == "", err
    assert "left this host by live migration" in err and "was not detached" in err, err
    # One error line; before it, the notice of the lock wait (what it waits for, whose lock).
    lines = err.splitlines()
    assert len(lines) in (1, 2) and all(ln.startswith("virtdriver: waiting for volume")
                                        for ln in lines[:-1]), err
    assert_moved(a, b, source, destination, vid)


def test_a_detach_waiting_on_libvirt_while_the_guest_leaves_is_not_a_detach(
        guests, dest_guests, drivers, loop_device, destination_daemon) -> None:
    """A migration driven by the caller's own migrate3 (no virtdriver lock): the detach's
    libvirt call waits for the migration job and fails once the guest is gone. The guest left,
    it did not stop: the detach says so instead of reporting success."""
    from virtdriver.errors import GuestLeft, InstanceNotFound

    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device, persistent=False)
    dest_guests.adopt(a.name(), persistent=False)
    destination.prepare_incoming(info, a.UUIDString(), "rw")
    xml = destination.incoming_xml(a.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE), [info])
    failed: list[BaseException] = []

    def detach() -> None:
        try:
            source.detach_volume(a.name(), vid, timeout=60)
        except BaseException as exc:  # noqa: BLE001 - the outcome under test
            failed.append(exc)

    detacher = threading.Thread(target=detach)
    on_destination = Lifecycle(destination_daemon.uri)
    try:
        on_destination.when(a.name(), STARTED, MIGRATED_IN, detacher.start)
        a.migrate3(destination.connection.get(), {
            libvirt.VIR_MIGRATE_PARAM_DEST_XML: xml,
            libvirt.VIR_MIGRATE_PARAM_URI: migration_uri()}, libvirt.VIR_MIGRATE_LIVE)
        detacher.join(120)
    finally:
        on_destination.close()

    [error] = failed
    assert isinstance(error, (GuestLeft, InstanceNotFound)), error
    assert "was not detached" in str(error)
    assert source.finish_outgoing(a.UUIDString(), vid) == [b.name()]
    assert destination.complete_incoming(a.UUIDString(), vid) is True
    assert_moved(a, b, source, destination, vid)


# ---- (4) the manual steps: an arrival note never outlives the guest's stay ----------------------

def moved_by_hand(guests: Any, dest_guests: Any, source: Any, destination: Any, device: str,
                  tmp_path: Path) -> tuple[Any, dict[str, Any], str]:
    """Guest A (transient) with a volume that is not multiattach, moved to the destination by
    :func:`manual_migration`."""
    a = guests.start("a", persistent=False)
    info = local_volume(device, multiattach=False)
    source.attach_volume(info, a.name())
    dest_guests.adopt(a.name(), persistent=False)
    manual_migration(source, destination, a, info, tmp_path)
    return a, info, info["data"]["volume_id"]


def assert_free_for_another(dest_guests: Any, destination: Any, info: dict[str, Any]) -> None:
    """Another guest on the destination attaches the volume (not multiattach: nobody else may
    hold it) and detaches it; nothing stays connected."""
    other = dest_guests.start("o")
    destination.attach_volume(info, other.name())
    destination.detach_volume(other.name(), info["data"]["volume_id"])
    assert destination.records.connected() == []


def manual_migration(source: Any, destination: Any, a: Any, info: dict[str, Any],
                     tmp_path: Path) -> None:
    """The documented steps around the caller's own migrate3 (the guest stays transient there)."""
    volume = volume_file(tmp_path, info, "manual.json")
    done = run_cli("-c", destination.uri, "--state-dir", str(destination.state_dir),
                   "migrate-prepare", str(volume), a.UUIDString())
    assert done.returncode == 0, done.stderr
    xml = destination.incoming_xml(a.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE), [info])
    a.migrate3(destination.connection.get(), {libvirt.VIR_MIGRATE_PARAM_DEST_XML: xml,
                                              libvirt.VIR_MIGRATE_PARAM_URI: migration_uri()},
               libvirt.VIR_MIGRATE_LIVE)
    done = run_cli("--state-dir", str(source.state_dir), "migrate-finish", a.UUIDString(),
                   info["data"]["volume_id"])
    assert done.returncode == 0, done.stderr


def test_the_manual_steps_end_with_migrate_complete_and_the_volume_is_free_after(
        guests, dest_guests, drivers, loop_device, tmp_path) -> None:
    source, destination = drivers
    a, info, vid = moved_by_hand(guests, dest_guests, source, destination, loop_device.device,
                                 tmp_path)
    assert source.records.connected() == []
    assert len(arriving_notes(destination)) == 1

    done = run_cli("-c", destination.uri, "--state-dir", str(destination.state_dir),
                   "migrate-complete", a.UUIDString(), vid)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == (f"Guest {a.UUIDString()} arrived: volume {vid} is its own disk "
                           "here now\n")
    assert arriving_notes(destination) == [] and destination.records.connected() == [vid]
    # The guest goes away behind the driver's back: its connection is an ordinary leak now,
    # released on request, and the volume (not multiattach) is free for another guest.
    destination.connection.get().lookupByName(a.name()).destroy()
    assert destination.release_volume(vid) is True
    assert_free_for_another(dest_guests, destination, info)


def test_a_guest_that_arrived_and_left_again_is_not_expected_any_more(
        guests, dest_guests, drivers, loop_device, tmp_path) -> None:
    """Without the completing step: the guest leaves the destination again by virtdriver's
    migration, which releases the volume there (its old arrival note does not hold it)."""
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device, persistent=False)
    dest_guests.adopt(a.name(), persistent=False)
    manual_migration(source, destination, a, info, tmp_path)
    guests.adopt(a.name(), persistent=False)  # it comes back

    assert destination.migrate(a.name(), source, [info], uri=migration_uri()) == []
    assert destination.records.connected() == [] and arriving_notes(destination) == []
    assert runs_on(source.connection.get(), a.name())
    assert source.records.connected() == [vid] and arriving_notes(source) == []
    source.detach_volume(a.name(), vid)
    source.detach_volume(b.name(), vid)
    assert source.records.connected() == []


def test_an_arrival_note_seen_arrived_never_counts_again(guests, dest_guests, drivers,
                                                         loop_device, tmp_path) -> None:
    """Without the completing step: any virtdriver operation on the destination while the guest
    is there sees it arrived; once it is destroyed, its volume is not held for it."""
    source, destination = drivers
    a, info, vid = moved_by_hand(guests, dest_guests, source, destination, loop_device.device,
                                 tmp_path)
    assert len(arriving_notes(destination)) == 1

    assert destination.release_volume("some-other-volume") is False  # an operation there
    assert arriving_notes(destination) == []
    destination.connection.get().lookupByName(a.name()).destroy()
    assert_free_for_another(dest_guests, destination, info)


def test_an_unseen_arrival_is_undone_by_the_command_release_names(
        guests, dest_guests, drivers, loop_device, tmp_path) -> None:
    """Nothing on the destination saw the guest before it went: the note still holds the
    volume, and release says exactly how to let it go."""
    source, destination = drivers
    a, info, vid = moved_by_hand(guests, dest_guests, source, destination, loop_device.device,
                                 tmp_path)
    destination.connection.get().lookupByName(a.name()).destroy()

    done = run_cli("-c", destination.uri, "--state-dir", str(destination.state_dir),
                   "release", vid)
    assert done.returncode == 3
    assert f"undo it with 'virtdriver migrate-abort {a.UUIDString()} {vid}'" in done.stderr
    done = run_cli("-c", destination.uri, "--state-dir", str(destination.state_dir),
                   "migrate-abort", a.UUIDString(), vid)
    assert done.returncode == 0, done.stderr
    assert destination.records.connected() == [] and arriving_notes(destination) == []


# ---- (5) what the messages say ------------------------------------------------------------------

def test_a_lost_destination_is_named_with_the_exact_command_that_undoes_its_preparation(
        guests, drivers, loop_device, destination_daemon, tmp_path) -> None:
    import subprocess
    import sys

    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    xml_before = a.XMLDesc(0)
    on_destination = Lifecycle(destination_daemon.uri)
    try:  # the destination's libvirtd dies as the incoming guest starts there
        on_destination.when(a.name(), STARTED, MIGRATED_IN, lambda: destination_daemon.kill())
        with pytest.raises(MigrationFailed) as failed:
            source.migrate(a.name(), destination, [info], uri=migration_uri())
    finally:
        on_destination.close()
        destination_daemon.start()

    message = str(failed.value)
    assert "still runs on the source" in message and "\n" not in message
    assert f"the destination {destination.uri} still holds the preparation of volume {vid}" \
        in message
    command = message.split("once it is reachable, run there: ")[1]
    assert command.split()[:2] == ["virtdriver", "-c"] and "migrate-abort" in command
    assert a.isActive() and a.XMLDesc(0) == xml_before and source.records.connected() == [vid]
    assert destination.records.connected() == [vid]  # what the message says is left there
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}

    def run_it() -> subprocess.CompletedProcess[str]:  # as an operator would, through a shell
        return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                              timeout=120, check=False, env=env)

    done = run_it()
    if done.returncode != 0:  # the restarted daemon still holds the incoming guest it found
        # paused for the migration, or (libvirt 11) shut down on its way out
        assert "by an incoming migration that has not ended" in done.stderr, done.stderr
        assert destination.records.connected() == [vid]
        wait_until(lambda: not runs_on(destination.connection.get(), a.name()),
                   "the restarted destination to end the incoming guest")
        done = run_it()
    assert done.returncode == 0, done.stderr
    assert destination.records.connected() == [] and arriving_notes(destination) == []
    assert not runs_on(destination.connection.get(), a.name())


def test_a_leftover_definition_on_the_destination_is_called_one(guests, dest_guests, dest_conn,
                                                                drivers, loop_device) -> None:
    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    dest_conn.defineXML(a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))  # shut off there
    dest_guests.adopt(a.name())

    with pytest.raises(MigrationRefused) as refused:
        source.migrate(a.name(), destination, [info], uri=migration_uri())
    assert "an inactive definition of guest" in str(refused.value)
    assert "leftover" in str(refused.value) and "already runs" not in str(refused.value)
    assert a.isActive() and destination.records.connected() == [] == arriving_notes(destination)


def test_finish_refuses_a_guest_that_is_shut_off_here_and_never_left(guests, drivers,
                                                                    loop_device) -> None:
    source, _ = drivers
    a = guests.start("a")
    info = local_volume(loop_device.device, multiattach=False)
    vid = info["data"]["volume_id"]
    source.attach_volume(info, a.name())
    a.destroy()  # shut off, still defined here with its volume

    done = run_cli("--state-dir", str(source.state_dir), "migrate-finish", a.name(), vid)
    assert done.returncode == 3
    assert "shut off on this host and has not left it" in done.stderr
    assert "--leftover-definition" in done.stderr
    assert source.records.connected() == [vid]
    done = run_cli("--state-dir", str(source.state_dir), "migrate-finish", a.name(), vid,
                   "--leftover-definition")
    assert done.returncode == 0, done.stderr
    assert source.records.connected() == []
