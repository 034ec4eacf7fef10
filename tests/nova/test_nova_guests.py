"""virtdriver.nova.LibvirtDriver on the real libvirtd: nova's own attach/detach code path.

One multiattach volume (a loop device, ``driver_volume_type`` ``local``) goes into two running
OS-less KVM guests through nova's ``LibvirtDriver.attach_volume`` -- guest B read-only because the
storage service's ``data.access_mode`` says ``ro`` -- and out again through ``detach_volume``
(nova's detach with libvirt's device-removed event). nova's database is the in-memory SQLite of
nova's own test fixture (``instance.save()`` is part of nova's attach path); no block-storage
service is involved: whether the host connection may go is answered from libvirt's live state.

Needs nova 34: ``scripts/nova-suite.sh`` runs this file in its nova venv; in virtdriver's own
venv it is skipped.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

pytest.importorskip("nova.conf", reason="needs nova 34; scripts/nova-suite.sh runs it in its venv")

import libvirt  # noqa: E402

from testhosts.guests import Guests, LoopDevice, block_info  # noqa: E402

pytestmark = pytest.mark.hypervisor


def _libvirtd_up() -> bool:
    return os.path.exists("/var/run/libvirt/libvirt-sock")


@pytest.fixture(scope="module")
def nova_env(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """nova's configuration, objects and in-memory database, as a compute service has them."""
    if not _libvirtd_up():
        pytest.skip("libvirtd is not running (./scripts/setup-host.sh starts it)")
    import nova.conf
    from nova import config, objects

    conf = nova.conf.CONF
    config.parse_args([], configure_db=False, init_rpc=False)
    objects.register_all()
    conf.set_override("virt_type", "kvm" if os.path.exists("/dev/kvm") else "qemu",
                      group="libvirt")
    conf.set_override("connection_uri", "qemu:///system", group="libvirt")
    conf.set_override("lock_path", str(tmp_path_factory.mktemp("nova-locks")),
                      group="oslo_concurrency")
    conf.set_override("connection", "sqlite://", group="database")
    from nova.tests import fixtures as nova_fixtures

    database = nova_fixtures.Database(database="main")
    database.setUp()
    yield conf
    database.cleanUp()
    conf.reset()


@pytest.fixture
def compute(nova_env: Any) -> Any:
    """``virtdriver.nova.LibvirtDriver`` connected to qemu:///system, libvirt events running."""
    from nova.virt import fake

    from virtdriver.nova import LibvirtDriver

    driver = LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._host.initialize()  # nova's libvirt event thread: detach waits for DEVICE_REMOVED
    yield driver
    driver._host.cleanup()


def _instance(ctx: Any, dom: Any) -> Any:
    from nova import objects

    instance = objects.Instance(context=ctx, uuid=dom.UUIDString(), host="vdtest-host",
                                project_id="p", user_id="u", image_ref="", system_metadata={},
                                vm_state="active", power_state=1)
    instance.create()
    return instance


class DisconnectRecorder:
    """Records each ``disconnect_volume`` the compute driver decides on, then lets it run."""

    def __init__(self, vol_driver: Any) -> None:
        self.calls: list[str] = []
        self._real = vol_driver.disconnect_volume
        vol_driver.disconnect_volume = self

    def __call__(self, connection_info: Any, instance: Any, force: bool = False) -> Any:
        self.calls.append(instance.uuid)
        return self._real(connection_info, instance, force=force)


