"""Real storage servers on 127.0.0.1 (scripts/test-backends.sh): multiattach end to end.

For QEMU-native iSCSI (with CHAP), Ceph RBD, NBD and GlusterFS through os-brick's
RemoteFsConnector: read-write to guest A and read-only to guest B, A's bytes read through B, B's
write refused, detaching A keeps B working, and detaching B releases the host side — the target's
sessions, the RBD watchers, the NBD connections, the libvirt secret, the Gluster mount.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from testhosts.guests import block_info, read_pattern
from tests.support.backends import need
from tests.support.sharedio import writer_shares_with_reader
from virtdriver import LibvirtVolumeDriver
from virtdriver.errors import HostConnectFailed

pytestmark = pytest.mark.hypervisor


@dataclass
class Released:
    """How to see that the host side of a volume is gone."""

    check: Callable[[], bool]
    what: str


def wait_until(check: Callable[[], bool], seconds: float = 20.0) -> bool:
    """Poll an external server's view (it has no event to wait on) until ``check`` holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def multiattach_story(guests, driver: LibvirtVolumeDriver, info: dict, released: Released,
                      still_connected: Callable[[], bool] | None = None) -> None:
    a, b = guests.start("a"), guests.start("b")
    vid = info["data"]["volume_id"]
    alias = f"ua-{vid}"
    driver.attach_volume(info, a.name(), attach_mode="rw")
    driver.attach_volume(info, b.name(), attach_mode="ro")
    assert block_info(b, alias).ro and not block_info(a, alias).ro
    assert block_info(a, alias).direct and block_info(b, alias).direct
    pattern, offset = writer_shares_with_reader(a, b, alias)

    driver.detach_volume(a.name(), vid)
    assert read_pattern(b, alias, pattern, offset=offset)
    assert driver.records.connected() == [vid] or not driver.records.connected()
    if still_connected is not None:
        assert still_connected()
    driver.detach_volume(b.name(), vid)
    assert driver.records.connected() == []
    assert wait_until(released.check), f"{released.what} still there after the last detach"


def test_native_iscsi_with_chap(guests, backends, tmp_path, system_conn) -> None:
    need(backends, "iscsi")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 native_iscsi=True)
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "iscsi", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "target_iqn": backends["VD_ISCSI_CHAP_IQN"],
                     "target_portal": backends["VD_ISCSI_PORTAL"],
                     "target_lun": int(backends["VD_ISCSI_CHAP_LUN"]), "auth_method": "CHAP",
                     "auth_username": backends["VD_ISCSI_CHAP_USER"],
                     "auth_password": backends["VD_ISCSI_CHAP_PASSWORD"]}}

    def sessions() -> str:
        return subprocess.run(["tgtadm", "-C", backends["VD_ISCSI_PORT"], "--lld", "iscsi",
                               "--mode", "conn", "--op", "show", "--tid", "2"],
                              capture_output=True, text=True, check=False).stdout

    def secret_defined() -> bool:
        return any("virtdriver-iscsi-" in (s.usageID() or "")
                   for s in system_conn.listAllSecrets(0))

    multiattach_story(guests, driver, info, Released(
        lambda: "Session" not in sessions() and not secret_defined(),
        "iSCSI sessions or the CHAP secret"),
        still_connected=lambda: secret_defined() and "Session" in sessions())
    assert backends["VD_ISCSI_CHAP_PASSWORD"] not in "".join(
        d.XMLDesc(0) for d in system_conn.listAllDomains(0))


def test_native_iscsi_wrong_password_is_refused_and_cleaned(guests, backends, tmp_path,
                                                            system_conn) -> None:
    need(backends, "iscsi")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 native_iscsi=True)
    dom = guests.start("a")
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "iscsi", "serial": vid,
            "data": {"volume_id": vid, "target_iqn": backends["VD_ISCSI_CHAP_IQN"],
                     "target_portal": backends["VD_ISCSI_PORTAL"],
                     "target_lun": int(backends["VD_ISCSI_CHAP_LUN"]), "auth_method": "CHAP",
                     "auth_username": backends["VD_ISCSI_CHAP_USER"],
                     "auth_password": "not-the-password-42"}}
    with pytest.raises(Exception) as caught:
        driver.attach_volume(info, dom.name())
    assert "not-the-password-42" not in str(caught.value)
    assert driver.list_attachments(dom.name()) == []
    assert driver.records.connected() == []
    assert not any("virtdriver-iscsi-" in (s.usageID() or "")
                   for s in system_conn.listAllSecrets(0))


def test_rbd(guests, backends, tmp_path, ceph_secret) -> None:
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    vid = str(uuid.uuid4())
    image = f"{backends['VD_CEPH_POOL']}/{backends['VD_CEPH_IMAGE']}"
    info = {"driver_volume_type": "rbd", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "name": image, "hosts": [backends["VD_CEPH_MON_HOST"]],
                     "ports": [backends["VD_CEPH_MON_PORT"]], "auth_enabled": True,
                     "auth_username": backends["VD_CEPH_USER"], "secret_type": "ceph",
                     "secret_uuid": ceph_secret}}

    def watchers() -> str:
        return subprocess.run(["rbd", "-c", backends["VD_CEPH_CONF"], "--keyring",
                               backends["VD_CEPH_ADMIN_KEYRING"], "status", image],
                              capture_output=True, text=True, check=False).stdout

    multiattach_story(guests, driver, info,
                      Released(lambda: "watcher=" not in watchers(), "RBD watchers"),
                      still_connected=lambda: "watcher=" in watchers())


