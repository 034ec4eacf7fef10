"""A block device already on the host (os-brick's LOCAL connector): a host block device at
``data.device_path``."""

from virtdriver.volume.base import NovaBinding
from virtdriver.volume.block import HostBlockDeviceDriver


class LocalVolumeDriver(HostBlockDeviceDriver):
    volume_type = "local"
    nova = NovaBinding("nova.virt.libvirt.volume.volume.LibvirtVolumeDriver")
    brick_protocol = "LOCAL"

    def host_probe(self) -> tuple[bool, str] | None:
        return True, "any host block device: loop, LVM, ..."
