"""StorPool volumes attached by the StorPool client: a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver


class StorPoolVolumeDriver(HostBlockDeviceDriver):
    volume_type = "storpool"
    brick_protocol = "STORPOOL"
    io = "native"
