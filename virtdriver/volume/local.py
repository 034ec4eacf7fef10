"""A block device already on the host (os-brick's LOCAL connector): a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver


class LocalVolumeDriver(HostBlockDeviceDriver):
    volume_type = "local"
    brick_protocol = "LOCAL"
