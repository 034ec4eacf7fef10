"""iSCSI over RDMA (iSER): a host block device at ``data.device_path``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding, RenderOptions, VolumeSource
from virtdriver.volume.block import HostBlockDeviceDriver
from virtdriver.volume.iscsi import check_portals


class ISERVolumeDriver(HostBlockDeviceDriver):
    volume_type = "iser"
    nova = NovaBinding(
        "nova.virt.libvirt.volume.iser.LibvirtISERVolumeDriver", default_aio_drops_native=True)
    brick_protocol = "ISER"
    multipathd = True
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        missing = ([] if probes.binary("iscsiadm") else ["no iscsiadm"]) + (
            [] if probes.module("ib_iser") else ["no ib_iser"])
        return probes.verdict(missing, "iscsiadm and ib_iser")

    def check_host_side(self, data: Mapping[str, Any], options: RenderOptions) -> None:
        check_portals(data)  # the portals the host logs in to

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        check_portals(data)
        return super().source(data, options)
