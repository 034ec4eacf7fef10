"""A second writer only on a cluster filesystem (#45, item 1), on real guests and loop devices.

The volume holds what ``mkfs`` made on the host; the guard reads it with blkid after the host
connect and before any guest gets the disk. Refusals leave the host as it was: no new disk, the
other guest's disk and the host connection in place.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from testhosts.guests import LoopDevice, block_info
from tests.support.volumes import local_volume
from virtdriver.errors import SharedWriteRefused
from virtdriver.hypervisor.metadata import OVERRIDES_NS
from virtdriver.ops.audit import audit_host

pytestmark = pytest.mark.hypervisor

MIB = 1 << 20
MKFS = {"ext4": ["mkfs.ext4", "-q", "-F"], "xfs": ["mkfs.xfs", "-q", "-f"],
        "gfs2": ["mkfs.gfs2", "-O", "-q", "-p", "lock_nolock", "-j", "2"]}


@pytest.fixture
def volume(request: pytest.FixtureRequest) -> Iterator[tuple[LoopDevice, dict]]:
    """A multiattach loop-device volume holding the filesystem the test names (or nothing)."""
    kind = getattr(request, "param", "ext4")
    with LoopDevice(320 * MIB) as loop:
        assert loop.device is not None
        if kind != "raw":
            subprocess.run([*MKFS[kind], loop.device], check=True, capture_output=True)
        yield loop, local_volume(loop.device, multiattach=True)


def _disks(volume_driver, name: str) -> list[str]:
    return [a.volumeId for a in volume_driver.list_attachments(name)]


def test_a_second_writer_of_ext4_is_refused_and_nothing_changes(guests, volume_driver,
                                                                volume) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    loop, info = volume
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    with pytest.raises(SharedWriteRefused, match=rf"volume {vid} holds ext4.*{a.name()}, "
                                                 rf"{b.name()} would.*--allow-shared-write"):
        volume_driver.attach_volume(info, b.name(), attach_mode="rw")
    assert _disks(volume_driver, b.name()) == []
    assert block_info(a, f"ua-{vid}").file == loop.device  # A keeps its disk
    assert volume_driver.records.connected() == [vid]  # and the host its connection


@pytest.mark.parametrize("volume", ["xfs"], indirect=True)
def test_two_writers_at_once_are_refused_before_either_gets_the_disk(guests, volume_driver,
                                                                      volume) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    with pytest.raises(SharedWriteRefused, match="holds xfs"):
        volume_driver.attach_volume_to_many(info, [a.name(), b.name()], attach_mode="rw")
    assert _disks(volume_driver, a.name()) == _disks(volume_driver, b.name()) == []
    assert volume_driver.records.connected() == []  # this call's connect released again


@pytest.mark.parametrize("volume", ["gfs2", "raw"], indirect=True)
def test_a_cluster_filesystem_or_raw_data_takes_two_writers(guests, volume_driver,
                                                            volume) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    made = volume_driver.attach_volume_to_many(info, [a.name(), b.name()], attach_mode="rw")
    assert [m.attach_mode for m in made] == ["rw", "rw"]
    report = audit_host(volume_driver.compute_host.connection.get(), volume_driver.state_dir)
    assert not [d for _, d in report.dangers if d.kind == "filesystem"]


def test_a_reader_beside_the_writer_is_allowed_and_warned_whoever_came_first(
        guests, volume_driver, volume, caplog: pytest.LogCaptureFixture) -> None:
    a, b, c = guests.start("fs-a"), guests.start("fs-b"), guests.start("fs-c")
    _, info = volume
    with caplog.at_level(logging.WARNING, logger="virtdriver"):
        volume_driver.attach_volume(info, b.name(), attach_mode="ro")
        assert not caplog.records  # alone: nothing to say
        volume_driver.attach_volume(info, a.name(), attach_mode="rw")  # the writer second
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "ext4" in said[0]
    assert f"{b.name()} reads it while {a.name()} writes" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="virtdriver"):
        volume_driver.attach_volume(info, c.name(), attach_mode="ro")  # a reader after it
    readers = ", ".join(sorted([b.name(), c.name()]))
    assert any(f"{readers} read it while {a.name()} writes" in r.getMessage()
               for r in caplog.records)
    d = guests.start("fs-d")
    with pytest.raises(SharedWriteRefused):  # and a second writer is still refused
        volume_driver.attach_volume(info, d.name(), attach_mode="rw")


def test_the_override_is_noted_and_audit_names_who_chose_it(guests, volume_driver, volume,
                                                            tmp_path: Path) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    made = volume_driver.attach_volume(info, b.name(), attach_mode="rw", allow_shared_write=True)
    assert made.attach_mode == "rw" and made.shareable
    report = audit_host(volume_driver.compute_host.connection.get(), volume_driver.state_dir)
    found = [d.message for v, d in report.dangers if d.kind == "filesystem" and v.volume == vid]
    assert len(found) == 1
    assert f"written by {a.name()}, {b.name()} ({b.name()} by --allow-shared-write)" in found[0]
    assert "ext4" in found[0]
    # the note lives in the guest's definition too: a restart keeps it
    cli = subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                          "--state-dir", str(volume_driver.state_dir), "audit", "--json"],
                         capture_output=True, text=True, check=False, timeout=120)
    kinds = [d["kind"] for v in json.loads(cli.stdout)["volumes"] if v["volume"] == vid
             for d in v["dangers"]]
    assert "filesystem" in kinds, cli.stderr
    volume_driver.detach_volume(b.name(), vid)  # the note goes with the disk
    for flag in (libvirt.VIR_DOMAIN_AFFECT_LIVE, libvirt.VIR_DOMAIN_AFFECT_CONFIG):
        with pytest.raises(libvirt.libvirtError, match="metadata not found"):
            b.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, OVERRIDES_NS, flag)


def test_the_cli_refuses_with_exit_3_and_one_line(guests, volume_driver, volume,
                                                  tmp_path: Path) -> None:
    a, b = guests.start("fs-a"), guests.start("fs-b")
    _, info = volume
    doc = tmp_path / "volume.json"
    doc.write_text(json.dumps(info))
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")

    def attach(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                               "--state-dir", str(volume_driver.state_dir), "attach", b.name(),
                               str(doc), *extra], capture_output=True, text=True, check=False,
                              timeout=120)

    refused = attach()
    assert refused.returncode == 3, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds ext4" in lines[0] and "--allow-shared-write" in lines[0]
    allowed = attach("--allow-shared-write")
    assert allowed.returncode == 0, allowed.stderr
    assert "--allow-shared-write" in allowed.stderr  # the warning, one line


def test_a_network_volume_qemu_opens_itself_is_said_not_checked(
        guests, backends, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """NBD (as rbd and QEMU's iSCSI): the host never sees the data, so it says so, once."""
    import uuid

    from tests.support.backends import need
    from virtdriver import LibvirtVolumeDriver

    need(backends, "nbd")
    a, b = guests.start("fs-a"), guests.start("fs-b")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "nbd", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "host": backends["VD_NBD_HOST"],
                     "port": int(backends["VD_NBD_PORT"]), "name": backends["VD_NBD_EXPORT"]}}
    try:
        with caplog.at_level(logging.WARNING, logger="virtdriver"):
            driver.attach_volume_to_many(info, [a.name(), b.name()], attach_mode="rw")
        said = [r.getMessage() for r in caplog.records]
        assert said == [f"volume {vid} is shared with a writer, and what it holds is not "
                        "checked: QEMU opens it over the network itself, which this host "
                        "cannot read"]
        for dom in (a, b):
            driver.detach_volume(dom.name(), vid)
    finally:
        driver.close()
