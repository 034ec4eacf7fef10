"""NVMe over Fabrics namespaces (TCP or RDMA): a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver
from virtdriver.volume import probes


class NVMeoFVolumeDriver(HostBlockDeviceDriver):
    volume_type = "nvmeof"
    brick_protocol = "NVMEOF"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.nvme_fabrics()
