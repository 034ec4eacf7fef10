"""The label-policy scenario shared by this host's tests and the nested SELinux/AppArmor host's:
a shared volume rw in one persistent guest and ro in another, both destroyed and started again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import libvirt

from testhosts.guests import Guests, LoopDevice, block_info, read_pattern, write_pattern
from tests.support.volumes import local_volume
from virtdriver import LibvirtVolumeDriver
from virtdriver.hypervisor.connection import security_models


def restart(dom: libvirt.virDomain) -> None:
    dom.destroy()
    dom.create()  # raises libvirtError when the persistent definition cannot start


def per_disk_models(xml: str) -> set[str]:
    return {m for m in ("selinux", "dac", "apparmor") if f"<seclabel model='{m}'" in xml}


def shared_guests_survive_restart(policy: str, guests: Guests, loop: LoopDevice,
                                  state_dir: Path, conn: libvirt.virConnect,
                                  after_start: Callable[[libvirt.virDomain, libvirt.virDomain],
                                                        None] | None = None,
                                  **host_options: object) -> None:
    """Attach rw + ro with ``policy``, restart both guests, check disks and data, detach,
    restart again; every per-disk label names a model this libvirt runs. ``after_start(a, b)``
    (the rw and the ro guest) runs once both have started again with the volume."""
    driver = LibvirtVolumeDriver(state_dir=state_dir, detach_timeout=60, label_policy=policy,
                                 **host_options)
    try:
        a, b = guests.start(f"{policy}-a"), guests.start(f"{policy}-b")
        info = local_volume(loop.device, multiattach=True)
        vid = info["data"]["volume_id"]
        alias = f"ua-{vid}"
        driver.attach_volume(info, a.name(), attach_mode="rw")
        driver.attach_volume(info, b.name(), attach_mode="ro")
        models = set(security_models(conn.getCapabilities()))
        for dom in (a, b):
            for xml in (dom.XMLDesc(0), dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)):
                written = per_disk_models(xml)
                assert written <= models, f"{policy}: per-disk labels for {written - models}"
        for dom in (a, b):
            restart(dom)
        qa, qb = block_info(a, alias), block_info(b, alias)
        assert (qa.ro, qb.ro) == (False, True)
        assert qa.file == qb.file == loop.device
        if after_start is not None:
            after_start(a, b)
        write_pattern(a, alias, 0x3C)
        assert read_pattern(b, alias, 0x3C)
        driver.detach_volume(a.name(), vid)
        driver.detach_volume(b.name(), vid)
        assert driver.records.load(vid) is None  # the last detach released the host side
        for dom in (a, b):
            restart(dom)
            assert alias not in dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    finally:
        driver.close()
