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


def test_nvmeof_subsystems_and_their_controllers(tmp_path, monkeypatch) -> None:
    """What the NVMe-oF connect undoes after a failure is found by subsystem NQN in sysfs
    (the nested host's tests/nested/test_kernel_nvmeof.py checks it against a real target)."""
    props = {"target_nqn": "nqn.a", "portals": [["127.0.0.1", 4420, "tcp"]],
             "volume_replicas": [{"target_nqn": "nqn.b"}, {"nqn": "nqn.c"}, "junk"]}
    assert brick._nvme_subsystems(props) == {"nqn.a", "nqn.b", "nqn.c"}
    assert brick._nvme_subsystems({"nqn": "nqn.old"}) == {"nqn.old"}
    for name, nqn in (("nvme0", "nqn.a"), ("nvme1", "nqn.z"), ("nvme2", "nqn.c")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "subsysnqn").write_text(nqn + "\n")
    (tmp_path / "nvme3").mkdir()  # no subsysnqn (going away): skipped
    monkeypatch.setattr(brick, "NVME_FABRICS_CTL", tmp_path)
    assert brick._nvme_controllers({"nqn.a", "nqn.c"}) == {"nvme0", "nvme2"}