def test_nbd(guests, backends, tmp_path) -> None:
    need(backends, "nbd")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "nbd", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "host": backends["VD_NBD_HOST"],
                     "port": int(backends["VD_NBD_PORT"]), "name": backends["VD_NBD_EXPORT"]}}

    def clients() -> int:
        out = subprocess.run(["ss", "-Htn", "state", "established",
                              f"( dport = :{backends['VD_NBD_PORT']} )"],
                             capture_output=True, text=True, check=False).stdout
        return len(out.splitlines())

    base = clients()
    multiattach_story(guests, driver, info,
                      Released(lambda: clients() <= base, "NBD client connections"),
                      still_connected=lambda: clients() > base)


def test_glusterfs_through_os_brick(guests, backends, tmp_path) -> None:
    need(backends, "gluster")
    mount_base = backends["VD_GLUSTER_MOUNT_BASE"]
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 mount_base=mount_base)
    driver.prepare_host()  # as a compute service does before it starts guests
    from virtdriver.hypervisor.mounts import propagates

    assert propagates(mount_base)
    vid = str(uuid.uuid4())
    share = backends["VD_GLUSTER_SHARE"]
    info = {"driver_volume_type": "glusterfs", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "export": share, "name": backends["VD_GLUSTER_IMAGE"],
                     "format": "raw"}}
    from virtdriver.volume.remotefs import mount_point

    mount = mount_point(mount_base, share)
    multiattach_story(guests, driver, info,
                      Released(lambda: not os.path.ismount(mount), f"the mount {mount}"),
                      still_connected=lambda: os.path.ismount(mount))


# ---- kernel-bound connectors: this kernel has no iSCSI/NVMe-oF/NFS, so they fail for real -------

KERNEL_BOUND = {
    "iscsi": {"target_iqn": "iqn.2026-01.io.virtdriver:noauth", "target_portal": "127.0.0.1:3260",
              "target_lun": 1},
    "nvmeof": {"target_nqn": "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0",
               "transport_type": "tcp", "target_portal": "127.0.0.1", "target_port": 4420,
               "portals": [["127.0.0.1", 4420, "tcp"]]},
    "nfs": {"export": "127.0.0.1:/nonexistent", "name": "volume-1"},
}


@pytest.mark.parametrize("volume_type", sorted(KERNEL_BOUND))
def test_kernel_bound_connector_fails_cleanly(volume_type, guests, tmp_path,
                                              private_mount_base) -> None:
    dom = guests.start("k")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 mount_base=private_mount_base)
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": volume_type, "serial": vid,
            "data": dict(KERNEL_BOUND[volume_type], volume_id=vid)}
    nodes_before = _iscsi_node_records()
    started = time.monotonic()
    with pytest.raises(HostConnectFailed) as caught:
        driver.attach_volume(info, dom.name())
    elapsed = time.monotonic() - started
    assert elapsed < 120, f"os-brick took {elapsed:.0f} s to give up"  # bounded scan attempts
    assert "os-brick could not connect" in str(caught.value)
    assert driver.list_attachments(dom.name()) == []
    assert driver.records.connected() == []
    assert _iscsi_node_records() == nodes_before
    from virtdriver.hypervisor.locks import lock_is_free

    assert lock_is_free(driver.lock_dir, vid)
    assert not any(os.path.ismount(p) for p in Path(private_mount_base).glob("*"))


def _iscsi_node_records() -> list[str]:
    found: list[str] = []
    for base in (Path("/etc/iscsi/nodes"), Path("/var/lib/iscsi/nodes")):
        if base.is_dir():
            found += sorted(str(p) for p in base.rglob("*"))
    return found


def _kernel_iscsi_available() -> bool:
    return Path("/sys/class/iscsi_transport").exists() and any(
        Path(d, "iscsiadm").exists() for d in ("/usr/sbin", "/sbin", "/usr/bin"))


@pytest.mark.kernel_initiator
@pytest.mark.skipif(not _kernel_iscsi_available(),
                    reason="this kernel has no iSCSI initiator (no /sys/class/iscsi_transport)")
def test_kernel_iscsi_multiattach(guests, backends, tmp_path) -> None:
    need(backends, "iscsi")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "iscsi", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "target_iqn": backends["VD_ISCSI_IQN"],
                     "target_portal": backends["VD_ISCSI_PORTAL"],
                     "target_lun": int(backends["VD_ISCSI_LUN"])}}

    def session_open() -> bool:
        out = subprocess.run(["iscsiadm", "-m", "session"], capture_output=True, text=True,
                             check=False).stdout
        return backends["VD_ISCSI_IQN"] in out

    multiattach_story(guests, driver, info, Released(lambda: not session_open(),
                                                     "the kernel iSCSI session"),
                      still_connected=session_open)
