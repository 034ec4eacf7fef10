"""NVMe-oF over TCP through the kernel in the nested test host (issue #31).

The kernel's own NVMe target (``nvmet``, ``nvmet_tcp``), configured through configfs, serves one
namespace over a loop device on 127.0.0.1:4420; os-brick's NVMeOFConnector (the project's
version, from the wheelhouse) connects with ``nvme connect`` and finds the namespace by its
uuid. One multiattach volume is shared by two OS-less guests through ``LibvirtVolumeDriver``:
rw in A, ro in B; the controller stays while any guest uses it and goes with the last detach.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nested.conftest import run
from tests.nested.test_kernel_iscsi import BLOCK, wait_until

pytestmark = pytest.mark.kernel_initiator

PORT = 4420
NQN = "nqn.2024-01.dev.virtdriver.nested:nvme1"
NVMET = Path("/sys/kernel/config/nvmet")
FABRICS = Path("/sys/class/nvme-fabrics/ctl")


def controllers(nqn: str = NQN) -> list[str]:
    """Fabrics controllers connected to ``nqn`` (from sysfs)."""
    found = []
    for ctrl in sorted(FABRICS.glob("nvme*")):
        try:
            if (ctrl / "subsysnqn").read_text().strip() == nqn:
                found.append(ctrl.name)
        except OSError:
            continue
    return found


def list_subsys() -> str:
    return subprocess.run(["nvme", "list-subsys"], capture_output=True, text=True).stdout


class NvmeTarget:
    """One subsystem, one namespace over a loop device, one TCP port on 127.0.0.1."""

    def __init__(self, device: str, backing: Path) -> None:
        self.device = device
        self.backing = backing
        self.ns_uuid = str(uuid.uuid4())
        self.nguid = str(uuid.uuid4())
        self.subsys = NVMET / "subsystems" / NQN
        self.ns = self.subsys / "namespaces" / "1"
        self.port = NVMET / "ports" / "1"

    def up(self) -> None:
        self.subsys.mkdir()
        (self.subsys / "attr_allow_any_host").write_text("1")
        self.ns.mkdir()
        (self.ns / "device_path").write_text(self.device)
        (self.ns / "device_uuid").write_text(self.ns_uuid)
        (self.ns / "device_nguid").write_text(self.nguid)
        (self.ns / "enable").write_text("1")
        self.port.mkdir()
        (self.port / "addr_trtype").write_text("tcp")
        (self.port / "addr_adrfam").write_text("ipv4")
        (self.port / "addr_traddr").write_text("127.0.0.1")
        (self.port / "addr_trsvcid").write_text(str(PORT))
        (self.port / "subsystems" / NQN).symlink_to(self.subsys)

    def down(self) -> None:
        for ctrl in controllers():
            subprocess.run(["nvme", "disconnect", "-d", f"/dev/{ctrl}"], capture_output=True)
        link = self.port / "subsystems" / NQN
        if link.is_symlink():
            link.unlink()
        if self.port.exists():
            self.port.rmdir()
        if self.ns.exists():
            (self.ns / "enable").write_text("0")
            self.ns.rmdir()
        if self.subsys.exists():
            self.subsys.rmdir()

    def info(self, vid: str, **data) -> dict:
        """connection_info as a block-storage service gives it (new-style portals)."""
        return {"driver_volume_type": "nvmeof", "serial": vid, "multiattach": True,
                "data": {"volume_id": vid, "target_nqn": NQN, "vol_uuid": self.ns_uuid,
                         "portals": [["127.0.0.1", PORT, "tcp"]], **data}}


@pytest.fixture
def nvme_target(loop_device) -> Iterator[NvmeTarget]:
    for module in ("nvmet", "nvmet_tcp", "nvme_tcp", "nvme_fabrics"):
        run("modprobe", module)
    if not NVMET.exists():
        run("mount", "-t", "configfs", "none", "/sys/kernel/config")
    hostnqn = Path("/etc/nvme/hostnqn")
    if not hostnqn.exists() or not hostnqn.read_text().strip():
        hostnqn.parent.mkdir(exist_ok=True)
        hostnqn.write_text(run("nvme", "gen-hostnqn").strip() + "\n")
    target = NvmeTarget(loop_device.device, loop_device.backing_file)
    try:
        target.up()
        yield target
    finally:
        target.down()


def test_nvmeof_multiattach_through_the_driver(nvme_target, guests, volume_driver) -> None:
    from testhosts.guests import ReadOnlyWrite, block_info, read_pattern, write_pattern

    assert controllers() == []
    a, b = guests.start("a"), guests.start("b")
    vid = str(uuid.uuid4())
    info = nvme_target.info(vid)
    alias = f"ua-{vid}"
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    ctrls = controllers()
    assert len(ctrls) == 1, ctrls
    assert NQN in list_subsys()
    assert not block_info(a, alias).ro and block_info(b, alias).ro
    source = block_info(a, alias).file
    assert block_info(b, alias).file == source
    disk = Path(os.path.realpath(source)).name
    assert disk.startswith("nvme") and Path(f"/sys/block/{disk}/uuid").read_text().strip() == \
        nvme_target.ns_uuid, (source, disk)

    pattern = secrets.randbelow(200) + 20
    offset = secrets.randbelow(1000) * BLOCK
    write_pattern(a, alias, pattern, offset=offset)
    assert read_pattern(b, alias, pattern, offset=offset)
    with pytest.raises(ReadOnlyWrite):
        write_pattern(b, alias, 0x01, offset=offset)
    with open(nvme_target.backing, "rb") as fh:  # through nvmet into the loop device's file
        fh.seek(offset)
        assert fh.read(BLOCK) == bytes([pattern]) * BLOCK

    volume_driver.detach_volume(a.name(), vid)
    assert controllers() == ctrls, "detaching A disconnected the controller B still uses"
    assert read_pattern(b, alias, pattern, offset=offset)
    volume_driver.detach_volume(b.name(), vid)
    wait_until(lambda: controllers() == [], 30, "the controller gone after the last detach")
    assert NQN not in list_subsys()
    assert not Path(f"/sys/block/{disk}").exists()
    assert volume_driver.records.connected() == []


def test_nvmeof_failed_connect_leaves_no_controller(nvme_target, guests, volume_driver) -> None:
    """A namespace uuid the (real, reachable) subsystem does not have: os-brick connects the
    controller, never finds the namespace; the failed attach leaves no controller behind."""
    from virtdriver.errors import VirtDriverError

    a = guests.start("a")
    vid = str(uuid.uuid4())
    info = nvme_target.info(vid, vol_uuid=str(uuid.uuid4()))
    with pytest.raises(VirtDriverError) as failed:
        volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    assert "NVMEOF" in str(failed.value) or "nvme" in str(failed.value).lower(), failed.value
    assert controllers() == [], f"a failed connect left {controllers()} connected"
    assert NQN not in list_subsys()
    assert volume_driver.records.connected() == []


def test_nvmeof_online_extend(nvme_target, guests, volume_driver) -> None:
    """Grow the namespace's backing device; os-brick's extend (a rescan) and QEMU's resize:
    query-block shows the new size in both guests."""
    from testhosts.guests import block_info

    a, b = guests.start("a"), guests.start("b")
    vid = str(uuid.uuid4())
    info = nvme_target.info(vid)
    alias = f"ua-{vid}"
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    old = 64 << 20
    assert block_info(a, alias).raw["inserted"]["image"]["virtual-size"] == old
    new = 96 << 20
    with open(nvme_target.backing, "r+b") as fh:
        fh.truncate(new)
    run("losetup", "-c", nvme_target.device)
    (nvme_target.ns / "revalidate_size").write_text("1")
    result = volume_driver.extend_volume_on_host(info)
    assert result.complete, result.to_json()
    assert result.size == new, result.to_json()
    for dom in (a, b):
        assert block_info(dom, alias).raw["inserted"]["image"]["virtual-size"] == new, dom.name()
    volume_driver.detach_volume(a.name(), vid)
    volume_driver.detach_volume(b.name(), vid)
    wait_until(lambda: controllers() == [], 30, "the controller gone after the last detach")
