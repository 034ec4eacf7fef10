"""Every label policy on the enforcing hosts (issues #20 and #27), in both LSM modes.

- A guest with a shared rw and a shared ro virtdriver attachment survives destroy + start, for
  every policy the host can apply: per-disk labels name only the security drivers libvirt runs
  (a ``selinux`` label on the AppArmor host would stop the next start).
- ``explicit`` on the AppArmor host is refused before anything changes, naming its drivers.
- ``none`` works on data the operator made accessible (owner, and the shared image context under
  SELinux), and on data QEMU's user cannot open fails with one line naming the owner, QEMU's
  user and the two ways out.

AppArmor's read-only rule is in test_apparmor_readonly.py.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable

import libvirt
import pytest

from tests.nested.conftest import NESTED, qemu_pid, run, secmodels
from tests.nested.selinux_support import device_label_in_namespace, no_guest_denials
from tests.support.labels import shared_guests_survive_restart
from tests.support.volumes import local_volume
from virtdriver import LibvirtVolumeDriver
from virtdriver.errors import AttachFailed, UnsafeAttachment
from virtdriver.selinux import image_contexts

pytestmark = [pytest.mark.lsm_selinux, pytest.mark.lsm_apparmor]

SHARED_CONTEXT = "system_u:object_r:svirt_image_t:s0"


def _reset_node(dev: str, models: list[str]) -> None:
    """The loop device as the host's udev leaves it: root:disk 0660, its default label."""
    os.chown(dev, 0, grp.getgrnam("disk").gr_gid)
    os.chmod(dev, 0o660)
    if "selinux" in models:
        run("restorecon", dev)


def _operator_prepared(dev: str, models: list[str]) -> None:
    """What label_policy 'none' expects: the data already accessible to QEMU."""
    qemu = pwd.getpwnam("libvirt-qemu")
    os.chown(dev, qemu.pw_uid, qemu.pw_gid)
    if "selinux" in models:
        run("chcon", SHARED_CONTEXT, dev)


def _explicit_label_written(dev: str) -> Callable[[libvirt.virDomain, libvirt.virDomain], None]:
    """SELinux boot, ``explicit``: the rw guest's disk pins the policy's own shared image
    context (live and stored XML), and the device node in its QEMU's /dev carries it."""
    shared = image_contexts()["shared"]
    assert shared.split(":")[2] == "svirt_image_t", shared

    def check(a: libvirt.virDomain, b: libvirt.virDomain) -> None:
        pinned = "<seclabel model='selinux' relabel='yes'>"
        for xml in (a.XMLDesc(0), a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)):
            assert pinned in xml and f"<label>{shared}</label>" in xml, xml
        assert device_label_in_namespace(qemu_pid(a), dev) == shared
    return check


@pytest.mark.parametrize("policy", ["auto", "none", "explicit"])
def test_shared_guests_survive_destroy_and_start(policy, guests, loop_device, tmp_path,
                                                 system_conn, audit_window) -> None:
    models = secmodels(system_conn)
    dev = loop_device.device
    if policy == "explicit" and "selinux" not in models:
        driver = LibvirtVolumeDriver(state_dir=tmp_path / "state", label_policy="explicit")
        a = guests.start("explicit-a")
        before = a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        try:
            with pytest.raises(UnsafeAttachment, match=r"its security drivers: apparmor, dac\)"):
                driver.attach_volume(local_volume(dev, multiattach=True), a.name())
        finally:
            driver.close()
        assert a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE) == before
        return
    try:
        if policy == "none":
            _operator_prepared(dev, models)
        check = (_explicit_label_written(dev)
                 if policy == "explicit" and NESTED == "selinux" else None)
        shared_guests_survive_restart(policy, guests, loop_device, tmp_path / "state",
                                      system_conn, after_start=check)
        if NESTED == "selinux" and policy in ("auto", "explicit"):
            no_guest_denials(audit_window)
    finally:
        _reset_node(dev, models)


def test_none_on_data_qemu_cannot_open_says_whose_it_is(guests, loop_device, tmp_path,
                                                        system_conn) -> None:
    models = secmodels(system_conn)
    dev = loop_device.device
    _reset_node(dev, models)
    a = guests.start("denied-a")
    driver = LibvirtVolumeDriver(state_dir=tmp_path / "state", label_policy="none")
    info = local_volume(dev, multiattach=True)
    try:
        with pytest.raises(AttachFailed) as failed:
            driver.attach_volume(info, a.name())
        message = str(failed.value)
        assert "\n" not in message
        assert "Permission denied" in message, message
        assert "QEMU runs as libvirt-qemu (uid" in message, message
        assert f"cannot open {dev} (owner root:disk, mode brw-rw----)" in message, message
        assert "label_policy 'auto'" in message and "udev rule" in message, message
        assert driver.records.load(info["data"]["volume_id"]) is None  # rolled back
    finally:
        driver.close()
