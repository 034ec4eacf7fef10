"""LightOS NVMe/TCP volumes: a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver
from virtdriver.volume import probes


class LightOSVolumeDriver(HostBlockDeviceDriver):
    volume_type = "lightos"
    brick_protocol = "LIGHTOS"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.nvme_fabrics()
