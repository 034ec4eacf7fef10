"""IBM Spectrum Scale (GPFS): a file at ``data.device_path`` on the cluster filesystem."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from virtdriver.config import Source
from virtdriver.volume import probes
from virtdriver.volume.base import (
    NovaBinding,
    RenderOptions,
    VolumeDriver,
    VolumeSource,
    absolute_path,
)


class GPFSVolumeDriver(VolumeDriver):
    volume_type = "gpfs"
    nova = NovaBinding("nova.virt.libvirt.volume.gpfs.LibvirtGPFSVolumeDriver")
    brick_protocol = "GPFS"

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        return VolumeSource("file", Source(file=absolute_path(data, "device_path")))

    def host_probe(self) -> tuple[bool, str] | None:
        ok = probes.filesystem("gpfs")
        return ok, "gpfs filesystem" if ok else "no gpfs filesystem"
