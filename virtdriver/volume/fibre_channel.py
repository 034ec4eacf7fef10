"""Fibre Channel LUNs found by the host's HBAs: a host block device at ``data.device_path``."""

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.block import HostBlockDeviceDriver


class FibreChannelVolumeDriver(HostBlockDeviceDriver):
    volume_type = "fibre_channel"
    nova = NovaBinding(
        "nova.virt.libvirt.volume.fibrechannel.LibvirtFibreChannelVolumeDriver",
        default_aio_drops_native=True)
    brick_protocol = "FIBRE_CHANNEL"
    multipathd = True
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        hosts = list((probes.SYS / "class" / "fc_host").glob("host*"))
        return bool(hosts), f"{len(hosts)} FC HBA(s)" if hosts else "no FC HBA"
