"""Volumes the host attaches as a block device (os-brick fills in ``data.device_path``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from virtdriver.config import Source
from virtdriver.volume.base import RenderOptions, VolumeDriver, VolumeSource, absolute_path


class HostBlockDeviceDriver(VolumeDriver):
    """A block device at ``data.device_path``; subclasses set the protocol and the I/O mode."""

    io: ClassVar[str | None] = None

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        return VolumeSource("block", Source(dev=absolute_path(data, "device_path")),
                            io=self.io)
