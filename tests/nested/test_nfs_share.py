"""One multiattach volume that is a file on a real NFS share, mounted by os-brick under the
driver's mount base, rw in guest A and ro in guest B, under SELinux and under AppArmor (#20,
items 1, 2 and 7).

The NFS server runs in the nested test host itself (``tests/nested/nfs_support.py``); the client
mount is os-brick's RemoteFsConnector, called by ``LibvirtVolumeDriver`` for
``driver_volume_type`` ``nfs``. What each guest sees is checked through its own QEMU (qemu-io,
whose output is read from the domain log) and on the server's disk.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testhosts.guests import block_info, read_pattern
from tests.nested import nfs_support
from tests.nested.conftest import MCS_PAIR, AuditWindow, observe, qemu_pid, run, split_context
from tests.nested.nfs_support import NfsVolume, mount_of
from tests.nested.selinux_support import file_label, no_guest_denials, process_label
from tests.nested.test_apparmor import confinement, files_rules, profile_name, rule_for
from tests.support.sharedio import writer_shares_with_reader
from virtdriver.errors import AttachFailed
from virtdriver.volume.remotefs import mount_point

BOOLEAN = Path("/sys/fs/selinux/booleans/virt_use_nfs")


@pytest.fixture
def nfs_volume() -> Iterator[NfsVolume]:
    with nfs_support.nfs_volume() as vol:
        yield vol


@pytest.fixture
def nfs_driver() -> Iterator[object]:
    with nfs_support.nfs_driver() as driver:
        yield driver


def _boolean() -> bool:
    return BOOLEAN.read_text().split()[0] == "1"


def _set_boolean(on: bool) -> None:
    """As the host's operator would (``setsebool``), for this boot only (no ``-P``)."""
    run("setsebool", "virt_use_nfs", "on" if on else "off")
    assert _boolean() is on


def _doctor_check(driver, name: str):  # type: ignore[no-untyped-def]
    from virtdriver.ops.doctor import diagnose

    found = [c for c in diagnose(driver).checks if c.name == name]
    assert len(found) == 1, [c.name for c in diagnose(driver).checks]
    return found[0]


def _fresh_window(types: str) -> AuditWindow:
    return AuditWindow(types, time.time(), Path("/var/log/audit/audit.log").stat().st_size)


def _on_disk(vol, pattern: int, offset: int) -> bool:
    return vol.bytes_at(offset) == bytes([pattern]) * 4096


@pytest.mark.lsm_selinux
def test_nfs_share_under_selinux(guests, nfs_driver, nfs_volume, audit_window) -> None:
    """The NFS file keeps the NFS label (libvirt cannot relabel it); the guests' QEMU may use it
    only with ``virt_use_nfs``, which doctor reports and a refused attach names."""
    driver, vol = nfs_driver, nfs_volume
    initially = _boolean()
    record = functools.partial(observe, "nfs-selinux")
    record("virt_use_nfs at boot", initially)
    a, b = guests.start("a"), guests.start("b")
    path = os.path.join(mount_point(driver.mount_base, vol.export), vol.info["data"]["name"])
    try:
        if initially:
            _set_boolean(False)
        # Off: doctor says so, names the boolean and the protocol; QEMU's open of the file is
        # refused (Permission denied), the error names the boolean, and nothing stays attached
        # or mounted.
        check = _doctor_check(driver, "selinux booleans")
        record("doctor, boolean off", f"{check.status}: {check.detail}")
        assert check.status == "warn" and "virt_use_nfs" in check.detail and "nfs" in check.detail
        with pytest.raises(AttachFailed) as refused:
            driver.attach_volume(vol.info, a.name(), attach_mode="rw")
        record("attach refused", str(refused.value))
        assert "Permission denied" in str(refused.value), str(refused.value)
        assert "setsebool -P virt_use_nfs on" in str(refused.value), str(refused.value)
        assert driver.list_attachments(a.name()) == []
        assert driver.records.load(vol.vid) is None
        assert not os.path.ismount(os.path.dirname(path))
        # The refusal is the policy's, and audited: svirt_t may not read the nfs_t file.
        denials = [r.line for r in audit_window.records()
                   if "svirt_t" in r.line and "tcontext=system_u:object_r:nfs_t" in r.line
                   and not r.permissive]
        record("svirt_t denials while off", denials)
        assert denials and "{ read }" in denials[0], denials

        # On (the operator's setsebool, as doctor says): the whole story, with no denial.
        _set_boolean(True)
        check = _doctor_check(driver, "selinux booleans")
        assert check.status == "ok" and "virt_use_nfs" in check.detail, check
        window = _fresh_window(audit_window.types)
        record("doctor, boolean on", f"{check.status}: {check.detail}")
        _selinux_story(driver, vol, a, b, path, record)
        no_guest_denials(window)
    finally:
        _set_boolean(initially)


