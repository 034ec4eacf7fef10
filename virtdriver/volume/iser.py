"""iSCSI over RDMA (iSER): a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver


class ISERVolumeDriver(HostBlockDeviceDriver):
    volume_type = "iser"
    brick_protocol = "ISER"
    io = "native"
