"""Host connections no record and no guest accounts for (#45, item 3), on this host: mounts in
the mount base (this kernel has no iSCSI, NVMe-oF or RBD initiator; tests/nested has those)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.volumes import disk_xml
from virtdriver.errors import LockTimeout
from virtdriver.hypervisor.hostconn import HostConnections, HostRecord
from virtdriver.hypervisor.locks import connections_lock

pytestmark = pytest.mark.hypervisor


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                           "--state-dir", str(state), *args], capture_output=True, text=True,
                          check=False, timeout=120)


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[list[Path]]:
    """Three tmpfs mounts in the state directory's mount base, unmounted after."""
    points = [tmp_path / "state" / "mnt" / name for name in ("left", "used", "recorded")]
    for point in points:
        point.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(point)],
                       check=True)
    yield points
    for point in points:
        subprocess.run(["umount", "-l", str(point)], check=False)


def orphans_in(report: dict) -> list[str]:
    return sorted(v["source"] for v in report["volumes"]
                  if any(d["kind"] == "orphan" for d in v["dangers"]))


def test_a_mount_nothing_accounts_for_is_listed_and_released(guests, mounted,
                                                            tmp_path: Path) -> None:
    left, used, recorded = mounted
    state = tmp_path / "state"
    image = used / "disk.raw"
    image.write_bytes(b"\0" * (1 << 20))
    dom = guests.start("orphan-user")  # a guest whose disk lives below one mount
    dom.attachDeviceFlags(disk_xml(image, "ua-orphan-test"), 1)  # live, behind our back
    HostConnections(state).save("v-recorded", HostRecord(protocol="NFS",
                                                         mount_point=str(recorded)))

    audit = cli(state, "audit", "--json")
    assert audit.returncode == 1 and audit.stdout, audit.stderr  # a danger: the orphan
    assert orphans_in(json.loads(audit.stdout)) == [f"mount {left}"]
    text = cli(state, "audit").stdout
    assert "Host connection without a record or a guest" in text and "DANGER orphan" in text

    released = cli(state, "release", "--orphans")
    assert released.returncode == 0, released.stderr
    assert released.stdout.splitlines() == [f"mount {left}: released",
                                            "1 orphaned host connection released"]
    mounts = Path("/proc/self/mountinfo").read_text()
    assert f" {left} " not in mounts and f" {used} " in mounts and f" {recorded} " in mounts
    assert orphans_in(json.loads(cli(state, "audit", "--json").stdout)) == []


def test_an_orphan_something_holds_is_kept_and_said_why(mounted, tmp_path: Path) -> None:
    left = mounted[0]
    state = tmp_path / "state"
    with open(left / "open.txt", "w"):  # this process keeps a file below it open
        released = cli(state, "release", "--orphans")
    assert released.returncode == 0, released.stderr
    kept = [line for line in released.stdout.splitlines() if line.startswith(f"mount {left}")]
    assert len(kept) == 1 and "kept, files below it are open" in kept[0]
    assert f" {left} " in Path("/proc/self/mountinfo").read_text()


def test_a_sweep_waits_for_a_connection_being_recorded(mounted, tmp_path: Path) -> None:
    """A connect holds the host-connections lock shared until its record is written."""
    from virtdriver import LibvirtVolumeDriver

    state = tmp_path / "state"
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=state, lock_timeout=0.5)
    holding, done = threading.Event(), threading.Event()

    def connecting() -> None:
        with connections_lock(state / "locks", sweeping=False):
            holding.set()
            done.wait(10)

    worker = threading.Thread(target=connecting)
    worker.start()
    try:
        assert holding.wait(10)
        with pytest.raises(LockTimeout, match="the host's connections is busy"):
            driver.release_orphans()
        assert f" {mounted[0]} " in Path("/proc/self/mountinfo").read_text()
    finally:
        done.set()
        worker.join(10)
        driver.close()


def test_release_takes_a_volume_or_orphans(tmp_path: Path) -> None:
    both = cli(tmp_path / "state", "release", "vol-1", "--orphans")
    neither = cli(tmp_path / "state", "release")
    assert both.returncode == neither.returncode == 2
    assert "give VOLUME_ID, or --orphans" in both.stderr + neither.stderr
