"""Dell PowerFlex (ScaleIO) volumes mapped by the SDC: a host block device at ``data.device_path``."""

from pathlib import Path

from virtdriver.volume.base import NovaBinding
from virtdriver.volume.block import HostBlockDeviceDriver


class ScaleIOVolumeDriver(HostBlockDeviceDriver):
    volume_type = "scaleio"
    nova = NovaBinding("nova.virt.libvirt.volume.scaleio.LibvirtScaleIOVolumeDriver")
    brick_protocol = "SCALEIO"
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        sdc = Path("/opt/emc/scaleio/sdc/bin/drv_cfg")
        return (True, f"{sdc}") if sdc.exists() else (False, "no PowerFlex SDC (drv_cfg)")
