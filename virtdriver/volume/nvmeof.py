"""NVMe over Fabrics namespaces (TCP or RDMA): a host block device at ``data.device_path``.

The host connects to ``data.portals`` (``[[address, port, transport], ...]``) or the older
``data.target_portal`` (an address); their addresses follow the one host rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from virtdriver.errors import InvalidConnectionInfo, show
from virtdriver.volume import probes
from virtdriver.volume.base import DATA, NovaBinding, RenderOptions, VolumeSource, host_name
from virtdriver.volume.block import HostBlockDeviceDriver


class NVMeoFVolumeDriver(HostBlockDeviceDriver):
    volume_type = "nvmeof"
    nova = NovaBinding("nova.virt.libvirt.volume.nvme.LibvirtNVMEVolumeDriver")
    brick_protocol = "NVMEOF"
    min_os_brick = probes.MIN_OS_BRICK_NVMEOF

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.nvme_fabrics()

    def check_host_side(self, data: Mapping[str, Any], options: RenderOptions) -> None:
        if data.get("target_portal") is not None:
            host_name(data["target_portal"], f"{DATA}.target_portal")
        portals = data.get("portals")
        if portals is None:
            return
        if not isinstance(portals, list):
            raise InvalidConnectionInfo(f"{DATA}.portals", f"{show(portals)} is not a list")
        for i, portal in enumerate(portals):
            if not isinstance(portal, (list, tuple)) or not portal:
                raise InvalidConnectionInfo(f"{DATA}.portals[{i}]", f"{show(portal)} is not "
                                            "[address, port, transport]")
            host_name(portal[0], f"{DATA}.portals[{i}]")

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        self.check_host_side(data, options)
        return super().source(data, options)
