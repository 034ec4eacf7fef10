"""AppArmor: a read-only attachment is read-only for the guest's confined QEMU too (#27).

libvirt's hot-plug gives every new disk ``rwk`` in the guest's profile (virt-aa-helper's rule for
a new file); virtdriver regenerates the profile from the live definition after a read-only
attach, so the rule is ``rk`` and the confined QEMU cannot open the volume for writing. A
read-only hot-plug by plain libvirt keeps ``rwk`` (its QEMU can), and ``virtdriver audit`` says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import libvirt
import libvirt_qemu
import pytest

from tests.support.volumes import local_volume
from virtdriver import LibvirtVolumeDriver

pytestmark = pytest.mark.lsm_apparmor


def _rule(dom: libvirt.virDomain, path: str) -> str | None:
    rules = Path(f"/etc/apparmor.d/libvirt/libvirt-{dom.UUIDString()}.files").read_text()
    found = re.search(rf'^\s*"{re.escape(path)}"\s+([a-z]+),\s*$', rules, re.MULTILINE)
    return found.group(1) if found else None


def _opens_for_writing(dom: libvirt.virDomain, path: str) -> str | None:
    """Ask the guest's own (confined) QEMU to open ``path`` read-write; ``None`` when it could,
    else QEMU's error."""
    add = {"execute": "blockdev-add", "arguments": {
        "driver": "host_device", "filename": path, "node-name": "vdprobe", "read-only": False,
        "locking": "off"}}
    reply = json.loads(libvirt_qemu.qemuMonitorCommand(dom, json.dumps(add), 0))
    if "error" in reply:
        return reply["error"]["desc"]
    libvirt_qemu.qemuMonitorCommand(
        dom, json.dumps({"execute": "blockdev-del", "arguments": {"node-name": "vdprobe"}}), 0)
    return None


def test_apparmor_readonly_attachment_cannot_be_opened_for_writing(
        guests, loop_device, tmp_path, system_conn, capsys) -> None:
    dev = loop_device.device
    a, b, c = guests.start("aa-rw"), guests.start("aa-ro"), guests.start("aa-plain")
    driver = LibvirtVolumeDriver(state_dir=tmp_path / "state", detach_timeout=60)
    info = local_volume(dev, multiattach=True)
    try:
        driver.attach_volume(info, a.name(), attach_mode="rw")
        driver.attach_volume(info, b.name(), attach_mode="ro")
        assert "w" in (_rule(a, dev) or "")
        assert _rule(b, dev) == "rk", _rule(b, dev)
        refused = _opens_for_writing(b, dev)
        assert refused is not None and "Permission denied" in refused, refused

        # Plain libvirt's read-only hot-plug, for contrast: 'rwk', and that QEMU can open it
        # for writing; audit names it.
        c.attachDeviceFlags(
            f"<disk type='block' device='disk'><driver name='qemu' type='raw' cache='none'/>"
            f"<source dev='{dev}'/><target dev='sdc' bus='scsi'/><readonly/><shareable/>"
            f"<alias name='ua-{info['data']['volume_id']}'/></disk>",
            libvirt.VIR_DOMAIN_AFFECT_LIVE)
        assert _rule(c, dev) == "rwk"
        assert _opens_for_writing(c, dev) is None
        from virtdriver.cli import main
        assert main(["--state-dir", str(tmp_path / "state"), "audit"]) == 1
        out = capsys.readouterr().out
        assert f"DANGER profile: guest {c.name()} has {dev} read-only, but its AppArmor " \
               f"profile lets its QEMU open it for writing" in out, out
        assert f"guest {b.name()} has" not in out
    finally:
        driver.close()
