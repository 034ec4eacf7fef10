"""Guests with virtdriver attachments start again, for every label policy (issue #27).

libvirt accepts a per-disk ``<seclabel model='selinux'>`` at hot-plug on a host whose libvirt runs
no SELinux driver, but refuses to *start* a guest whose definition carries one ("Security driver
model 'selinux' is not available"): an attach that wrote it into the persistent definition left a
guest that does not come back after the next host reboot. Here (libvirt with
``security_driver = "none"``, so no security model at all) every label policy that this host can
apply attaches a shared volume rw and ro to two persistent guests, both guests are destroyed and
started again, and both come back with their disks, still sharing the data. ``explicit`` cannot
mean anything without SELinux: it is refused before anything changes.

The same test runs on the nested SELinux and AppArmor hosts (testhosts/), where the models differ.
"""

from __future__ import annotations

import libvirt
import pytest

from testhosts.guests import block_info
from tests.support.labels import restart, shared_guests_survive_restart
from tests.support.volumes import local_volume
from virtdriver import LibvirtVolumeDriver
from virtdriver.errors import UnsafeAttachment
from virtdriver.hypervisor.connection import security_models

# whole_host: audit's exit status after the repair speaks for every guest of the host
pytestmark = [pytest.mark.hypervisor, pytest.mark.whole_host]


def _restart(dom: libvirt.virDomain) -> None:
    restart(dom)


def _policies(conn: libvirt.virConnect) -> list[str]:
    models = security_models(conn.getCapabilities())
    return ["auto", "none"] + (["explicit"] if "selinux" in models else [])


@pytest.mark.parametrize("policy", ["auto", "none", "explicit"])
def test_shared_guests_survive_destroy_and_start(policy, guests, loop_device, tmp_path,
                                                 system_conn) -> None:
    if policy not in _policies(system_conn):
        pytest.skip("covered by test_explicit_without_selinux_is_refused_before_anything: "
                    "this host's libvirt runs no SELinux driver")
    shared_guests_survive_restart(policy, guests, loop_device, tmp_path / "state", system_conn)


def test_explicit_without_selinux_is_refused_before_anything(guests, loop_device, tmp_path,
                                                             system_conn) -> None:
    models = security_models(system_conn.getCapabilities())
    if "selinux" in models:
        pytest.skip("this host's libvirt runs SELinux: explicit applies here")
    state = tmp_path / "state"
    driver = LibvirtVolumeDriver(state_dir=state, label_policy="explicit",
                                 shared_image_label="system_u:object_r:svirt_image_t:s0")
    try:
        a = guests.start("explicit-a")
        before = (a.XMLDesc(0), a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
        info = local_volume(loop_device.device, multiattach=True)
        with pytest.raises(UnsafeAttachment) as refused:
            driver.attach_volume(info, a.name(), attach_mode="rw")
        drivers = ", ".join(models) or "none"
        assert str(refused.value).count("\n") == 0
        assert f"its security drivers: {drivers})" in str(refused.value)
        assert (a.XMLDesc(0), a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)) == before
        assert not (state / "connections").exists() or not any((state / "connections").iterdir())
    finally:
        driver.close()


def test_audit_reports_and_repair_labels_removes_a_foreign_model(guests, loop_device, tmp_path,
                                                                 system_conn, capsys) -> None:
    """A definition with a per-disk label of a model libvirt does not run (as an older
    virtdriver wrote it): audit says the guest will not start and how to repair it; the repair
    changes only the definitions; the guests then start with the disk."""
    from virtdriver.cli import main

    models = security_models(system_conn.getCapabilities())
    foreign = next(m for m in ("selinux", "apparmor") if m not in models)
    vid = "9a1c3f2e-5b7d-4e8f-a0b1-c2d3e4f5a6b7"
    planted = (f"<disk type='block' device='disk'><driver name='qemu' type='raw' cache='none'/>"
               f"<source dev='{loop_device.device}'><seclabel model='{foreign}' relabel='no'/>"
               f"</source><target dev='sdb' bus='scsi'/><shareable/>"
               f"<alias name='ua-{vid}'/></disk>")
    both = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG
    a, b = guests.start("planted-a"), guests.start("planted-b")
    a.attachDeviceFlags(planted, both)
    b.attachDeviceFlags(planted, both)
    common = ["-c", "qemu:///system", "--state-dir", str(tmp_path / "state")]

    assert main([*common, "audit"]) == 1
    out = capsys.readouterr().out
    for dom in (a, b):
        assert (f"DANGER startup: guest {dom.name()}'s definition gives disk sdb a <seclabel "
                f"model='{foreign}'>") in out
        assert f"'virtdriver repair-labels {dom.name()}'" in out
    a.destroy()
    with pytest.raises(libvirt.libvirtError, match=f"model '{foreign}' is not available"):
        a.create()  # what audit warns of: libvirt refuses to start the guest

    live_b = b.XMLDesc(0)
    assert main([*common, "repair-labels"]) == 0
    out = capsys.readouterr().out
    for dom in (a, b):
        assert f"{dom.name()}: removed the <seclabel model='{foreign}'> of disk sdb" in out
        assert f"model='{foreign}'" not in dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert b.XMLDesc(0) == live_b  # the running guest is untouched
    a.create()
    _restart(b)
    for dom in (a, b):
        assert block_info(dom, f"ua-{vid}").file == loop_device.device
    assert main([*common, "audit"]) == 0, capsys.readouterr().out