def test_multiattach_two_guests_through_nova_attach_and_detach(compute: Any) -> None:
    from nova import context as nova_context

    from virtdriver.nova.compute import local_users

    ctx = nova_context.get_admin_context()
    conn = compute._host.get_connection()
    plain = libvirt.open("qemu:///system")  # for QMP queries of our own
    vid = str(uuid.uuid4())
    with Guests(conn) as guests, LoopDevice(64 << 20) as loop:
        dom_a, dom_b = guests.start("nova-a"), guests.start("nova-b")
        inst_a, inst_b = _instance(ctx, dom_a), _instance(ctx, dom_b)
        info_a = {"driver_volume_type": "local", "serial": vid, "multiattach": True,
                  "data": {"volume_id": vid, "device_path": loop.device, "access_mode": "rw"}}
        info_b = {**info_a, "data": {**info_a["data"], "access_mode": "ro"}}

        compute.attach_volume(ctx, info_a, inst_a, "/dev/sdb", disk_bus="scsi",
                              device_type="disk")
        compute.attach_volume(ctx, info_b, inst_b, "/dev/sdb", disk_bus="scsi",
                              device_type="disk")

        users = {u.domain_uuid: u.disk for u in local_users(conn, vid) if u.live}
        assert set(users) == {inst_a.uuid, inst_b.uuid}
        assert all(d.shareable and d.driver.cache == "none" for d in users.values())
        assert not users[inst_a.uuid].readonly and users[inst_b.uuid].readonly
        alias = f"ua-{vid}"
        seen_a = block_info(plain.lookupByUUIDString(inst_a.uuid), alias)
        seen_b = block_info(plain.lookupByUUIDString(inst_b.uuid), alias)
        assert (seen_a.ro, seen_b.ro) == (False, True)
        assert seen_a.file == seen_b.file == loop.device and seen_a.direct and seen_b.direct

        recorder = DisconnectRecorder(compute._get_volume_driver(info_a))

        compute.detach_volume(ctx, info_a, inst_a, "/dev/sdb")
        # Guest B still uses the volume on this host: the connection stays.
        assert recorder.calls == []
        assert {u.domain_uuid for u in local_users(conn, vid)} == {inst_b.uuid}
        assert block_info(plain.lookupByUUIDString(inst_b.uuid), alias).file == loop.device

        compute.detach_volume(ctx, info_b, inst_b, "/dev/sdb")
        # The last local guest let go: now nova's volume driver disconnects the host side.
        assert recorder.calls == [inst_b.uuid]
        assert local_users(conn, vid) == []
    plain.close()


def test_volume_extended_event_reaches_the_read_only_guest(compute: Any) -> None:
    """nova's extend_volume (what its volume-extended event runs) for each guest of a shared
    volume: A (rw) is block-resized, B (ro), which libvirt refuses to resize, is reopened;
    QEMU's query-block shows the new size for both."""
    from nova import context as nova_context

    from testhosts.guests import query_block

    ctx = nova_context.get_admin_context()
    conn = compute._host.get_connection()
    plain = libvirt.open("qemu:///system")
    vid = str(uuid.uuid4())
    with Guests(conn) as guests, LoopDevice(32 << 20) as loop:
        dom_a, dom_b = guests.start("nova-xa"), guests.start("nova-xb")
        inst_a, inst_b = _instance(ctx, dom_a), _instance(ctx, dom_b)
        info_a = {"driver_volume_type": "local", "serial": vid, "multiattach": True,
                  "data": {"volume_id": vid, "device_path": loop.device, "access_mode": "rw"}}
        info_b = {**info_a, "data": {**info_a["data"], "access_mode": "ro"}}
        for info, inst in ((info_a, inst_a), (info_b, inst_b)):
            compute.attach_volume(ctx, info, inst, "/dev/sdb", disk_bus="scsi",
                                  device_type="disk")
        loop.extend(64 << 20)
        # nova's local driver has no host-side extend (NotImplementedError); like nova's NFS
        # driver, the storage already grew: it returns the requested size.
        vol_driver = compute._get_volume_driver(info_a)
        vol_driver.extend_volume = lambda connection_info, instance, size: size
        for info, inst in ((info_a, inst_a), (info_b, inst_b)):
            compute.extend_volume(ctx, info, inst, 64 << 20)
        for inst in (inst_a, inst_b):
            dom = plain.lookupByUUIDString(inst.uuid)
            assert [e["inserted"]["image"]["virtual-size"] for e in query_block(dom)
                    if e.get("qdev") == f"ua-{vid}"] == [64 << 20]
        for info, inst in ((info_a, inst_a), (info_b, inst_b)):
            compute.detach_volume(ctx, info, inst, "/dev/sdb")
    plain.close()


