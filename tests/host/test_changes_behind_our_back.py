"""Changes made by other libvirt clients between two decisions are seen by the next one.

The driver reads who uses a volume through libvirt's API on every decision (never libvirt's
files): a disk attached or detached by another connection, live or in the definition only, a
guest defined, started or stopped behind its back.
"""

from __future__ import annotations

import time

import libvirt
import pytest

from tests.support.volumes import file_volume
from virtdriver.errors import VolumeInUse

pytestmark = pytest.mark.hypervisor


def test_the_driver_sees_every_change_made_behind_its_back(guests, volume_driver,
                                                          tmp_path) -> None:
    a, b, c = guests.start("a"), guests.start("b"), guests.start("c")
    image, other = tmp_path / "data.raw", tmp_path / "other.raw"
    for path in (image, other):
        path.write_bytes(b"\0" * 65536)
    warm = file_volume(str(other), multiattach=True)
    volume_driver.attach_volume(warm, c.name())
    info = file_volume(str(image), multiattach=False)
    foreign = (f"<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
               f"<source file='{image}'/><target dev='sdc' bus='scsi'/></disk>")
    for flags in (libvirt.VIR_DOMAIN_AFFECT_CONFIG, libvirt.VIR_DOMAIN_AFFECT_LIVE,
                  libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG):
        volume_driver.volume_users(warm["data"]["volume_id"])  # a read of the whole host
        a.attachDeviceFlags(foreign, flags)
        with pytest.raises(VolumeInUse, match="under another name"):
            volume_driver.attach_volume(info, b.name())
        a.detachDeviceFlags(foreign, flags)
        if flags & libvirt.VIR_DOMAIN_AFFECT_LIVE:  # an OS-less guest lets go at once
            deadline = time.monotonic() + 10
            while str(image) in a.XMLDesc(0) and time.monotonic() < deadline:
                time.sleep(0.05)
    # a new definition holding the data, then that guest stopped: still a user of it
    volume_driver.attach_volume(info, b.name())
    xml = a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    a.destroy()
    a.connect().defineXML(xml.replace("</devices>", foreign + "</devices>"))
    volume_driver.detach_volume(b.name(), info["data"]["volume_id"])
    assert volume_driver.records.connected() == sorted([warm["data"]["volume_id"],
                                                     info["data"]["volume_id"]])


def test_a_guest_started_elsewhere_is_a_user_at_the_next_decision(guests, volume_driver,
                                                                  system_conn,
                                                                  tmp_path) -> None:
    """A guest defined and started by another connection between two attaches, holding the
    data, makes the second attach refuse; once it is gone again, the attach goes through."""
    a, b = guests.start("first"), guests.start("second")
    image = tmp_path / "shared.raw"
    image.write_bytes(b"\0" * 65536)
    info = file_volume(str(image), multiattach=False)
    volume_driver.attach_volume(info, a.name())
    volume_driver.detach_volume(a.name(), info["data"]["volume_id"])
    xml = b.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    b.destroy()
    b.undefine()
    foreign = (f"<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
               f"<source file='{image}'/><target dev='sdc' bus='scsi'/></disk>")
    elsewhere = system_conn.createXML(xml.replace("</devices>", foreign + "</devices>"), 0)
    try:
        with pytest.raises(VolumeInUse, match="under another name"):
            volume_driver.attach_volume(info, a.name())
    finally:
        elsewhere.destroy()
    assert volume_driver.attach_volume(info, a.name()).volumeId == info["data"]["volume_id"]
