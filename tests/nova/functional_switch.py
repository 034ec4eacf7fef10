"""Switch nova's functional tests to one libvirt compute driver, without touching nova's code.

Every compute service of nova's functional harness is started by ``nova.test.TestCase
.start_service('compute', ...)``; :func:`install` wraps that one method (in this process only):

- the compute driver becomes the chosen one (``compute_driver`` is overridden right before the
  service loads it, whatever the test set: nova's libvirt base sets ``libvirt.LibvirtDriver``,
  tests built on ``_IntegratedTestBase`` get nova's default ``fake.SmallFakeDriver``);
- a test written for nova's fake virt driver gets the libvirt environment nova's own libvirt
  base (``nova/tests/functional/libvirt/base.py``) builds: nova's fake libvirt, os-brick and
  image-backend fixtures, one fake libvirt connection per host (kept across a restart);
- the service that started must run exactly the chosen class, else the test fails: a switch that
  silently does nothing is caught here.

nova's Cinder fixture answers the volumes it has no shape for with ``driver_volume_type``
``fake``, which virtdriver leaves to nova's own driver; :func:`install` makes it answer with what
Cinder's RBD (or LVM/iSCSI) driver and volume manager send (:data:`SHAPES`), for both drivers
alike, so the volumes of every test go through an adapter -- except in a test that patches nova's
fake volume driver itself (:func:`keeps_fake_volumes`). RBD is the default: QEMU opens it, so a
test that stubs out nova's host-side connect still renders it. ``COUNTS`` counts the adapters'
``get_config`` calls per test.
"""

from __future__ import annotations

import collections
import inspect
import io
import sys
from collections.abc import Callable
from typing import Any
from unittest import mock

DRIVERS = {
    "nova": ("libvirt.LibvirtDriver", "nova.virt.libvirt.driver.LibvirtDriver"),
    "virtdriver": ("virtdriver.nova.LibvirtDriver", "virtdriver.nova.compute.LibvirtDriver"),
}

#: adapter get_config calls, by test id (only with the virtdriver driver).
COUNTS: collections.Counter[str] = collections.Counter()
#: compute services started, by test id.
STARTED: collections.Counter[str] = collections.Counter()


#: Cinder's front-end document for one volume, as its RBD (default) or LVM/iSCSI driver and the
#: volume manager (access_mode, encrypted, qos_specs, cacheable) return it from
#: ``attachment_update``.
SHAPES: dict[str, Callable[[str], dict[str, Any]]] = {
    "rbd": lambda vid: {
        "driver_volume_type": "rbd",
        "data": {
            "name": f"volumes/volume-{vid}", "hosts": ["192.0.2.21", "192.0.2.22"],
            "ports": ["6789", "6789"], "cluster_name": "ceph", "auth_enabled": True,
            "auth_username": "cinder", "secret_type": "ceph",
            "secret_uuid": "457eb676-33da-42ec-9a8c-9293d545c337", "keyring": None,
            "discard": True, "qos_specs": None, "access_mode": "rw", "encrypted": False,
            "cacheable": False}},
    "iscsi": lambda vid: {
        "driver_volume_type": "iscsi",
        "data": {
            "target_discovered": False, "target_portal": "192.0.2.10:3260",
            "target_iqn": f"iqn.2010-10.org.openstack:volume-{vid}", "target_lun": 0,
            "auth_method": "CHAP", "auth_username": "vdtestuser",
            "auth_password": "vdtestsecret", "qos_specs": None, "access_mode": "rw",
            "encrypted": False, "cacheable": False, "discard": False}},
}


def realistic_connection_info(shape: str, volume_id: str, attachment_id: str) -> dict[str, Any]:
    info = SHAPES[shape](volume_id)
    info["data"].update(volume_id=volume_id, attachment_id=attachment_id)
    return info


def keeps_fake_volumes(test: Any) -> bool:
    """A test that patches nova's test-only volume driver needs nova's ``fake`` volumes."""
    module = sys.modules.get(type(test).__module__)
    try:
        return "LibvirtFakeVolumeDriver" in inspect.getsource(module)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return False


