"""iSCSI over RDMA (iSER): a host block device at ``data.device_path``."""

from virtdriver.volume.block import HostBlockDeviceDriver
from virtdriver.volume import probes


class ISERVolumeDriver(HostBlockDeviceDriver):
    volume_type = "iser"
    brick_protocol = "ISER"
    io = "native"

    def host_probe(self) -> tuple[bool, str] | None:
        missing = ([] if probes.binary("iscsiadm") else ["no iscsiadm"]) + (
            [] if probes.module("ib_iser") else ["no ib_iser"])
        return probes.verdict(missing, "iscsiadm and ib_iser")
