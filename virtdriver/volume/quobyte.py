"""Quobyte: a file on the mounted volume; the ``quobyte://`` scheme is not part of the mount."""

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.remotefs import RemoteFsVolumeDriver


class QuobyteVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "quobyte"
    nova = NovaBinding("nova.virt.libvirt.volume.quobyte.LibvirtQuobyteVolumeDriver")
    brick_protocol = "QUOBYTE"
    export_prefix = "quobyte://"
    export_style = "list"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.fuse_mount("mount.quobyte")
