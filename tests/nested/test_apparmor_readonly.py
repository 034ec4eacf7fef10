"""AppArmor: a read-only attachment is read-only for the guest's confined QEMU too (#27).

libvirt's hot-plug gives every new disk ``rwk`` in the guest's profile (virt-aa-helper's rule for
a new file); virtdriver regenerates the profile from the live definition after a read-only
attach, so the rule is ``rk`` and the confined QEMU cannot open the volume for writing. A
read-only hot-plug by plain libvirt keeps ``rwk`` (its QEMU can), and ``virtdriver audit`` says so.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import libvirt
import libvirt_qemu
import pytest

from testhosts.guests import sparse_file
from tests.support.volumes import file_volume, local_volume
from virtdriver import LibvirtVolumeDriver

pytestmark = pytest.mark.lsm_apparmor


def _rule(dom: libvirt.virDomain, path: str) -> str | None:
    rules = Path(f"/etc/apparmor.d/libvirt/libvirt-{dom.UUIDString()}.files").read_text()
    found = re.search(rf'^\s*"{re.escape(path)}"\s+([a-z]+),\s*$', rules, re.MULTILINE)
    return found.group(1) if found else None


def _opens_for_writing(dom: libvirt.virDomain, path: str, driver: str) -> str | None:
    """Ask the guest's own (confined) QEMU to open ``path`` read-write; ``None`` when it could,
    else QEMU's error."""
    add = {"execute": "blockdev-add", "arguments": {
        "driver": driver, "filename": path, "node-name": "vdprobe", "read-only": False,
        "locking": "off"}}
    reply = json.loads(libvirt_qemu.qemuMonitorCommand(dom, json.dumps(add), 0))
    if "error" in reply:
        return reply["error"]["desc"]
    libvirt_qemu.qemuMonitorCommand(
        dom, json.dumps({"execute": "blockdev-del", "arguments": {"node-name": "vdprobe"}}), 0)
    return None


@pytest.fixture
def file_data() -> Iterator[str]:
    """A raw file QEMU's user can reach (libvirt's DAC driver makes it the owner)."""
    folder = Path(tempfile.mkdtemp(prefix="vd-aa-", dir="/var/tmp"))
    folder.chmod(0o755)
    yield str(sparse_file(folder / "volume.raw"))
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("kind", ["file", "block"])
def test_apparmor_readonly_attachment_cannot_be_opened_for_writing(
        kind, guests, loop_device, file_data, tmp_path, capsys) -> None:
    """A file (a volume on a share) is guarded by the profile alone; a block device is also
    guarded by libvirt's device cgroup, which gives a read-only disk read access only (QEMU's
    open for writing then fails with EPERM whatever the profile says)."""
    if kind == "file":
        path, info, disk_type, attr, qemu_driver = (
            file_data, file_volume(file_data, multiattach=True), "file", "file", "file")
    else:
        path, disk_type, attr, qemu_driver = loop_device.device, "block", "dev", "host_device"
        info = local_volume(path, multiattach=True)
    a, b, c = guests.start("aa-rw"), guests.start("aa-ro"), guests.start("aa-plain")
    driver = LibvirtVolumeDriver(state_dir=tmp_path / "state", detach_timeout=60)
    try:
        driver.attach_volume(info, a.name(), attach_mode="rw")
        driver.attach_volume(info, b.name(), attach_mode="ro")
        assert "w" in (_rule(a, path) or "")
        assert _rule(b, path) == "rk", _rule(b, path)
        refused = _opens_for_writing(b, path, qemu_driver)
        assert refused is not None, "the ro guest's QEMU opened the volume for writing"
        if kind == "file":
            assert "Permission denied" in refused, refused  # AppArmor's EACCES

        # Plain libvirt's read-only hot-plug, for contrast: 'rwk', which audit names; for a
        # file that QEMU can indeed open for writing.
        c.attachDeviceFlags(
            f"<disk type='{disk_type}' device='disk'><driver name='qemu' type='raw' "
            f"cache='none'/><source {attr}='{path}'/><target dev='sdc' bus='scsi'/><readonly/>"
            f"<shareable/><alias name='ua-{info['data']['volume_id']}'/></disk>",
            libvirt.VIR_DOMAIN_AFFECT_LIVE)
        assert _rule(c, path) == "rwk"
        if kind == "file":
            assert _opens_for_writing(c, path, qemu_driver) is None
        from virtdriver.cli import main
        assert main(["--state-dir", str(tmp_path / "state"), "audit"]) == 1
        out = capsys.readouterr().out
        assert f"DANGER profile: guest {c.name()} has {path} read-only, but its AppArmor " \
               f"profile lets its QEMU open it for writing" in out, out
        assert f"guest {b.name()} has" not in out
    finally:
        driver.close()