def _selinux_story(driver, vol, a, b, path, record) -> None:  # type: ignore[no-untyped-def]
    driver.attach_volume(vol.info, a.name(), attach_mode="rw")
    # Mounted by os-brick at <mount base>/<md5 of the export>: a real NFS mount.
    mount = mount_of(path)
    record("mount", f"{mount.get('source')} {mount.get('type')} {mount.get('options')}")
    assert mount.get("type", "").startswith("nfs"), mount
    assert mount["point"] == os.path.dirname(path) and mount["source"] == vol.export, mount
    before = file_label(path)
    record("label after A's attach", before)
    driver.attach_volume(vol.info, b.name(), attach_mode="ro")
    assert not block_info(a, vol.alias).ro and block_info(b, vol.alias).ro

    # Each QEMU confined as svirt_t with its own MCS pair.
    levels = {}
    for dom in (a, b):
        _, _, typ, level = split_context(process_label(qemu_pid(dom)))
        assert typ == "svirt_t" and MCS_PAIR.fullmatch(level), (dom.name(), level)
        levels[dom.name()] = level
    assert len(set(levels.values())) == 2, levels
    record("QEMU levels", levels)

    # The file keeps the NFS label: libvirt's relabel (shared image context) is not supported
    # by this file system, libvirt goes on, and the guests open it through virt_use_nfs.
    label = file_label(path)
    record("label with A and B", label)
    record("label on the server's disk", file_label(str(vol.server_file)))
    assert split_context(label)[2] == "nfs_t", label
    assert label == before

    pattern, offset = writer_shares_with_reader(a, b, vol.alias)
    assert _on_disk(vol, pattern, offset), "A's write did not reach the server's file"

    driver.detach_volume(a.name(), vid := vol.vid)
    assert read_pattern(b, vol.alias, pattern, offset=offset)
    assert os.path.ismount(os.path.dirname(path))  # B still uses the share
    assert file_label(path) == label
    driver.detach_volume(b.name(), vid)
    assert driver.records.load(vid) is None
    assert not os.path.ismount(os.path.dirname(path)), "the last detach left the share mounted"


@pytest.mark.lsm_apparmor
def test_nfs_share_under_apparmor(guests, nfs_driver, nfs_volume, audit_window) -> None:
    """The file on the share mounted under the mount base is in both guests' profiles; A's
    detach removes it from A's only, B keeps reading; no AppArmor denial."""
    driver, vol = nfs_driver, nfs_volume
    a, b = guests.start("a"), guests.start("b")
    path = os.path.join(mount_point(driver.mount_base, vol.export), vol.info["data"]["name"])
    assert rule_for(files_rules(a), path) is None and rule_for(files_rules(b), path) is None

    driver.attach_volume(vol.info, a.name(), attach_mode="rw")
    driver.attach_volume(vol.info, b.name(), attach_mode="ro")
    mount = mount_of(path)
    assert mount.get("type", "").startswith("nfs") and mount["source"] == vol.export, mount
    assert not block_info(a, vol.alias).ro and block_info(b, vol.alias).ro
    record = functools.partial(observe, "nfs-apparmor")
    record("mount", f"{mount.get('source')} {mount.get('type')} {mount.get('options')}")
    record("rules", {d.name(): rule_for(files_rules(d), path) for d in (a, b)})

    # In both profiles: A may write, B only read (virtdriver regenerates B's rules after its
    # read-only hot-plug, docs/labels.md).
    assert re.fullmatch(r"rw?k?", rule_for(files_rules(b), path) or "x") and \
        "w" not in rule_for(files_rules(b), path), files_rules(b)
    assert "w" in (rule_for(files_rules(a), path) or ""), files_rules(a)
    for dom in (a, b):
        assert confinement(qemu_pid(dom)) == f"{profile_name(dom)} (enforce)"

    pattern, offset = writer_shares_with_reader(a, b, vol.alias)
    assert _on_disk(vol, pattern, offset), "A's write did not reach the server's file"

    driver.detach_volume(a.name(), vol.vid)
    assert rule_for(files_rules(a), path) is None, files_rules(a)
    assert rule_for(files_rules(b), path) is not None, files_rules(b)
    assert read_pattern(b, vol.alias, pattern, offset=offset)
    assert os.path.ismount(os.path.dirname(path))

    driver.detach_volume(b.name(), vol.vid)
    assert rule_for(files_rules(b), path) is None, files_rules(b)
    assert not os.path.ismount(os.path.dirname(path)), "the last detach left the share mounted"
    denied = [r.line for r in audit_window.records() if 'apparmor="DENIED"' in r.line]
    assert denied == [], "\n".join(denied)
