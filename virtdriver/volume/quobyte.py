"""Quobyte: a file on the mounted volume; the ``quobyte://`` scheme is not part of the mount."""

from virtdriver.volume.remotefs import RemoteFsVolumeDriver
from virtdriver.volume import probes


class QuobyteVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "quobyte"
    brick_protocol = "QUOBYTE"
    export_prefix = "quobyte://"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.fuse_mount("mount.quobyte")
