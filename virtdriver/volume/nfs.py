"""NFS: a file on the mounted export."""

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.remotefs import RemoteFsVolumeDriver


class NFSVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "nfs"
    nova = NovaBinding(
        "nova.virt.libvirt.volume.nfs.LibvirtNFSVolumeDriver", default_aio_drops_native=True)
    brick_protocol = "NFS"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.kernel_mount(("nfs", "nfs4"), "mount.nfs")
