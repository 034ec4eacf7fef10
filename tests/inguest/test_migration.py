"""A Linux guest live-migrates while it writes to a multiattach volume its neighbour reads.

Guest A (a Linux guest of its own: the package's pair stays on the source for the other tests)
runs a writer that numbers 4 KiB blocks with ``O_DIRECT``; A moves from the host's libvirtd to
a private second libvirtd (tests/support/migration.py) with :meth:`LibvirtVolumeDriver.migrate`;
guest B of the pair, on the source, reads the volume read-only. The evidence is the guests' own
output: the writer's counter, sampled through A's command port while libvirt reports the
migration running, grows; the same writer process runs on after the move, without an error;
afterwards A (on the destination) and B (on the source) read back every block it wrote.
"""

from __future__ import annotations

import secrets

import pytest

from testhosts.guests import open_connection
from testhosts.linuxguest import GuestCommandError, LinuxGuest, LinuxGuests
from tests.support.linuxguest import disk_by_serial, follow_migrated
from tests.support.migration import (  # noqa: F401 - fixtures, found by name
    destination_daemon,
    drivers,
    migration_uri,
)
from tests.support.volumes import local_volume

pytestmark = pytest.mark.hypervisor

BLOCK = 4096
#: The writer stops by itself after this many blocks (the 64 MiB volume holds 16384).
MAX_BLOCKS = 12000
#: The migration's bandwidth, MiB/s.
SPEED_MIB_S = 32

WRITER = """d={disk}; t={token}; rm -f /tmp/w.*
( i=0
  while [ ! -e /tmp/w.stop ] && [ $i -lt {max} ]; do
    printf '%-{width}s\\n' "$t $i" > /tmp/w.blk
    if ! dd if=/tmp/w.blk of=/dev/$d bs={bs} seek=$i count=1 oflag=direct conv=notrunc \\
            2>/tmp/w.err; then
      echo "write $i failed: $(cat /tmp/w.err)" > /tmp/w.fail; break
    fi
    i=$((i+1)); echo $i > /tmp/w.count
  done
  echo $i > /tmp/w.done ) </dev/null >/dev/null 2>&1 &
echo $! > /tmp/w.pid; cat /tmp/w.pid"""

#: The blocks the writer wrote (``n`` of them) as it wrote them, against the disk's first ``n``.
VERIFY = """n={n}; i=0; rm -f /tmp/expect
while [ $i -lt $n ]; do printf '%-{width}s\\n' "{token} $i" >> /tmp/expect; i=$((i+1)); done
dd if=/dev/{disk} of=/tmp/seen bs={bs} count=$n iflag=direct 2>/dev/null
echo "expected $(md5sum < /tmp/expect | cut -d' ' -f1) read $(md5sum < /tmp/seen | cut -d' ' -f1)"
head -c 40 /tmp/seen; echo; dd if=/tmp/seen bs={bs} skip=$((n-1)) count=1 2>/dev/null \\
  | head -c 40; echo"""


def count(guest: LinuxGuest, timeout: float = 60) -> int:
    return int(guest.check("cat /tmp/w.count 2>/dev/null || echo 0", timeout).strip())


def test_a_writer_keeps_writing_through_a_live_migration_and_b_reads_every_block(
        linux_image, linux_pair, drivers, destination_daemon, loop_device) -> None:
    source, destination = drivers
    _a_of_pair, b = linux_pair
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    token = f"vd-{secrets.token_hex(6)}"
    width = BLOCK - 1
    conn = open_connection("qemu:///system")
    dest_conn = open_connection(destination_daemon.uri)
    with LinuxGuests(conn, linux_image) as made:
        a = made.start("mig")
        moved, attached = False, []
        try:
            for guest, mode in ((a, "rw"), (b, "ro")):
                source.attach_volume(info, guest.name(), attach_mode=mode)
                attached.append(guest)
            disk_a, disk_b = disk_by_serial(a, vid), disk_by_serial(b, vid)
            pid = a.check(WRITER.format(disk=disk_a, token=token, max=MAX_BLOCKS, width=width,
                                        bs=BLOCK)).strip()
            before = count(a)

            # The counter as A reports it while libvirt reports the migration under way
            # (progress is called every 0.5 s from one thread; what it raised would abort the
            # migration, so a sample lost to the switch-over is only not counted).
            during: list[int] = []

            def progress(processed: int, total: int) -> None:
                if total and processed < total:
                    try:
                        during.append(count(a, timeout=5))
                    except (GuestCommandError, ValueError):
                        pass

            # Bandwidth capped so the migration lasts a few progress reports (QEMU's default
            # moves this small guest between two of them).
            a.dom.migrateSetMaxSpeed(SPEED_MIB_S, 0)
            source.migrate(a.name(), destination, [info], uri=migration_uri(),
                           progress=progress)
            moved = True
            follow_migrated(a, dest_conn, destination_daemon)

            alive = a.run(f"kill -0 {pid} && echo running")
            stopped = a.check("touch /tmp/w.stop; n=0; until [ -e /tmp/w.done ]; do "
                              "n=$((n+1)); [ $n -ge 300 ] && exit 1; sleep 0.1; done; "
                              "cat /tmp/w.done; cat /tmp/w.fail 2>/dev/null; true")
            written = int(stopped.split()[0])
            assert alive.output.strip() == "running", alive.output  # the same writer, moved
            assert stopped.strip() == str(written), stopped  # it stopped when told, no failure
            assert before < written < MAX_BLOCKS
            assert len(set(during)) >= 2 and before <= min(during), (before, during, written)

            for guest, disk in ((a, disk_a), (b, disk_b)):
                seen = guest.check(VERIFY.format(n=written, width=width, token=token,
                                                 disk=disk, bs=BLOCK), timeout=120)
                digest, first, last = seen.splitlines()
                expected, read = digest.split()[1], digest.split()[3]
                assert read == expected, (guest.name(), seen)
                assert first.startswith(f"{token} 0 ") and last.startswith(
                    f"{token} {written - 1} "), (guest.name(), seen)
        finally:
            for guest in attached:
                (destination if moved and guest is a else source).detach_volume(guest.name(), vid)
    dest_conn.close()
    conn.close()
