"""Fibre Channel LUNs found by the host's HBAs: a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver


class FibreChannelVolumeDriver(HostBlockDeviceDriver):
    volume_type = "fibre_channel"
    brick_protocol = "FIBRE_CHANNEL"
    io = "native"
