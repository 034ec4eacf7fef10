"""AppArmor: libvirt's apparmor security driver confines each guest, and one volume shared by two
guests is in both guests' profiles until it is detached from one of them.

Runs inside the nested test host booted with ``apparmor=1 security=apparmor``
(``scripts/test-nested.sh --lsm apparmor``). libvirt writes each guest's disk rules into
``/etc/apparmor.d/libvirt/libvirt-UUID.files`` (through virt-aa-helper) and replaces the profile
in the kernel at every hot-plug.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testhosts.guests import block_info, read_pattern
from tests.nested.conftest import aa_status, qemu_pid, secmodels
from tests.support.sharedio import writer_shares_with_reader
from tests.support.volumes import local_volume

pytestmark = pytest.mark.lsm_apparmor

PROFILES = Path("/etc/apparmor.d/libvirt")


def profile_name(dom) -> str:
    return f"libvirt-{dom.UUIDString()}"


def files_rules(dom) -> str:
    """The per-guest rules libvirt keeps for ``dom`` (its disks among them)."""
    return (PROFILES / f"{profile_name(dom)}.files").read_text()


def rule_for(rules: str, path: str) -> str | None:
    """The permissions of the rule for exactly ``path`` (e.g. ``rwk``), None without one."""
    found = re.search(rf'^\s*"{re.escape(path)}"\s+([a-z]+),\s*$', rules, re.MULTILINE)
    return found.group(1) if found else None


def confinement(pid: int) -> str:
    """``/proc/PID/attr/current``: ``PROFILE (MODE)`` under AppArmor."""
    return Path(f"/proc/{pid}/attr/current").read_text().strip().rstrip("\0")


def test_apparmor_enforced_and_libvirt_uses_it(system_conn) -> None:
    assert Path("/sys/module/apparmor/parameters/enabled").read_text().strip() == "Y"
    assert "apparmor" in Path("/sys/kernel/security/lsm").read_text().split(",")
    models = secmodels(system_conn)
    assert models and models[0] == "apparmor", models
    status = aa_status()
    assert status["profiles"].get("libvirtd") == "enforce", status["profiles"].get("libvirtd")


def test_multiattach_loop_device_in_both_profiles(guests, volume_driver, loop_device,
                                                  audit_window) -> None:
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    alias = f"ua-{vid}"
    dev = loop_device.device

    # Before: neither guest may open the device.
    assert rule_for(files_rules(a), dev) is None and rule_for(files_rules(b), dev) is None

    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    assert not block_info(a, alias).ro and block_info(b, alias).ro

    # The volume is in both guests' profiles (a hot-plugged disk gets "rwk" even read-only).
    for dom in (a, b):
        perms = rule_for(files_rules(dom), dev)
        assert perms is not None and "r" in perms, (dom.name(), files_rules(dom))
    assert "w" in rule_for(files_rules(a), dev)

    # Each QEMU runs confined by its own profile, in enforce mode, as aa-status sees it too.
    status = aa_status()
    confined = {int(p["pid"]): p for procs in status.get("processes", {}).values()
                for p in procs}
    for dom in (a, b):
        pid = qemu_pid(dom)
        assert confinement(pid) == f"{profile_name(dom)} (enforce)", confinement(pid)
        assert status["profiles"].get(profile_name(dom)) == "enforce"
        assert confined.get(pid, {}).get("profile") == profile_name(dom), confined.get(pid)
        assert confined[pid]["status"] == "enforce"

    pattern, offset = writer_shares_with_reader(a, b, alias)

    # Detach from A: out of A's profile only; B keeps reading.
    volume_driver.detach_volume(a.name(), vid)
    assert rule_for(files_rules(a), dev) is None, files_rules(a)
    assert rule_for(files_rules(b), dev) is not None, files_rules(b)
    assert read_pattern(b, alias, pattern, offset=offset)

    volume_driver.detach_volume(b.name(), vid)
    assert rule_for(files_rules(b), dev) is None, files_rules(b)
    # No denial of a guest's QEMU (its libvirt-UUID profile) while this ran. virt-aa-helper's own
    # profile denies it reading /dev/loopN (harmless, HOST.md): only the guests' count.
    records = audit_window.records()
    denied = [r.line for r in records
              if 'apparmor="DENIED"' in r.line
              and any(f'profile="{profile_name(d)}"' in r.line for d in (a, b))]
    assert denied == [], "\n".join(denied)
    # The window does see AppArmor's records: every hot-plug replaced A's profile in the kernel.
    assert any('operation="profile_replace"' in r.line and f'name="{profile_name(a)}"' in r.line
               for r in records), "no profile_replace of A's profile in the audit window"
