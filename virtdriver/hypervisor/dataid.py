"""The canonical identity of the data behind a disk, whatever its spelling.

Two disks are the same data when they name the same block device (its device number, through any
path, symlink or second device node), the same file (its filesystem and inode, through any path),
or the same network volume (protocol, name and the set of hosts, host names compared without case
and with the protocol's default port filled in). A path that does not exist (yet) is compared by
its normalized, symlink-resolved spelling. A running guest's disk names the device it was
opened on, not a link to it (:func:`opened_disk`): a link that moves later (an iSCSI re-login
repoints os-brick's by-path links) cannot hide what the guest holds. The sharing rules
(:mod:`virtdriver.policy.sharing`) and the per-data lock compare these identities, never raw
paths.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from typing import Final

from virtdriver.config import Disk, Source

DataIdentity = tuple[str, ...]

DEFAULT_PORTS: Final = {"iscsi": "3260", "nbd": "10809", "rbd": "6789", "gluster": "24007"}


def path_identity(path: str) -> DataIdentity:
    """A host path's identity: ``("dev", major:minor)``, ``("inode", dev:ino)`` or its resolved
    spelling when it cannot be read."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return ("path", os.path.realpath(os.path.normpath(path)))
    if stat.S_ISBLK(info.st_mode):
        return ("dev", f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}")
    return ("inode", f"{info.st_dev}:{info.st_ino}")


def network_identity(source: Source) -> DataIdentity:
    """A network volume's identity: protocol, volume name and the sorted hosts."""
    protocol = source.protocol or ""
    hosts = sorted(f"{(h.name or '').lower()}:{h.port or DEFAULT_PORTS.get(protocol, '')}"
                   if h.socket is None else f"unix:{os.path.normpath(h.socket)}"
                   for h in source.hosts)
    return ("net", protocol, (source.name or "").strip("/"), *hosts)


def data_identity(disk: Disk) -> DataIdentity | None:
    """The identity of a disk's data; ``None`` for a disk without a source (an empty CD-ROM)."""
    src = disk.source
    if src is None:
        return None
    if src.dev or src.file:
        return path_identity(src.dev or src.file)  # type: ignore[arg-type]
    if src.protocol:
        return network_identity(src)
    return None


def opened_disk(disk: Disk) -> Disk:
    """``disk`` naming the block device its source's symlink leads to now (what QEMU opens);
    ``disk`` itself when its source is no link to a block device."""
    source = disk.source
    if disk.type != "block" or source is None or not source.dev:
        return disk
    real = os.path.realpath(source.dev)
    if real == os.path.normpath(source.dev) or path_identity(real)[0] != "dev":
        return disk
    return replace(disk, source=replace(source, dev=real))


def identity_token(identity: DataIdentity) -> str:
    """A short, file-name-safe token for an identity (the name of its lock)."""
    import hashlib  # here: what only reads the host (``virtdriver list``) never needs it

    return hashlib.sha256("\0".join(identity).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def host_size(disk: Disk) -> int | None:
    """The size of the host file or block device behind ``disk``; ``None`` where not readable."""
    source = disk.source
    path = (source.dev or source.file) if source is not None else None
    if disk.type not in ("block", "file") or not path:
        return None  # a network disk: QEMU opens it, the host cannot tell its size here
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)
