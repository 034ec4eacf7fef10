"""StorPool volumes attached by the StorPool client: a host block device at
``data.device_path``."""

from pathlib import Path

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.block import HostBlockDeviceDriver


class StorPoolVolumeDriver(HostBlockDeviceDriver):
    volume_type = "storpool"
    nova = NovaBinding("nova.virt.libvirt.volume.storpool.LibvirtStorPoolVolumeDriver")
    brick_protocol = "STORPOOL"
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.path(Path("/dev/storpool"), "StorPool client (/dev/storpool)",
                           directory=True)
