"""Host connections no record and no guest accounts for (#45, item 3), on this host: mounts in
the mount base (this kernel has no iSCSI, NVMe-oF or RBD initiator; tests/nested has those)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from testhosts.guests import LoopDevice
from tests.conftest import FIXTURES
from tests.support.volumes import disk_xml
from virtdriver.errors import DamagedRecord, LockTimeout
from virtdriver.hypervisor.hostconn import HostConnections, HostRecord
from virtdriver.hypervisor.locks import connections_lock

# whole_host: the sweep releases what no guest of the host accounts for, and audit names it
pytestmark = [pytest.mark.hypervisor, pytest.mark.whole_host]


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


# ---- issue 56, items 7-9: the operator's tools at their edges ----------------------------------


def tmpfs_at(point: bytes | Path, size: str = "8m") -> bytes:
    """Mount a fresh tmpfs at ``point`` (any bytes: mount points need not be UTF-8)."""
    raw = os.fsencode(point)
    os.makedirs(raw, exist_ok=True)
    subprocess.run([b"mount", b"-t", b"tmpfs", b"-o", f"size={size}".encode(), b"tmpfs", raw],
                   check=True)
    return raw


@pytest.fixture
def unmounted_after() -> Iterator[list[bytes]]:
    """Mount points to unmount (lazily, deepest first) after the test."""
    points: list[bytes] = []
    yield points
    for point in sorted(points, key=len, reverse=True):
        subprocess.run([b"umount", b"-l", point], check=False, capture_output=True)


def mounted_now(point: bytes) -> bool:
    return os.path.ismount(point)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr and "Error:" not in result.stderr, result.stderr


def test_a_mount_point_that_is_not_utf8_breaks_neither_audit_nor_the_sweep(
        tmp_path: Path, unmounted_after: list[bytes]) -> None:
    """Item 7: mountinfo is bytes; a name that is not UTF-8, outside the mount base or in it
    (doctor's look at mount propagation reads every mount too)."""
    state = tmp_path / "state"
    outside = tmpfs_at(os.fsencode(tmp_path) + b"/elsewhere\xff\xfe")
    inside = tmpfs_at(os.fsencode(state) + b"/mnt/orphan\xff\n\x1b")
    unmounted_after += [outside, inside]
    shown = f"mount {state}/mnt/orphan\\xff\\n\\x1b"

    audit = cli(state, "audit", "--json")
    no_traceback(audit)
    assert audit.returncode == 1, audit.stderr
    assert orphans_in(json.loads(audit.stdout)) == [shown]
    text = cli(state, "audit")
    no_traceback(text)
    assert text.returncode == 1 and f"({shown})" in text.stdout, text.stderr

    released = cli(state, "release", "--orphans")
    no_traceback(released)
    assert released.returncode == 0, released.stderr
    assert released.stdout.splitlines() == [f"{shown}: released",
                                            "1 orphaned host connection released"]
    assert not mounted_now(inside) and mounted_now(outside)
    doctor = cli(state, "doctor", "--json", "--mount-base", str(state / "mnt"))  # reads it too
    no_traceback(doctor)
    assert "new_namespace" in json.loads(doctor.stdout)["facts"]["mount_propagation"]  # probed


def test_one_busy_orphan_does_not_stop_the_sweep(tmp_path: Path,
                                                 unmounted_after: list[bytes]) -> None:
    """Item 8: a process's working directory and a nested mount keep an orphan busy without an
    open file; each is kept and said why, the free orphan after them is released."""
    state = tmp_path / "state"
    base = os.fsencode(state / "mnt")
    worked_in, nested, free = (tmpfs_at(base + name) for name in (b"/a-cwd", b"/b-nested",
                                                                   b"/c-free"))
    below = tmpfs_at(nested + b"/deeper", size="1m")
    unmounted_after += [worked_in, nested, below, free]
    holder = subprocess.Popen(["sleep", "120"], cwd=worked_in)
    try:
        released = cli(state, "release", "--orphans")
    finally:
        holder.kill()
        holder.wait()
    no_traceback(released)
    assert released.returncode == 0, released.stderr
    assert released.stdout.splitlines() == [
        f"mount {os.fsdecode(worked_in)}: kept, processes work in it "
        f"(sleep (pid {holder.pid}): working directory)",
        f"mount {os.fsdecode(nested)}: kept, a mount below it ({os.fsdecode(below)})",
        f"mount {os.fsdecode(free)}: released",
        "1 orphaned host connection released, 2 kept"]
    assert mounted_now(worked_in) and mounted_now(nested) and not mounted_now(free)


def test_a_release_that_fails_is_said_and_the_sweep_goes_on(tmp_path: Path,
                                                           unmounted_after: list[bytes]) -> None:
    """Item 8: a loop device backed by a file below an orphan pins it, unseen by the checks:
    umount fails, the sweep says so for that orphan, releases the next, and exits 1."""
    state = tmp_path / "state"
    base = os.fsencode(state / "mnt")
    pinned, free = tmpfs_at(base + b"/a-pinned", size="32m"), tmpfs_at(base + b"/b-free")
    unmounted_after += [pinned, free]
    with LoopDevice(16 << 20, directory=os.fsdecode(pinned)):
        released = cli(state, "release", "--orphans")
        assert mounted_now(pinned)
    no_traceback(released)
    assert released.returncode == 1, released.stderr
    busy = f"umount: {os.fsdecode(pinned)}: target is busy."
    assert released.stdout.splitlines() == [
        f"mount {os.fsdecode(pinned)}: kept, its release failed ({busy})",
        f"mount {os.fsdecode(free)}: released",
        "1 orphaned host connection released, 1 kept"]
    assert released.stderr.splitlines() == [
        f"virtdriver: error: could not release 1 of 2 orphaned host connections (the sweep "
        f"went on with the others): mount {os.fsdecode(pinned)}: {busy}"]
    assert not mounted_now(free)


@pytest.mark.parametrize("damage", ["dangling link", "fifo", "link to a device"])
def test_a_record_that_is_no_file_is_damage(tmp_path: Path, unmounted_after: list[bytes],
                                            damage: str) -> None:
    """Item 9: a record that leads nowhere, or to what is no file (a FIFO would stall a read, a
    device never ends), may account for a connection: audit names it, the sweep keeps every
    orphan, and neither waits; an attach of that volume stops on it too."""
    state = tmp_path / "state"
    orphan = tmpfs_at(os.fsencode(state / "mnt" / "share"))
    unmounted_after.append(orphan)
    record = HostConnections(state).path("vol-linked")
    record.parent.mkdir(parents=True)
    if damage == "fifo":
        os.mkfifo(record)
    else:
        record.symlink_to(tmp_path / "gone.json" if damage == "dangling link" else "/dev/zero")

    audit = cli(state, "audit", "--json")
    no_traceback(audit)
    damaged = [d["message"] for v in json.loads(audit.stdout)["volumes"] for d in v["dangers"]
               if d["kind"] == "record"]
    assert len(damaged) == 1 and str(record) in damaged[0], audit.stdout
    swept = cli(state, "release", "--orphans")
    no_traceback(swept)
    assert swept.returncode == 1 and f"record {record} is damaged" in swept.stderr, swept.stderr
    assert mounted_now(orphan)
    with pytest.raises(DamagedRecord, match={
            "dangling link": "a symbolic link to a file that does not exist",
            "fifo": "Expecting value", "link to a device": "longer than"}[damage]):
        HostConnections(state).load("vol-linked")


def test_a_relative_mount_base_is_refused_as_attach_refuses_it(guests, tmp_path: Path,
                                                               unmounted_after: list[bytes],
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """Item 9: a relative --mount-base matches no mount point and would hide every orphan."""
    state = tmp_path / "state"
    unmounted_after.append(tmpfs_at(os.fsencode(state / "mnt" / "left")))
    monkeypatch.chdir(tmp_path)  # state/mnt relative to here is the real base: still refused
    dom = guests.start("relative-base")
    attach = cli(state, "attach", "--mount-base", "state/mnt", dom.name(),
                 str(FIXTURES / "connection_info" / "nfs.json"))
    audit = cli(state, "audit", "--mount-base", "state/mnt")
    swept = cli(state, "release", "--orphans", "--mount-base", "state/mnt")
    for result in (attach, audit, swept):
        no_traceback(result)
        assert result.returncode == 2, (result.args, result.stdout, result.stderr)
        assert "virtdriver: error: mount_base: 'state/mnt' is not absolute" in result.stderr
    assert audit.stdout == swept.stdout == ""
    assert mounted_now(os.fsencode(state / "mnt" / "left"))
