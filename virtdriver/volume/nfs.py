"""NFS: a file on the mounted export."""

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.remotefs import RemoteFsVolumeDriver


class NFSVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "nfs"
    nova = NovaBinding(
        "nova.virt.libvirt.volume.nfs.LibvirtNFSVolumeDriver", default_aio_drops_native=True)
    brick_protocol = "NFS"
    # Files on an NFS mount are nfs_t (no labels over NFS unless the export has security_label):
    # libvirt's relabel is not supported there and it goes on; svirt_t may then open them only
    # with this boolean (seen on Debian 12, tests/nested/test_nfs_share.py).
    selinux_booleans = ("virt_use_nfs",)

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.kernel_mount(("nfs", "nfs4"), "mount.nfs")
