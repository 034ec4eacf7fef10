"""NFS: a file on the mounted export."""

from virtdriver.volume.remotefs import RemoteFsVolumeDriver
from virtdriver.volume import probes


class NFSVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "nfs"
    brick_protocol = "NFS"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.kernel_mount(("nfs", "nfs4"), "mount.nfs")
