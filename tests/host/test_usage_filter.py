"""The look before parsing, against the XML libvirt itself writes for a foreign disk."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from tests.fast.test_usage_filter import disk
from virtdriver.hypervisor.dataid import DataIdentity
from virtdriver.hypervisor.domains import DomainsView, DomainXml, ListedDomain, source_token
from virtdriver.hypervisor.metadata import NS
from virtdriver.hypervisor.volume_users import Wanted
from virtdriver.policy.identity import alias_for
from virtdriver.policy.sharing import users_of


@pytest.mark.hypervisor
def test_libvirts_own_xml_of_a_foreign_disk_is_found_by_the_look_before_parsing(
        guests, volume_driver, tmp_path: Path) -> None:
    """Against real libvirt (its own escaping of odd path characters): a disk added behind
    virtdriver's back, to one guest's definition only, through a symlink whose name holds
    ``'``, ``&`` and ``<``, is found as a user of the data: attaching the file to another guest
    is refused, and its detach keeps the host connection while the definition holds it."""
    import libvirt

    from tests.support.volumes import file_volume
    from virtdriver.errors import VolumeInUse

    image = tmp_path / "data.raw"
    image.write_bytes(b"\0" * 65536)
    odd = tmp_path / "it's & <odd>"
    odd.mkdir()
    link = odd / "link's.raw"
    link.symlink_to(image)
    a, b = guests.start("a"), guests.start("b")
    source = {"file": str(link)}
    foreign = etree.tostring(disk("file", source, None, "sdc"), encoding="unicode")
    a.attachDeviceFlags(foreign, libvirt.VIR_DOMAIN_AFFECT_CONFIG)  # definition only
    assert "&apos;" in a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE) or "&amp;" in a.XMLDesc(
        libvirt.VIR_DOMAIN_XML_INACTIVE)
    info = file_volume(str(image), multiattach=True)
    with pytest.raises(VolumeInUse, match="under another name"):
        volume_driver.attach_volume(info, b.name())
    # The same id through the symlink's plain spelling on a guest of its own: the detach sees
    # the foreign definition and keeps the connection.
    vid = info["data"]["volume_id"]
    a.detachDeviceFlags(foreign, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    volume_driver.attach_volume(info, b.name())
    a.attachDeviceFlags(foreign, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    volume_driver.detach_volume(b.name(), vid)
    assert volume_driver.records.connected() == [vid]
    a.detachDeviceFlags(foreign, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    assert volume_driver.release_volume(vid)
