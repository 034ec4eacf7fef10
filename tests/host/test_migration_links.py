"""A guest that arrives by live migration holds the device its link led to (#56, item 1).

An attach gives a running guest the device its source link leads to (the definition keeps the
link); an arrival must too, or a link repointed on the destination (an iSCSI re-login there)
hides the device the arrived guest's QEMU writes. Real guests, a real loop device behind our own
symlink, and the private second libvirtd of tests/support/migration.py.
"""

from __future__ import annotations

from pathlib import Path

import libvirt
import pytest

from tests.support.migration import (  # noqa: F401 - fixtures, found by name
    dest_conn,
    dest_guests,
    destination_daemon,
    drivers,
    migration_uri,
    run_cli,
    volume_file,
)
from tests.support.volumes import local_volume, repoint
from virtdriver.errors import VolumeInUse

pytestmark = pytest.mark.hypervisor


def assert_holds_the_device(dom: libvirt.virDomain, device: str, link: Path,
                            persistent: bool) -> None:
    """The running guest names ``device``; its definition, if any, the link."""
    assert f"dev='{device}'" in dom.XMLDesc(0) and str(link) not in dom.XMLDesc(0)
    if persistent:
        defined = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert f"dev='{link}'" in defined and device not in defined


def assert_moved_link_refused(dest_guests, destination, device: str, link: Path,
                              other: str) -> None:
    """Once the link leads to ``other``, a second volume naming ``device`` is refused."""
    repoint(link, other)
    c = dest_guests.start("c")
    with pytest.raises(VolumeInUse, match="under another name"):
        destination.attach_volume(local_volume(device, multiattach=False), c.name())
    assert destination.list_attachments(c.name()) == []


def attached_through(link: Path, device: str, guests, dest_guests,
                     source) -> tuple[libvirt.virDomain, dict, str]:
    """A guest on the source with a single-attach volume whose device path is ``link`` to
    ``device``; the destination's guests remove it too once it arrives there."""
    link.symlink_to(device)
    info = local_volume(str(link), multiattach=False)
    a = guests.start("a")
    source.attach_volume(info, a.name())
    dest_guests.adopt(a.name())
    return a, info, info["data"]["volume_id"]


def test_a_migrated_guest_holds_the_device_its_link_led_to(
        guests, dest_guests, drivers, loop_device, second_loop, tmp_path: Path) -> None:
    source, destination = drivers
    l1, l2 = loop_device.device, second_loop.device
    assert l1 is not None and l2 is not None
    link = tmp_path / "ip-192.0.2.5:3260-iscsi-iqn.2010-10.org.openstack:v1-lun-1"
    a, info, vid = attached_through(link, l1, guests, dest_guests, source)

    assert source.migrate(a.name(), destination, [info], uri=migration_uri()) == []

    moved = destination.connection.get().lookupByName(a.name())
    assert moved.isActive() and moved.isPersistent()
    assert_holds_the_device(moved, l1, link, persistent=True)
    assert_moved_link_refused(dest_guests, destination, l1, link, l2)
    destination.detach_volume(a.name(), vid)
    assert destination.records.connected() == []


def test_the_manual_steps_give_the_live_xml_the_device_and_the_definition_the_link(
        guests, dest_guests, drivers, loop_device, second_loop, tmp_path: Path) -> None:
    source, destination = drivers
    l1, l2 = loop_device.device, second_loop.device
    assert l1 is not None and l2 is not None
    link = tmp_path / "by-path-link"
    a, info, vid = attached_through(link, l1, guests, dest_guests, source)
    done = run_cli("-c", destination.uri, "--state-dir", str(destination.state_dir),
                   "migrate-prepare", str(volume_file(tmp_path, info)), a.UUIDString())
    assert done.returncode == 0, done.stderr

    flags = libvirt.VIR_DOMAIN_XML_MIGRATABLE
    live = destination.incoming_xml(a.XMLDesc(flags), [info])
    defined = destination.incoming_xml(a.XMLDesc(flags | libvirt.VIR_DOMAIN_XML_INACTIVE),
                                       [info], live=False)
    a.migrate3(destination.connection.get(), {libvirt.VIR_MIGRATE_PARAM_DEST_XML: live,
                                              libvirt.VIR_MIGRATE_PARAM_PERSIST_XML: defined,
                                              libvirt.VIR_MIGRATE_PARAM_URI: migration_uri()},
               libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST
               | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE)
    assert source.finish_outgoing(a.UUIDString(), vid) == []
    assert destination.complete_incoming(a.UUIDString(), vid) is True

    moved = destination.connection.get().lookupByName(a.name())
    assert_holds_the_device(moved, l1, link, persistent=True)
    assert_moved_link_refused(dest_guests, destination, l1, link, l2)
    destination.detach_volume(a.name(), vid)
    assert destination.records.connected() == []