def _dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class _Switch:
    def __init__(self, driver: str, shape: str) -> None:
        self.option, self.expected = DRIVERS[driver]
        self.driver = driver
        self.shape = shape

    def install(self) -> None:
        from nova import test
        from nova.tests.fixtures import cinder

        real_start = test.TestCase.start_service
        switch = self

        def start_service(self: Any, name: str, host: str | None = None,
                          cell_name: str | None = None, **kwargs: Any) -> Any:
            if name != "compute":
                return real_start(self, name, host=host, cell_name=cell_name, **kwargs)
            return switch.start_compute(real_start, self, host, cell_name, kwargs)

        test.TestCase.start_service = start_service

        real_find = cinder.CinderFixture._find_connection_info

        def find_connection_info(fixture: Any, volume_id: str, attachment_id: str) -> Any:
            info = real_find(fixture, volume_id, attachment_id)
            if info.get("driver_volume_type") == "fake" and not keeps_fake_volumes(fixture.test):
                info = realistic_connection_info(switch.shape, volume_id, attachment_id)
            return info

        cinder.CinderFixture._find_connection_info = find_connection_info
        if self.driver == "virtdriver":
            self._count_adapters()

    def _count_adapters(self) -> None:
        from virtdriver.nova import VirtdriverRendering

        real = VirtdriverRendering.get_config

        def get_config(adapter: Any, connection_info: Any, disk_info: Any) -> Any:
            COUNTS[_current_test()] += 1
            return real(adapter, connection_info, disk_info)

        VirtdriverRendering.get_config = get_config  # type: ignore[method-assign]

    def start_compute(self, real_start: Any, test: Any, host: str | None,
                      cell_name: str | None, kwargs: dict[str, Any]) -> Any:
        from nova import conf

        # Decided at a test's first compute service, before our override is in CONF: did the
        # test ask for libvirt itself (nova's libvirt base and its kin) or for a fake driver?
        if not hasattr(test, "_virtdriver_native"):
            test._virtdriver_native = conf.CONF.compute_driver == "libvirt.LibvirtDriver"
        env = None if test._virtdriver_native else _environment(test)
        test.flags(compute_driver=self.option)
        if env is None:
            service = real_start(test, "compute", host=host, cell_name=cell_name, **kwargs)
        else:
            service = env.start(real_start, test, host, cell_name, kwargs)
        actual = _dotted(type(service.manager.driver))
        if actual != self.expected:
            raise AssertionError(f"compute driver switch failed: {actual} runs, "
                                 f"{self.expected} expected")
        STARTED[_current_test()] += 1
        return service


_current: list[str] = [""]


def _current_test() -> str:
    return _current[0]


def set_current_test(test_id: str) -> None:
    _current[0] = test_id


class _LibvirtEnvironment:
    """What nova's ``ServersTestBase.setUp`` and ``start_compute`` build, for a test that did not
    ask for libvirt; set up at its first compute service."""

    def __init__(self, test: Any) -> None:
        from nova.tests import fixtures as nova_fixtures

        import fixtures

        test.flags(instances_path=test.useFixture(fixtures.TempDir()).path)
        test.useFixture(nova_fixtures.LibvirtImageBackendFixture())
        test.useFixture(nova_fixtures.CGroupsFixture())
        test.useFixture(nova_fixtures.LibvirtFixture())
        test.useFixture(nova_fixtures.OSBrickFixture())
        patches = {
            "nova.virt.libvirt.LibvirtDriver._create_image": {"return_value": (False, False)},
            "nova.virt.libvirt.LibvirtDriver._get_local_gb_info": {
                "return_value": {"total": 128, "used": 44, "free": 84}},
            "nova.virt.libvirt.driver.libvirt_utils.is_valid_hostname": {"return_value": True},
            "nova.virt.libvirt.driver.libvirt_utils.file_open": {
                "side_effect": lambda *a, **k: io.BytesIO(b"")},
            "nova.privsep.utils.supports_direct_io": {"return_value": True},
            "nova.virt.libvirt.host.Host.get_online_cpus": {"return_value": set(range(16))},
            # nova's libvirt tests that resize do the same (no instance directory to move).
            "nova.virt.libvirt.driver.LibvirtDriver.migrate_disk_and_power_off": {
                "return_value": "{}"},
        }
        for target, how in patches.items():
            test.useFixture(fixtures.MockPatch(target, **how))
        self.get_connection = test.useFixture(
            fixtures.MockPatch("nova.virt.libvirt.host.Host.get_connection")).mock
        self.connections: dict[str, Any] = {}

    def connection(self, hostname: str) -> Any:
        from nova.tests.fixtures import libvirt as fakelibvirt

        if hostname not in self.connections:
            self.connections[hostname] = fakelibvirt.Connection(
                "qemu:///system", version=fakelibvirt.FAKE_LIBVIRT_VERSION,
                hv_version=fakelibvirt.FAKE_QEMU_VERSION,
                host_info=fakelibvirt.HostInfo(cpu_nodes=2, cpu_sockets=1, cpu_cores=2,
                                               cpu_threads=2),
                hostname=hostname)
        return self.connections[hostname]

    def start(self, real_start: Any, test: Any, host: str | None, cell_name: str | None,
              kwargs: dict[str, Any]) -> Any:
        from nova import conf
        from oslo_utils.fixture import uuidsentinel as uuids

        hostname = host or conf.CONF.host
        conn = self.connection(hostname)
        self.get_connection.return_value = conn
        with mock.patch("nova.virt.node.get_local_node_uuid",
                        return_value=str(getattr(uuids, f"node_{hostname}"))):
            service = real_start(test, "compute", host=host, cell_name=cell_name, **kwargs)
            driver = service.manager.driver
            driver._host.get_connection = lambda: conn
            driver._host.get_node_uuid()
        return service


def _environment(test: Any) -> _LibvirtEnvironment:
    env = getattr(test, "_virtdriver_libvirt_env", None)
    if env is None:
        env = _LibvirtEnvironment(test)
        test._virtdriver_libvirt_env = env
    return env


def install(driver: str, shape: str = "rbd") -> None:
    """Switch every compute service this process starts to ``driver`` (``nova``/``virtdriver``);
    nova's ``fake`` volumes become Cinder documents of ``shape`` (a key of :data:`SHAPES`)."""
    _Switch(driver, shape).install()