def _defined_guest(conn: Any, name: str, alias: str, device: str) -> Any:
    """A defined, shut-off guest whose definition has one shared disk ``device`` with ``alias``."""
    return conn.defineXML(
        f"<domain type='qemu'><name>{name}</name><memory unit='MiB'>32</memory>"
        "<os><type>hvm</type></os><devices>"
        "<disk type='block' device='disk'><driver name='qemu' type='raw' cache='none'/>"
        f"<source dev='{device}'/><target dev='vdb' bus='virtio'/><shareable/>"
        f"<alias name='{alias}'/></disk></devices></domain>")


def test_two_deletes_release_a_shared_volume_once(compute: Any) -> None:
    """nova's delete decides on a server's volumes after shutting it off and before undefining
    it; when two servers sharing a volume are deleted together, both are shut off but defined
    when each decides. The first must keep the host connection (the other still has the disk),
    the second must release it (the first let go already): once, not never (bug 2048837)."""
    from nova import context as nova_context

    from virtdriver.policy.identity import alias_for

    conn = compute._host.get_connection()
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "local", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "device_path": "/dev/loop0"}}
    vol_driver = compute._get_volume_driver(info)
    ctx = nova_context.get_admin_context()
    tag = uuid.uuid4().hex[:8]
    with LoopDevice(16 << 20) as loop:
        doms = [_defined_guest(conn, f"vdtest-del-{tag}-{n}", alias_for(vid), loop.device)
                for n in "ab"]
        _decide_and_clean(compute, ctx, vol_driver, vid, doms)


def _decide_and_clean(compute: Any, ctx: Any, vol_driver: Any, vid: str, doms: list[Any]) -> None:
    from types import SimpleNamespace

    try:
        a, b = (SimpleNamespace(uuid=dom.UUIDString()) for dom in doms)
        first = compute._should_disconnect_target(ctx, a, True, vol_driver, vid)
        second = compute._should_disconnect_target(ctx, b, True, vol_driver, vid)
        assert (first, second) == (False, True)
        # A guest that let go but runs again with the disk counts again.
        doms[0].create()
        assert compute._should_disconnect_target(ctx, b, True, vol_driver, vid) is False
    finally:
        for dom in doms:
            if dom.isActive():
                dom.destroy()
            dom.undefine()


@pytest.mark.parametrize(("cachemodes", "expected"), [
    (["block=directsync"], "directsync"),  # a direct mode nova.conf names: honoured, shared too
    (["block=writeback"], "none"),  # not a direct mode: the shared disk keeps none
])
def test_disk_cachemodes_direct_mode_reaches_the_shared_disk(nova_env: Any, cachemodes: list,
                                                             expected: str) -> None:
    """``[libvirt] disk_cachemodes`` for a volume's type, through nova's attach_volume (#45)."""
    from nova import context as nova_context
    from nova.virt import fake

    from virtdriver.nova import LibvirtDriver
    from virtdriver.nova.compute import local_users

    nova_env.set_override("disk_cachemodes", cachemodes, group="libvirt")
    compute = LibvirtDriver(fake.FakeVirtAPI(), False)  # reads disk_cachemodes when made
    compute._host.initialize()
    ctx = nova_context.get_admin_context()
    conn = compute._host.get_connection()
    plain = libvirt.open("qemu:///system")
    vid = str(uuid.uuid4())
    try:
        with Guests(conn) as guests, LoopDevice(16 << 20) as loop:
            inst = _instance(ctx, guests.start("nova-cache"))
            info = {"driver_volume_type": "local", "serial": vid, "multiattach": True,
                    "data": {"volume_id": vid, "device_path": loop.device, "access_mode": "rw"}}
            compute.attach_volume(ctx, info, inst, "/dev/sdb", disk_bus="scsi",
                                  device_type="disk")
            disk = next(u.disk for u in local_users(conn, vid) if u.live)
            assert disk.shareable and disk.driver.cache == expected
            seen = block_info(plain.lookupByUUIDString(inst.uuid), f"ua-{vid}")
            assert seen.direct  # QEMU opened it O_DIRECT either way
            compute.detach_volume(ctx, info, inst, "/dev/sdb")
            assert local_users(conn, vid) == []
    finally:
        nova_env.clear_override("disk_cachemodes", group="libvirt")
        compute._host.cleanup()
        plain.close()
