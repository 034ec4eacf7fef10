"""nova's own compute service loads virtdriver from the documented line of ``nova.conf``.

``compute_driver = virtdriver.nova.LibvirtDriver`` goes through nova's loader
(``nova.virt.driver.load_compute_driver``, which imports ``nova.virt.`` + the option) when nova's
functional harness starts a compute service: API, conductor, scheduler, placement and the compute
service in one process, over nova's fake libvirt (``LibvirtFixture``), the way nova tests its own
libvirt driver. Through nova's REST API one multiattach volume then goes into two servers, and
the disks the fake libvirt received are virtdriver's: its ``ua-`` alias, shareable,
``cache='none'``.

Needs nova 34 and its placement fixture: ``scripts/nova-suite.sh`` runs this module with
unittest (nova's test classes are testtools cases, which pytest does not run) in its nova venv.
"""

from __future__ import annotations

import nova.tests.functional  # noqa: F401  first: nova's eventlet monkey patching  isort:skip

from lxml import etree
from nova.tests import fixtures as nova_fixtures
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import base

import fixtures
import virtdriver.nova

DOCUMENTED_LINE = "virtdriver.nova.LibvirtDriver"  # README and docs/nova.md


class TestComputeServiceLoadsVirtdriver(base.ServersTestBase):
    microversion = "2.60"  # multiattach
    ISCSI_VOL = nova_fixtures.CinderFixture.ISCSI_BACKED_VOL

    def setUp(self) -> None:
        self.useFixture(nova_fixtures.AllServicesCurrent())
        super().setUp()

    def _setup_compute_service(self) -> None:
        # nova's base sets compute_driver='libvirt.LibvirtDriver' here; an operator writes ours.
        self.flags(compute_driver=DOCUMENTED_LINE)

    def _server(self, name: str) -> dict:
        return self._create_server(name=name, networks="none")

    def _record_attached_disks(self) -> dict[str, list]:
        """The ``<disk>`` XML each guest received from the compute driver, by guest UUID.

        nova's fake libvirt keeps only a few fields of an attached disk, so the XML is read where
        it crosses into libvirt: ``virDomainAttachDeviceFlags``.
        """
        seen: dict[str, list] = {}
        real = fakelibvirt.Domain.attachDeviceFlags

        def attach(dom, xml, flags):  # type: ignore[no-untyped-def]
            seen.setdefault(dom.UUIDString(), []).append(etree.fromstring(xml))
            return real(dom, xml, flags)

        self.useFixture(fixtures.MonkeyPatch(
            "nova.tests.fixtures.libvirt.Domain.attachDeviceFlags", attach))
        return seen

    def test_documented_line_loads_virtdriver_through_nova_loader(self) -> None:
        self.start_compute("compute1")
        compute = self.computes["compute1"]
        # nova's loader imported nova.virt.virtdriver.nova.LibvirtDriver: virtdriver's class.
        assert type(compute.driver) is virtdriver.nova.LibvirtDriver
        assert type(compute.manager.driver) is virtdriver.nova.LibvirtDriver

    def test_multiattach_volume_in_two_servers_is_rendered_by_virtdriver(self) -> None:
        self.start_compute("compute1")
        attached = self._record_attached_disks()
        # nova's fake Cinder sends the iSCSI shape for this volume; make it multiattach.
        cinder = self.cinder
        cinder.multiattach_vols = getattr(cinder, "multiattach_vols", set())
        volume_id = nova_fixtures.CinderFixture.MULTIATTACH_VOL
        cinder.VOLUME_CONNECTION_INFO[volume_id] = {
            "driver_volume_type": "iscsi",
            "data": {"target_portal": "192.0.2.10:3260",
                     "target_iqn": "iqn.2010-10.org.openstack:volume-shared",
                     "target_lun": 1, "volume_id": volume_id}}
        self.addCleanup(cinder.VOLUME_CONNECTION_INFO.pop, volume_id, None)
        servers = [self._server("a"), self._server("b")]
        for server in servers:
            self.api.api_post(f"/servers/{server['id']}/os-volume_attachments",
                              {"volumeAttachment": {"volumeId": volume_id}})
        for server in servers:
            listed = self.api.api_get(
                f"/servers/{server['id']}/os-volume_attachments").body["volumeAttachments"]
            assert [a["volumeId"] for a in listed] == [volume_id]
            disks = attached[server["id"]]
            assert len(disks) == 1, [etree.tostring(d) for d in disks]
            disk = disks[0]
            # virtdriver's rendering: its alias, sharing and cache policy.
            assert disk.find("alias").get("name") == f"ua-{volume_id}"
            assert disk.find("shareable") is not None
            assert disk.find("driver").get("cache") == "none"
            assert disk.find("source").get("dev") == "/dev/sda"  # os-brick's (nova's fake)

    def test_type_without_adapter_keeps_novas_driver(self) -> None:
        # nova's fake Cinder sends driver_volume_type 'fake' (nova's test-only type): no adapter
        # renders it, nova's own LibvirtFakeVolumeDriver does; the attach must not fail.
        self.start_compute("compute1")
        attached = self._record_attached_disks()
        server = self._server("plain")
        volume_id = nova_fixtures.CinderFixture.SWAP_OLD_VOL
        self.api.api_post(f"/servers/{server['id']}/os-volume_attachments",
                          {"volumeAttachment": {"volumeId": volume_id}})
        self._wait_for_volume_attach(server["id"], volume_id)
        (disk,) = attached[server["id"]]
        assert disk.find("source").get("protocol") == "fake"
        volume_drivers = self.computes["compute1"].driver.volume_drivers
        assert type(volume_drivers["fake"]).__module__ == "nova.virt.libvirt.volume.volume"
