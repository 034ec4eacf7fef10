"""Dell PowerFlex (ScaleIO) volumes mapped by the SDC: a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver
from virtdriver.volume import probes


class ScaleIOVolumeDriver(HostBlockDeviceDriver):
    volume_type = "scaleio"
    brick_protocol = "SCALEIO"
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        sdc = probes.Path("/opt/emc/scaleio/sdc/bin/drv_cfg")
        return (True, f"{sdc}") if sdc.exists() else (False, "no PowerFlex SDC (drv_cfg)")
