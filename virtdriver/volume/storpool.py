"""StorPool volumes attached by the StorPool client: a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver
from virtdriver.volume import probes


class StorPoolVolumeDriver(HostBlockDeviceDriver):
    volume_type = "storpool"
    brick_protocol = "STORPOOL"
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        client = probes.Path("/dev/storpool")
        return (True, f"{client}") if client.is_dir() else (False, "no StorPool client "
                                                                   "(/dev/storpool)")
