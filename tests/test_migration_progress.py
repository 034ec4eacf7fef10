"""The progress hook of live migration (#28): libvirt's job statistics reach the caller while
the guest moves, and whatever the callback raises aborts the migration, both hosts left as they
were. Source: the host's libvirtd; destination: a private libvirtd (as in test_migration.py)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fixtures import made_guests, opened
from tests.support.volumes import local_volume
from virtdriver import LibvirtVolumeDriver
from virtdriver.errors import MigrationFailed
from testhosts.guests import Guests, read_pattern, write_pattern
from virtdriver.hypervisor import jobwatch

pytestmark = pytest.mark.hypervisor


@pytest.fixture(scope="module")
def destination_daemon() -> Iterator[Any]:
    from testhosts.guests import private_libvirtd as pl

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
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


class Stop(Exception):
    pass


def test_progress_reaches_the_caller_and_an_interrupt_aborts(guests, dest_guests, drivers,
                                                             loop_device, monkeypatch) -> None:
    source, destination = drivers
    monkeypatch.setattr(jobwatch, "INTERVAL", 0.01)
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    source.attach_volume(info, a.name())
    source.attach_volume(info, b.name(), attach_mode="ro")
    a.migrateSetMaxSpeed(1, 0)  # 1 MiB/s: still moving at the first report
    seen: list[tuple[int, int]] = []

    def interrupt(done: int, total: int) -> None:
        seen.append((done, total))
        if total > 0:  # the job has started: the operator presses Ctrl-C
            raise Stop

    with pytest.raises(MigrationFailed, match="still runs on the source"):
        source.migrate(a.name(), destination, [info], uri=migration_uri(), progress=interrupt)
    assert seen[-1][1] > 0 and 0 <= seen[-1][0] <= seen[-1][1]
    assert a.isActive() and source.list_attachments(a.name())[0].volumeId == vid
    assert destination.host.connected() == []  # the preparation there was undone
    assert source.host.connected() == [vid]
    write_pattern(a, f"ua-{vid}", 0x3D)
    assert read_pattern(b, f"ua-{vid}", 0x3D)

    # Once more at full speed, reporting only: the guest moves.
    a.migrateSetMaxSpeed(8 << 10, 0)  # back to 8 GiB/s
    reports: list[tuple[int, int]] = []
    dest_guests.adopt(a.name())
    source.migrate(a.name(), destination, [info], uri=migration_uri(),
                   progress=lambda done, total: reports.append((done, total)))
    assert destination.connection.get().lookupByName(a.name()).isActive()
    assert all(0 <= done <= total for done, total in reports if total)
    source.detach_volume(b.name(), vid)
    destination.detach_volume(a.name(), vid)
