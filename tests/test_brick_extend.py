"""os-brick's extend through virtdriver's wrapper, with the connector options of the connect."""

from __future__ import annotations

import pytest

from virtdriver.hypervisor import brick


@pytest.mark.parametrize("protocol", ["NFS", "GLUSTERFS", "QUOBYTE"])
def test_a_share_connector_extends_with_its_mount_base_and_leaves_the_size_to_qemu(
        protocol, tmp_path) -> None:
    """The connector a share was connected with (it needs its mount point base) has no extend:
    the file grows on the share, so there is no host-side size to report (``None``)."""
    options = {f"{protocol.lower()}_mount_point_base": str(tmp_path / "mnt")}
    properties = {"export": "192.0.2.1:/vol", "name": "volume-1"}
    assert brick.extend(protocol, properties, tmp_path / "state", **options) is None


def test_local_extend_reports_the_device_size(tmp_path, loop_device) -> None:
    size = brick.extend("LOCAL", {"device_path": loop_device.device}, tmp_path / "state")
    assert size == 64 << 20
