"""Orphaned host connections on a kernel initiator (#45, item 3): an iSCSI session that no record
and no guest accounts for is listed by audit and logged out by ``release --orphans``; one that a
record or a guest accounts for stays."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.nested.test_kernel_iscsi import (  # noqa: F401 - fixture
    IQN,
    PORT,
    lun_info,
    sessions,
    tgt_lun,
    tgtadm,
    wait_until,
)
from tests.support.volumes import disk_xml
from virtdriver.ops.audit import audit_host

pytestmark = pytest.mark.kernel_initiator

STRAY = "iqn.2024-01.dev.virtdriver.nested:stray"


def iscsiadm(*args: str) -> str:
    from tests.nested.conftest import run

    return run("iscsiadm", *args)


def orphaned(volume_driver) -> list[str]:  # type: ignore[no-untyped-def]
    report = audit_host(volume_driver.compute_host.connection.get(), volume_driver.state_dir)
    return [v.source for v, d in report.dangers if d.kind == "orphan"]


def stray_disk() -> str:
    """The SCSI disk of the stray session, once the kernel has found it."""
    found: list[str] = []

    def seen() -> bool:
        for session in Path("/sys/class/iscsi_session").glob("session*"):
            if (session / "targetname").read_text().strip() == STRAY:
                found[:] = [p.name for p in session.glob("device/target*/*/block/*")]
        return bool(found)

    wait_until(seen, 30, "the stray session's disk")
    return f"/dev/{found[0]}"


def test_a_stray_session_is_listed_and_logged_out_the_recorded_one_stays(
        tgt_lun, guests, volume_driver, tmp_path: Path) -> None:
    backing = tmp_path / "stray.raw"
    with open(backing, "wb") as fh:
        fh.truncate(16 << 20)
    tgtadm("--mode", "target", "--op", "new", "--tid", "2", "-T", STRAY)
    tgtadm("--mode", "logicalunit", "--op", "new", "--tid", "2", "--lun", "1", "-b", str(backing))
    tgtadm("--mode", "target", "--op", "bind", "--tid", "2", "-I", "ALL")
    a, b = guests.start("a"), guests.start("b")
    info = lun_info()
    vid = info["data"]["volume_id"]
    try:
        volume_driver.attach_volume(info, a.name())  # a session with a record
        iscsiadm("-m", "discovery", "-t", "st", "-p", f"127.0.0.1:{PORT}")
        iscsiadm("-m", "node", "-T", STRAY, "-p", f"127.0.0.1:{PORT}", "--login")
        device = stray_disk()
        assert orphaned(volume_driver) == [f"iscsi {STRAY} ({device})"]

        # a guest that uses the stray disk (attached behind virtdriver's back) accounts for it
        xml = disk_xml(os.path.realpath(device), "ua-stray-user", block=True)
        b.attachDeviceFlags(xml, 1)
        assert orphaned(volume_driver) == []
        kept = volume_driver.release_orphans()
        assert kept == [] and STRAY in sessions()
        b.detachDeviceFlags(xml, 1)
        wait_until(lambda: orphaned(volume_driver) == [f"iscsi {STRAY} ({device})"], 30,
                   "the disk gone from guest b")

        assert volume_driver.release_orphans() == [(f"iscsi {STRAY} ({device})", None)]
        assert STRAY not in sessions() and IQN in sessions()  # the recorded one stays
        assert orphaned(volume_driver) == []
        volume_driver.detach_volume(a.name(), vid)
        assert IQN not in sessions()
    finally:
        if volume_driver.list_attachments(a.name()):
            volume_driver.detach_volume(a.name(), vid)
        for target in (STRAY, IQN):  # nothing left for the next test, whatever failed here
            if target in sessions():
                iscsiadm("-m", "node", "-T", target, "-p", f"127.0.0.1:{PORT}", "--logout")
        volume_driver.records.forget(vid)
        tgtadm("--mode", "target", "--op", "delete", "--force", "--tid", "2")
