"""What the guest sees: the multiattach promises checked from inside two real Linux guests.

The guests (testhosts/linuxguest) share one loop-device volume attached through
``LibvirtVolumeDriver``; each assertion is on what a guest's own kernel and tools printed.
"""

from __future__ import annotations

import secrets

import pytest

from testhosts.guests import LoopDevice
from tests.support.linuxguest import disk_by_serial, wait_disk_gone, wait_size
from tests.support.volumes import local_volume

pytestmark = pytest.mark.hypervisor


@pytest.fixture
def shared(linux_pair, volume_driver, loop_device):
    """The loop volume attached rw to guest A and ro to guest B; detached afterwards.

    Yields (A, A's disk name, B, B's disk name, connection_info).
    """
    a, b = linux_pair
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    attached = []
    try:
        for guest, mode in ((a, "rw"), (b, "ro")):
            volume_driver.attach_volume(info, guest.name(), attach_mode=mode)
            attached.append(guest)
        yield a, disk_by_serial(a, vid), b, disk_by_serial(b, vid), info
    finally:
        for guest in attached:
            volume_driver.detach_volume(guest.name(), vid)


def test_ro_is_read_only_to_the_guest_kernel_and_rw_is_writable(shared) -> None:
    a, disk_a, b, disk_b, _info = shared
    assert a.check(f"blockdev --getro /dev/{disk_a}").strip() == "0"
    assert b.check(f"blockdev --getro /dev/{disk_b}").strip() == "1"
    refused = b.run(f"dd if=/dev/zero of=/dev/{disk_b} bs=4096 count=1 oflag=direct")
    assert refused.rc != 0, refused.output
    assert "Read-only file system" in refused.output, refused.output  # EROFS from the guest
    written = a.run(f"dd if=/dev/zero of=/dev/{disk_a} bs=4096 count=1 seek=8 oflag=direct")
    assert written.rc == 0, written.output


def test_a_block_written_with_o_direct_in_a_is_read_by_b(shared) -> None:
    a, disk_a, b, disk_b, _info = shared
    token = f"virtdriver-{secrets.token_hex(8)}"
    a.check(f"yes {token} | head -c 4096 > /tmp/block")
    a.check(f"dd if=/tmp/block of=/dev/{disk_a} bs=4096 count=1 seek=3 oflag=direct")
    sum_a = a.check("md5sum < /tmp/block").split()[0]
    seen = b.check(f"dd if=/dev/{disk_b} of=/tmp/seen bs=4096 count=1 skip=3 iflag=direct"
                   " 2>/dev/null; head -c 64 /tmp/seen; echo; md5sum < /tmp/seen")
    assert token in seen
    assert seen.split()[-2] == sum_a


def test_a_hot_plugged_disk_appears_in_the_guest_and_goes_on_detach(
        linux_pair, volume_driver, loop_device) -> None:
    a, _b = linux_pair
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    try:
        name = disk_by_serial(a, vid)
        assert name.startswith("sd")
        assert a.check(f"cat /sys/block/{name}/size").strip() == str(loop_device.size // 512)
    finally:
        volume_driver.detach_volume(a.name(), vid)
    assert name not in wait_disk_gone(a, name).split()


def test_the_rw_guest_sees_an_online_extend(shared, volume_driver, loop_device) -> None:
    a, disk_a, _b, _disk_b, info = shared
    before = int(a.check(f"blockdev --getsize64 /dev/{disk_a}"))
    assert before == loop_device.size
    grown = loop_device.size + (32 << 20)
    loop_device.extend(grown)
    assert volume_driver.extend_volume(a.name(), info, grown) == grown
    assert wait_size(a, disk_a, grown) == grown


def test_the_ro_guest_sees_an_online_extend(shared, volume_driver, loop_device) -> None:
    """The ro attachment's QEMU is given the new size (its node opened anew read-only: libvirt
    and QEMU refuse to block-resize a read-only disk); QEMU 7.2 cannot tell the guest of a
    read-only disk, so the guest learns it at its next capacity read: a SCSI rescan, the step
    `virtdriver extend` prints for it."""
    a, _disk_a, b, disk_b, info = shared
    grown = loop_device.size + (32 << 20)
    loop_device.extend(grown)
    volume_driver.extend_volume(a.name(), info, grown)
    assert volume_driver.extend_volume(b.name(), info, grown) == grown  # what B's QEMU shows
    b.check(f"echo 1 > /sys/class/block/{disk_b}/device/rescan")
    assert wait_size(b, disk_b, grown) == grown
    assert b.run(f"blockdev --getro /dev/{disk_b}").output.strip() == "1"


def _write(guest, disk: str, block: int, text: str) -> None:
    """One 4 KiB block of ``text`` repeated, written with O_DIRECT at ``block``."""
    guest.check(f"yes {text} | head -c 4096 > /tmp/w && "
                f"dd if=/tmp/w of=/dev/{disk} bs=4096 count=1 seek={block} oflag=direct")


def _read(guest, disk: str, block: int) -> str:
    """The first line of 4 KiB block ``block`` as the guest reads it with O_DIRECT ('' for
    zeros)."""
    out = guest.check(f"dd if=/dev/{disk} of=/tmp/r bs=4096 count=1 skip={block} iflag=direct"
                      " 2>/dev/null; head -n1 /tmp/r | tr -d '\\000'")
    return out.strip()


def test_after_a_swap_the_guest_reads_and_writes_the_new_volume(
        linux_pair, volume_driver, loop_device) -> None:
    """A swaps its disk from one volume to another (block copy, then pivot): A reads on its same
    disk what it wrote before (copied over), and what it writes afterwards B reads on the new
    volume, attached to it read-only once the swap is done (a swap never copies over a volume
    another guest uses), while the old volume, shown to B afterwards, never got it."""
    a, b = linux_pair
    old = local_volume(loop_device.device, multiattach=True)
    before, after = (f"virtdriver-{w}-{secrets.token_hex(6)}" for w in ("before", "after"))
    with LoopDevice(loop_device.size) as other:
        new = local_volume(other.device, multiattach=True)
        old_id, new_id = old["data"]["volume_id"], new["data"]["volume_id"]
        attached = []
        try:
            volume_driver.attach_volume(old, a.name(), attach_mode="rw")
            attached.append((a, old_id))
            disk_a = disk_by_serial(a, old_id)
            _write(a, disk_a, 3, before)

            swapped = volume_driver.swap_volume(a.name(), old, new)
            attached[0] = (a, new_id)
            assert swapped.volumeId == new_id and swapped.attach_mode == "rw"

            assert _read(a, disk_a, 3) == before  # the same disk in A, its data copied over
            _write(a, disk_a, 5, after)
            volume_driver.attach_volume(new, b.name(), attach_mode="ro")
            attached.append((b, new_id))
            disk_b = disk_by_serial(b, new_id)
            assert (_read(b, disk_b, 3), _read(b, disk_b, 5)) == (before, after)
            volume_driver.attach_volume(old, b.name(), attach_mode="ro")
            attached.append((b, old_id))
            disk_old = disk_by_serial(b, old_id)
            assert (_read(b, disk_old, 3), _read(b, disk_old, 5)) == (before, "")
        finally:
            for guest, vid in reversed(attached):
                volume_driver.detach_volume(guest.name(), vid)
