"""NFS: a file on the mounted export."""

from virtdriver.volume.remotefs import RemoteFsVolumeDriver


class NFSVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "nfs"
    brick_protocol = "NFS"
