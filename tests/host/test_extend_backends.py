"""Online extend of a real volume of every protocol the test backends provide, on real guests.

Each test grows the storage on the backend side first (the tgt LUN's file, ``rbd resize``, the
file on the Gluster volume), then asks the driver to extend, and checks what QEMU reports. The
Gluster FUSE test uses a fresh mount base on this host's *private* ``/``: the driver itself makes
it a shared mount, with nothing set up beforehand.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.backends import gluster_file, need
from virtdriver import LibvirtVolumeDriver
from virtdriver.errors import AttachFailed, ExtendRefused
from virtdriver.hypervisor import mounts
from virtdriver.volume.remotefs import mount_point

pytestmark = pytest.mark.hypervisor
MIB = 1 << 20


def grow_story(guests, driver: LibvirtVolumeDriver, info: dict, before: int, after: int,
               grow_storage, *, file_checks_size: bool = True) -> None:
    """Attach, refuse to outgrow the storage, grow it, extend: QEMU sees the new size."""
    dom = guests.start("grow")
    att = driver.attach_volume(info, dom.name())
    try:
        assert dom.blockInfo(att.target_dev)[0] == before
        if file_checks_size:
            with pytest.raises(ExtendRefused, match="extend it on the storage side first"):
                driver.extend_volume(dom.name(), info, after)
        grow_storage(after)
        assert driver.extend_volume(dom.name(), info, after) == after
        assert dom.blockInfo(att.target_dev)[0] == after
    finally:
        driver.detach_volume(dom.name(), att.volumeId)


# ---- QEMU-native iSCSI: a LUN of our own on the shared tgt --------------------------------------


@pytest.fixture
def tgt_lun(backends, tmp_path) -> Iterator[tuple[str, Path, Callable[[int], None]]]:
    need(backends, "iscsi")
    tid = 500 + int.from_bytes(os.urandom(2), "big") % 400
    iqn = f"iqn.2026-01.io.virtdriver:extend-{uuid.uuid4().hex[:12]}"
    image = tmp_path / "lun.img"
    image.write_bytes(b"")
    os.truncate(image, 16 * MIB)

    def tgtadm(*args: str) -> None:
        subprocess.run(["tgtadm", "-C", backends["VD_ISCSI_PORT"], "--lld", "iscsi", *args],
                       check=True, capture_output=True, text=True)

    def lun(op: str) -> None:
        extra = ["-b", str(image)] if op == "new" else []
        tgtadm("--mode", "logicalunit", "--op", op, "--tid", str(tid), "--lun", "1", *extra)

    def grow(size: int) -> None:
        # tgt reads a LUN's size when it opens the file: grow it, then open it again.
        os.truncate(image, size)
        lun("delete")
        lun("new")

    tgtadm("--mode", "target", "--op", "new", "--tid", str(tid), "-T", iqn)
    try:
        lun("new")
        tgtadm("--mode", "target", "--op", "bind", "--tid", str(tid), "-I", "ALL")
        yield iqn, image, grow
    finally:
        tgtadm("--mode", "target", "--op", "delete", "--force", "--tid", str(tid))


def test_extend_native_iscsi(guests, backends, tmp_path, tgt_lun) -> None:
    iqn, _, grow = tgt_lun
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 native_iscsi=True)
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "iscsi", "serial": vid,
            "data": {"volume_id": vid, "target_iqn": iqn,
                     "target_portal": backends["VD_ISCSI_PORTAL"], "target_lun": 1}}
    grow_story(guests, driver, info, 16 * MIB, 32 * MIB, grow, file_checks_size=False)


# ---- Ceph RBD: an image of our own; QEMU's rbd driver opens it ---------------------------------


def test_extend_rbd(guests, backends, tmp_path, ceph_secret) -> None:  # noqa: F811
    image = f"{backends['VD_CEPH_POOL']}/extend-{uuid.uuid4().hex[:12]}"

    def rbd(*args: str) -> None:
        subprocess.run(["rbd", "-c", backends["VD_CEPH_CONF"], "--keyring",
                        backends["VD_CEPH_ADMIN_KEYRING"], *args], check=True,
                       capture_output=True, text=True)

    rbd("create", "--size", "16M", image)
    try:
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
        vid = str(uuid.uuid4())
        info = {"driver_volume_type": "rbd", "serial": vid,
                "data": {"volume_id": vid, "name": image, "hosts": [backends["VD_CEPH_MON_HOST"]],
                         "ports": [backends["VD_CEPH_MON_PORT"]], "auth_enabled": True,
                         "auth_username": backends["VD_CEPH_USER"], "secret_type": "ceph",
                         "secret_uuid": ceph_secret}}
        grow_story(guests, driver, info, 16 * MIB, 32 * MIB,
                   lambda size: rbd("resize", "--size", f"{size // MIB}M", image),
                   file_checks_size=False)
    finally:
        rbd("rm", "--no-progress", image)


# ---- NBD: QEMU cannot grow an open export: a typed refusal, the disk untouched -----------------


def test_extend_nbd_is_refused_with_the_reason(guests, backends, tmp_path) -> None:
    need(backends, "nbd")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "nbd", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "host": backends["VD_NBD_HOST"],
                     "port": int(backends["VD_NBD_PORT"]), "name": backends["VD_NBD_EXPORT"]}}
    dom = guests.start("nbd")
    att = driver.attach_volume(info, dom.name())
    size = dom.blockInfo(att.target_dev)[0]
    with pytest.raises(ExtendRefused, match="NBD client cannot grow"):
        driver.extend_volume(dom.name(), info, size + 16 * MIB)
    assert dom.blockInfo(att.target_dev)[0] == size
    driver.detach_volume(dom.name(), vid)


# ---- GlusterFS: a file of our own on the volume, through FUSE (os-brick) and libgfapi -----------


def test_extend_glusterfs_fuse_on_a_private_root(guests, backends, tmp_path,
                                                 private_mount_base) -> None:
    need(backends, "gluster")
    if backends.get("VD_GLUSTER_FUSE") != "1":
        pytest.skip("FUSE mounts do not work here (scripts/test-backends.sh reports why)")
    if mounts.propagates(private_mount_base):
        pytest.skip("/ is a shared mount here: mounts propagate without the driver's help")
    early = guests.start("early")  # started before the mount base was ever shared
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 mount_base=private_mount_base)
    with gluster_file(backends, tmp_path) as name:
        vid = str(uuid.uuid4())
        info = {"driver_volume_type": "glusterfs", "serial": vid,
                "data": {"volume_id": vid, "export": backends["VD_GLUSTER_SHARE"],
                         "name": name, "format": "raw"}}
        with pytest.raises(AttachFailed, match="Shut the guest down and start it again"):
            driver.attach_volume(info, early.name())
        assert mounts.propagates(private_mount_base)  # the driver made the base shared
        assert driver.records.connected() == []
        share = mount_point(private_mount_base, backends["VD_GLUSTER_SHARE"])
        assert not os.path.ismount(share)  # the refused attach released the mount

        def grow(size: int) -> None:
            os.truncate(os.path.join(share, name), size)  # the file grows on the share

        grow_story(guests, driver, info, 16 * MIB, 32 * MIB, grow)
        assert not os.path.ismount(share)


def test_extend_glusterfs_native(guests, backends, tmp_path) -> None:
    need(backends, "gluster")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 native_glusterfs=True)
    with gluster_file(backends, tmp_path) as name:
        vid = str(uuid.uuid4())
        info = {"driver_volume_type": "glusterfs", "serial": vid,
                "data": {"volume_id": vid, "export": backends["VD_GLUSTER_SHARE"],
                         "name": name, "format": "raw"}}
        url = f"gluster://{backends['VD_GLUSTER_HOST']}/{backends['VD_GLUSTER_VOLUME']}/{name}"
        grow_story(guests, driver, info, 16 * MIB, 32 * MIB,
                   lambda size: subprocess.run(["qemu-img", "resize", "-q", "-f", "raw",
                                                url, str(size)], check=True, capture_output=True),
                   file_checks_size=False)


@pytest.mark.parametrize("shape", ["legacy", "record"])
def test_cli_extend_names_a_read_only_network_disk_left_behind(guests, backends, tmp_path,
                                                               tgt_lun, shape) -> None:
    """QEMU-native iSCSI: the rw guest grows; the ro one's QEMU iscsi node cannot be reopened
    read-only by virtdriver, so `virtdriver extend` names it, its size and the fix (exit 1); the
    fix, run as printed, brings it up to date read-only, from Cinder's attachment record too."""
    import json
    import sys

    iqn, _, grow = tgt_lun
    state = tmp_path / "state"
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "iscsi", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "target_iqn": iqn,
                     "target_portal": backends["VD_ISCSI_PORTAL"], "target_lun": 1}}
    path = tmp_path / "vol.json"
    record = {"attachment": {"attach_mode": "rw", "multiattach": True, "connection_info": {
        "driver_volume_type": "iscsi", **info["data"]}}}
    path.write_text(json.dumps(info if shape == "legacy" else record))
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=state, native_iscsi=True)
    a, b = guests.start("na"), guests.start("nb")
    driver.attach_volume(info, a.name())
    driver.attach_volume(info, b.name(), attach_mode="ro")
    try:
        grow(32 * MIB)
        done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir", str(state),
                               "extend", str(path), "--size", "32M", "--native-iscsi"],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 1, done.stderr
        assert "NOT UP TO DATE" in done.stdout and "resized" in done.stdout
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"virtdriver: error: volume {vid} was grown to {32 * MIB} bytes, "
                               f"but {b.name()} shows {16 * MIB} bytes")
        assert (f"virtdriver --state-dir {state} detach {b.name()} {vid} && virtdriver "
                f"--state-dir {state} attach {b.name()} {path} --native-iscsi") in line
        assert a.blockInfo("sda")[0] == 32 * MIB and b.blockInfo("sda")[0] == 16 * MIB
        fix = line.split("detach and attach it again: ", 1)[1]
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        fixed = subprocess.run(fix, shell=True, capture_output=True, text=True, check=False,
                               env=env)
        assert fixed.returncode == 0, fixed.stderr
        (att,) = driver.list_attachments(b.name())
        assert att.attach_mode == "ro" and att.shareable
        assert b.blockInfo(att.device.removeprefix("/dev/"))[0] == 32 * MIB
    finally:
        driver.detach_volume(a.name(), vid)
        driver.detach_volume(b.name(), vid)
