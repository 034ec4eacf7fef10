"""Virtuozzo Storage: a file on the mounted cluster (write-back cache unless shared)."""

from virtdriver.volume.remotefs import RemoteFsVolumeDriver


class VZStorageVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "vzstorage"
    brick_protocol = "VZSTORAGE"
    cache = "writeback"
    io = None
