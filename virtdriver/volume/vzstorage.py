"""Virtuozzo Storage: a file on the mounted cluster (write-back cache unless shared)."""

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.remotefs import RemoteFsVolumeDriver


class VZStorageVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "vzstorage"
    nova = NovaBinding("nova.virt.libvirt.volume.vzstorage.LibvirtVZStorageVolumeDriver")
    brick_protocol = "VZSTORAGE"
    cache = "writeback"
    io = None
    export_style = None  # a cluster name ("cluster1:/"), not a host

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.fuse_mount("pstorage-mount")
