"""Dell PowerFlex (ScaleIO) volumes mapped by the SDC: a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver


class ScaleIOVolumeDriver(HostBlockDeviceDriver):
    volume_type = "scaleio"
    brick_protocol = "SCALEIO"
    io = "native"
