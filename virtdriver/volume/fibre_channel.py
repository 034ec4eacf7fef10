"""Fibre Channel LUNs found by the host's HBAs: a host block device at ``data.device_path``."""

from collections.abc import Mapping
from typing import Any

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding, RenderOptions, VolumeSource, check_luns
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

    def check_host_side(self, data: Mapping[str, Any], options: RenderOptions) -> None:
        check_luns(data)  # the LUN the connected device is compared with

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        check_luns(data)
        return super().source(data, options)
