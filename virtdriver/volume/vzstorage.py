"""Virtuozzo Storage: a file on the mounted cluster (write-back cache unless shared)."""

from virtdriver.volume.remotefs import RemoteFsVolumeDriver
from virtdriver.volume import probes


class VZStorageVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "vzstorage"
    brick_protocol = "VZSTORAGE"
    cache = "writeback"
    io = None

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.fuse_mount("pstorage-mount")
