"""LightOS NVMe/TCP volumes: a host block device at ``data.device_path``."""

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.block import HostBlockDeviceDriver


class LightOSVolumeDriver(HostBlockDeviceDriver):
    volume_type = "lightos"
    nova = NovaBinding("nova.virt.libvirt.volume.lightos.LibvirtLightOSVolumeDriver")
    brick_protocol = "LIGHTOS"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.nvme_fabrics()
