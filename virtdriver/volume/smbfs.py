"""SMB/CIFS shares: a file on the mounted share (write-back cache unless shared)."""

from virtdriver.volume.remotefs import RemoteFsVolumeDriver


class SMBFSVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "smbfs"
    brick_protocol = None  # mounted by the compute service's own SMB client, not os-brick
    cache = "writeback"
    io = None
