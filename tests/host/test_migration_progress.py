"""The progress hook of live migration (#28): libvirt's job statistics reach the caller while
the guest moves, and whatever the callback raises aborts the migration, both hosts left as they
were. Source: the host's libvirtd; destination: a private libvirtd (tests/support/migration.py)."""

from __future__ import annotations

import pytest

from testhosts.guests import read_pattern, write_pattern
from tests.support.migration import (  # noqa: F401 - fixtures, found by name
    dest_conn,
    dest_guests,
    destination_daemon,
    drivers,
    migration_uri,
    shared_volume,
)
from virtdriver.errors import MigrationFailed
from virtdriver.hypervisor import jobwatch

pytestmark = pytest.mark.hypervisor


class Stop(Exception):
    pass


def test_progress_reaches_the_caller_and_an_interrupt_aborts(guests, dest_guests, drivers,
                                                             loop_device, monkeypatch) -> None:
    source, destination = drivers
    monkeypatch.setattr(jobwatch, "INTERVAL", 0.01)
    # QEMU sends a zero page as a few bytes: at 1 MiB/s a 128 MiB OS-less guest moved in 2.6 s,
    # and once CI's load held the first report back that long. 2 GiB of it takes 12 s.
    guests.memory_mib = 2048
    a, b, info, vid = shared_volume(guests, source, loop_device.device)
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
    assert destination.records.connected() == []  # the preparation there was undone
    assert source.records.connected() == [vid]
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
