"""An NFS server inside the nested test host, and a driver that mounts its export through os-brick
(not a test module).

The kernel's NFS server (``nfs-kernel-server``, started here: the image does not start it at
boot) exports one directory to 127.0.0.1 with the default ``root_squash``; os-brick's
RemoteFsConnector mounts it below the driver's mount base (``<mount base>/<md5 of the export>``,
as nova's ``nfs_mount_point_base``). The volume is one raw file in the export, made on the server
side and owned by QEMU's user (``libvirt-qemu``, mode 0660), as an NFS storage backend makes it
usable by the compute host's QEMU: root on the client is squashed to ``nobody``, so libvirt's own
``chown`` of the file cannot do it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testhosts.guests import sparse_file
from tests.nested.conftest import run

VOLUME_SIZE = 16 * 1024 * 1024


@dataclass(frozen=True)
class NfsVolume:
    export: str  # 127.0.0.1:/srv/...
    server_file: Path  # the volume's file as the server has it (its local file system)
    info: dict  # connection_info of driver_volume_type nfs

    @property
    def vid(self) -> str:
        return self.info["data"]["volume_id"]

    @property
    def alias(self) -> str:
        return f"ua-{self.vid}"

    def bytes_at(self, offset: int, length: int = 4096) -> bytes:
        """The data on the server's disk (not through any client cache)."""
        with open(self.server_file, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)


def _nfs_server_up() -> None:
    run("modprobe", "nfsd")
    run("systemctl", "start", "nfs-server.service")


@contextmanager
def nfs_volume() -> Iterator[NfsVolume]:
    """One exported directory with one volume file; the export is removed afterwards."""
    _nfs_server_up()
    folder = Path(tempfile.mkdtemp(prefix="vd-nfs-", dir="/srv"))
    folder.chmod(0o755)
    qemu = pwd.getpwnam("libvirt-qemu")
    name = "volume-" + uuid.uuid4().hex[:12]
    data = sparse_file(folder / name, VOLUME_SIZE)
    os.chown(data, qemu.pw_uid, qemu.pw_gid)
    data.chmod(0o660)
    export = f"127.0.0.1:{folder}"
    run("exportfs", "-o", "rw,sync,no_subtree_check", export)
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "nfs", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "export": export, "name": name, "format": "raw",
                     "access_mode": "rw"}}
    try:
        yield NfsVolume(export, data, info)
    finally:
        subprocess.run(["exportfs", "-u", export], capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def nfs_driver() -> Iterator[object]:
    """A LibvirtVolumeDriver whose mount base is a fresh directory under /var/lib (where a
    compute host keeps it: nova's is /var/lib/nova/mnt), made a shared mount point before any
    guest starts (``prepare_host``, as a compute service does when it starts)."""
    from virtdriver import LibvirtVolumeDriver

    state = Path(tempfile.mkdtemp(prefix="vd-nfs-state-", dir="/var/lib"))
    state.chmod(0o755)  # mkdtemp's 0700 would keep QEMU's user out of the mount base below it
    driver = LibvirtVolumeDriver(state_dir=state, mount_base=state / "mnt", detach_timeout=30)
    (state / "mnt").mkdir()
    driver.prepare_host()
    try:
        yield driver
    finally:
        driver.close()
        base = str(state / "mnt")
        for line in reversed(Path("/proc/self/mounts").read_text().splitlines()):
            point = line.split()[1]
            if point == base or point.startswith(base + "/"):
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        shutil.rmtree(state, ignore_errors=True)


def mount_of(path: str) -> dict[str, str]:
    """The mount that holds ``path`` (/proc/self/mounts): its source, type and options."""
    best: dict[str, str] = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        source, point, fstype, options = line.split()[:4]
        if (path == point or path.startswith(point.rstrip("/") + "/")) and \
                len(point) >= len(best.get("point", "")):
            best = {"source": source, "point": point, "type": fstype, "options": options}
    return best
