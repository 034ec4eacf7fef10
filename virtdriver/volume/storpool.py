"""StorPool volumes attached by the StorPool client: a host block device at ``data.device_path``."""

from pathlib import Path

from virtdriver.volume.base import NovaBinding
from virtdriver.volume.block import HostBlockDeviceDriver


class StorPoolVolumeDriver(HostBlockDeviceDriver):
    volume_type = "storpool"
    nova = NovaBinding("nova.virt.libvirt.volume.storpool.LibvirtStorPoolVolumeDriver")
    brick_protocol = "STORPOOL"
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        client = Path("/dev/storpool")
        return (True, f"{client}") if client.is_dir() else (False, "no StorPool client "
                                                                   "(/dev/storpool)")
