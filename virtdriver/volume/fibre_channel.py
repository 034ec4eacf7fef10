"""Fibre Channel LUNs found by the host's HBAs: a host block device at ``data.device_path``."""

from collections.abc import Mapping
from typing import Any

from virtdriver.errors import InvalidConnectionInfo, show
from virtdriver.volume import probes
from virtdriver.volume.base import DATA, NovaBinding, RenderOptions, VolumeSource, check_luns
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
        check_identity(data)

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        check_identity(data)
        return super().source(data, options)


def check_identity(data: Mapping[str, Any]) -> None:
    """Refuse a LUN or a remote port's WWN the connected device could not be compared with."""
    check_luns(data)
    for key in ("target_wwn", "target_wwns"):
        value = data.get(key)
        values = value if isinstance(value, list) else [value]
        if value is not None and not all(isinstance(v, str) and v for v in values):
            raise InvalidConnectionInfo(f"{DATA}.{key}", f"{show(value)} is not a WWN or a list "
                                        "of WWNs")
