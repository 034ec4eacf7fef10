"""SELinux enforcing, libvirt's selinux security driver, and one volume shared by two guests.

Runs inside the nested test host booted with ``selinux=1 security=selinux enforcing=1``
(``scripts/test-nested.sh --lsm selinux``). Guests are OS-less TCG guests (``type='qemu'``);
what each guest sees is checked through its own QEMU (qemu-io), its labels through its QEMU's
process and mount namespace: libvirt gives every QEMU a private /dev and labels the device there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testhosts.guests import block_info, read_pattern, write_pattern
from tests.nested.conftest import MCS_PAIR, qemu_pid, run, secmodels, split_context
from tests.nested.selinux_support import (
    data_file,
    device_label_in_namespace,
    file_label,
    no_guest_denials,
    process_label,
)
from tests.support.sharedio import writer_shares_with_reader
from tests.support.volumes import file_volume, local_volume

pytestmark = pytest.mark.lsm_selinux

SHARED_IMAGE_TYPE = "svirt_image_t"


def test_enforcing_and_libvirt_uses_selinux(system_conn) -> None:
    assert run("getenforce").strip() == "Enforcing"
    assert Path("/sys/fs/selinux/enforce").read_text().strip() == "1"
    assert "selinux" in Path("/sys/kernel/security/lsm").read_text().split(",")
    models = secmodels(system_conn)
    assert models and models[0] == "selinux", models
    # The policy's exceptions are the documented ones, and no more (testhosts/README.md).
    permissive = set(run("semanage", "permissive", "-l", "-n").split())
    assert {"virtd_t", "virtlogd_t", "systemd_machined_t"} <= permissive
    assert "svirt_t" not in permissive


@pytest.mark.parametrize("kind", ["block", "file"])
def test_multiattach_shared_label(kind, guests, volume_driver, loop_device, audit_window) -> None:
    """Items 1 and 2: rw in A, ro in B; detach A, then B; a third guest attaches next."""
    with data_file("vd-shared-") as path:
        dev = loop_device.device if kind == "block" else path
        info = (local_volume(dev, multiattach=True) if kind == "block"
                else file_volume(dev, multiattach=True))
        _shared_story(guests, volume_driver, info, dev, kind, audit_window)


def _shared_story(guests, volume_driver, info, dev, kind, audit_window) -> None:
    a, b = guests.start("a"), guests.start("b")
    vid = info["data"]["volume_id"]
    alias = f"ua-{vid}"

    def label(pid: int) -> tuple[str, str]:
        """The data's (type, level) as QEMU ``pid`` sees it: a device node in its private
        /dev, a file on the host's filesystem."""
        found = device_label_in_namespace(pid, dev) if kind == "block" else file_label(dev)
        return split_context(found)[2:]

    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    assert not block_info(a, alias).ro and block_info(b, alias).ro

    # Each QEMU runs confined as svirt_t with its own pair of MCS categories.
    pids = {d.name(): qemu_pid(d) for d in (a, b)}
    levels = {}
    for name, pid in pids.items():
        _, _, typ, level = split_context(process_label(pid))
        assert typ == "svirt_t", (name, process_label(pid))
        assert MCS_PAIR.fullmatch(level), (name, level)
        levels[name] = level
    assert levels[a.name()] != levels[b.name()], levels

    # The shared volume carries the shared image context with no categories for both guests:
    # each confined QEMU may open it, whatever its own pair.
    for name, pid in pids.items():
        assert label(pid) == (SHARED_IMAGE_TYPE, "s0"), name

    # Data: A writes, B reads it; B may not write.
    pattern, offset = writer_shares_with_reader(a, b, alias)

    # Detach from A: B still reads, and the label B sees is unchanged (never restored).
    volume_driver.detach_volume(a.name(), vid)
    assert [x.volumeId for x in volume_driver.list_attachments(a.name())] == []
    assert read_pattern(b, alias, pattern, offset=offset)
    assert label(pids[b.name()]) == (SHARED_IMAGE_TYPE, "s0")

    # Detach the last: the host connection goes; nothing restores a label that would stop the
    # next guest, which attaches, reads what A wrote and writes.
    volume_driver.detach_volume(b.name(), vid)
    assert volume_driver.records.load(vid) is None
    if kind == "file":
        assert label(0) == (SHARED_IMAGE_TYPE, "s0")
    c = guests.start("c")
    volume_driver.attach_volume(info, c.name(), attach_mode="rw")
    assert label(qemu_pid(c)) == (SHARED_IMAGE_TYPE, "s0")
    assert read_pattern(c, alias, pattern, offset=offset)
    write_pattern(c, alias, 0x11, offset=offset)
    assert read_pattern(c, alias, 0x11, offset=offset)
    volume_driver.detach_volume(c.name(), vid)
    no_guest_denials(audit_window)
