"""Dell PowerFlex (ScaleIO) volumes mapped by the SDC: a host block device at
``data.device_path``."""

from pathlib import Path

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.block import HostBlockDeviceDriver


class ScaleIOVolumeDriver(HostBlockDeviceDriver):
    volume_type = "scaleio"
    nova = NovaBinding("nova.virt.libvirt.volume.scaleio.LibvirtScaleIOVolumeDriver")
    brick_protocol = "SCALEIO"
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.path(Path("/opt/emc/scaleio/sdc/bin/drv_cfg"), "PowerFlex SDC (drv_cfg)")
