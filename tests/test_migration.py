"""Live migration of a guest that shares a multiattach volume, between two real libvirt daemons.

The source is the host's libvirtd; the destination a private libvirtd in its own mount namespace
with its own ``host_uuid`` (libvirt refuses to migrate to "the same host"). Each side has its own
driver and state directory, so each keeps its own host-connection accounting as two machines
would. On one machine both see the same ``/dev``: a ``local`` volume on a loop device is the same
data on both sides, which lets guest B on the source read what guest A writes after it moved.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.support.fixtures import made_guests, opened
from tests.support.volumes import local_volume
from virtdriver import LibvirtVolumeDriver
from virtdriver.errors import MigrationFailed, MigrationRefused, VolumeInUse
from virtdriver.guests import Guests, read_pattern, write_pattern

pytestmark = pytest.mark.hypervisor


@pytest.fixture(scope="module")
def destination_daemon() -> Iterator[Any]:
    from virtdriver.guests import private_libvirtd as pl

    reason = pl.available()
    if reason is not None:
        pytest.skip(f"no second libvirtd: {reason}")
    with pl.PrivateLibvirtd(host_uuid=str(uuid.uuid4())) as daemon:
        yield daemon


@pytest.fixture
def dest_guests(destination_daemon) -> Iterator[Guests]:
    for conn in opened(destination_daemon.uri):
        yield from made_guests(conn)


@pytest.fixture
def drivers(destination_daemon, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    source = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "source")
    destination = LibvirtVolumeDriver(destination_daemon.uri, state_dir=tmp_path / "destination")
    yield source, destination
    source.close()
    destination.close()


def migration_uri() -> str:
    with socket.socket() as probe:  # a free port for QEMU's migration stream
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def shared_volume(guests: Guests, source: Any, device: str) -> tuple[Any, Any, dict, str]:
    """Guests A and B on the source, one multiattach volume read-write to A, read-only to B."""
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(device, multiattach=True)
    source.attach_volume(info, a.name())
    source.attach_volume(info, b.name(), attach_mode="ro")
    return a, b, info, info["data"]["volume_id"]


def arriving_notes(driver: Any) -> list[dict[str, Any]]:
    return [a for vid in driver.host.connected() for a in driver.host.load(vid).arriving]


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
    assert source.host.connected() == [vid] and destination.host.connected() == [vid]
    assert arriving_notes(destination) == []

    source.detach_volume(b.name(), vid)
    assert source.host.connected() == []
    destination.detach_volume(a.name(), vid)
    assert destination.host.connected() == []


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
    assert source.host.connected() == [vid]
    assert destination.host.connected() == [] and arriving_notes(destination) == []
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
    assert a.isActive() and destination.host.connected() == []


def test_an_arriving_guest_uses_the_volume_on_the_destination_until_aborted(
        dest_guests, drivers, loop_device) -> None:
    source, destination = drivers
    neighbour = dest_guests.start("n")
    info = local_volume(loop_device.device, multiattach=False)
    vid = info["data"]["volume_id"]
    arriving = str(uuid.uuid4())

    destination.prepare_incoming(info, arriving, "rw")
    assert destination.host.connected() == [vid]
    from virtdriver.audit import audit_host

    report = audit_host(destination.connection.get(), destination.state_dir)
    assert not [d for _, d in report.dangers if d.kind == "leak"]  # expected, not leaked
    with pytest.raises(VolumeInUse) as refused:  # not multiattach: the arriving guest has it
        destination.attach_volume(info, neighbour.name())
    assert "arriving by live migration" in str(refused.value)
    assert destination.host.connected() == [vid]  # the refusal kept the prepared connection

    assert destination.abort_incoming(arriving, vid) is True
    assert destination.host.connected() == [] and arriving_notes(destination) == []
    assert destination.abort_incoming(arriving, vid) is False
    destination.attach_volume(info, neighbour.name())  # free again
    destination.detach_volume(neighbour.name(), vid)
    assert destination.host.connected() == []


def test_the_cli_migrates_like_the_api(guests, dest_guests, drivers, loop_device,
                                       tmp_path) -> None:
    import json
    import subprocess
    import sys

    source, destination = drivers
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
    dest_guests.adopt(a.name())
    volume = tmp_path / "volume.json"
    volume.write_text(json.dumps(info))

    done = subprocess.run(
        [sys.executable, "-m", "virtdriver", "--state-dir", str(source.state_dir), "migrate",
         a.name(), "--to", destination.uri, "--volume", str(volume), "--dest-state-dir",
         str(destination.state_dir), "--migration-uri", migration_uri()],
        capture_output=True, text=True, timeout=120, check=False)

    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.splitlines() == [
        f"Guest {a.name()} migrated to {destination.uri}",
        f"Volume {vid} stays connected on this host: other guests here still use it"]
    assert [x.attach_mode for x in destination.list_attachments(a.name())] == ["rw"]
    assert source.host.connected() == [vid] == destination.host.connected()
    source.detach_volume(b.name(), vid)
    destination.detach_volume(a.name(), vid)
    assert source.host.connected() == [] == destination.host.connected()


@pytest.mark.parametrize("instance", ["", "a\nb", "x" * 300, None])
def test_an_unusable_instance_is_refused_before_the_host_is_touched(
        instance: Any, drivers, loop_device) -> None:
    from virtdriver.errors import InvalidRequest

    _, destination = drivers
    info = local_volume(loop_device.device, multiattach=True)
    with pytest.raises(InvalidRequest, match="is not a guest name or UUID"):
        destination.prepare_incoming(info, instance, "rw")
    assert destination.host.connected() == []
