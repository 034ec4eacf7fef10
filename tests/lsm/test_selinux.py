"""SELinux enforcing, libvirt's selinux security driver, and one volume shared by two guests.

Runs inside the nested test host booted with ``selinux=1 security=selinux enforcing=1``
(``scripts/test-nested.sh --lsm selinux``). Guests are OS-less TCG guests (``type='qemu'``);
what each guest sees is checked through its own QEMU (qemu-io), its labels through its QEMU's
process and mount namespace: libvirt gives every QEMU a private /dev and labels the device there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lsm.conftest import MCS_PAIR, qemu_pid, run, secmodels, split_context
from tests.support.sharedio import writer_shares_with_reader
from tests.support.volumes import local_volume
from testhosts.guests import block_info, read_pattern

pytestmark = pytest.mark.lsm_selinux

SHARED_IMAGE_TYPE = "svirt_image_t"


def process_label(pid: int) -> str:
    """The SELinux context of ``pid`` as ``ps -eZ`` shows it."""
    for line in run("ps", "-eZ").splitlines()[1:]:  # LABEL PID TTY TIME CMD
        fields = line.split()
        if len(fields) >= 2 and fields[1] == str(pid):
            return fields[0]
    raise AssertionError(f"pid {pid} not in ps -eZ")


def device_label_in_namespace(pid: int, device: str) -> str:
    """The context of ``device`` inside QEMU ``pid``'s mount namespace (its private /dev)."""
    out = run("nsenter", "-t", str(pid), "-m", "--", "ls", "-Z", device).split()
    assert out and out[-1] == device, out
    return out[0]


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


def test_multiattach_loop_device_shared_label(guests, volume_driver, loop_device,
                                              audit_window) -> None:
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    alias = f"ua-{vid}"
    dev = loop_device.device

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

    # The shared volume carries the shared image context with no categories in both guests'
    # namespaces: each confined QEMU may open it, whatever its own pair.
    for name, pid in pids.items():
        _, _, typ, level = split_context(device_label_in_namespace(pid, dev))
        assert (typ, level) == (SHARED_IMAGE_TYPE, "s0"), (name, typ, level)

    # Data: A writes, B reads it; B may not write.
    pattern, offset = writer_shares_with_reader(a, b, alias)

    # Detach from A: B still reads, and the label B sees is unchanged (never restored).
    volume_driver.detach_volume(a.name(), vid)
    assert [x.volumeId for x in volume_driver.list_attachments(a.name())] == []
    assert read_pattern(b, alias, pattern, offset=offset)
    _, _, typ, level = split_context(device_label_in_namespace(pids[b.name()], dev))
    assert (typ, level) == (SHARED_IMAGE_TYPE, "s0")

    volume_driver.detach_volume(b.name(), vid)
    denials = audit_window.records()
    # Enforced denials, and any denial of a guest's QEMU (svirt_t, enforced or not), fail the
    # test. The documented permissive domains (virtd_t ...) may log permissive=1 records.
    bad = [r.line for r in denials if not r.permissive or "svirt_t" in r.line]
    assert bad == [], "\n".join(bad)
