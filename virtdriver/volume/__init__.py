"""Protocol volume drivers: each maps ``connection_info`` to a disk source, nothing more."""

from virtdriver.volume.base import HostSecret, RenderOptions, VolumeDriver, VolumeSource
from virtdriver.volume.registry import get_driver, known_types

__all__ = ["HostSecret", "RenderOptions", "VolumeDriver", "VolumeSource", "get_driver",
           "known_types"]
