"""Doctor's kernel-initiator checks on this machine's kernel (issue #31).

This host's kernel has no iSCSI, NVMe-oF or device-mapper multipath (and cannot load modules:
no /lib/modules for it), so doctor must not say OK for kernel iSCSI or NVMe-oF here. Whether the
kernel has them is read independently of doctor's probes (the module directory in /sys and the
running kernel's module tree); when a host does have them, the same test checks the other answer.
The nested host's test (tests/nested/test_kernel_doctor.py) checks the OK answers on a kernel that
has everything.
"""

from __future__ import annotations

import os
from pathlib import Path

from virtdriver.driver import LibvirtVolumeDriver
from virtdriver.ops.doctor.initiators import initiator_checks
from virtdriver.ops.doctor.storage import protocol_checks


def kernel_has(module: str) -> bool:
    """Loaded, or anywhere in the running kernel's module tree (the oracle, not doctor's probe)."""
    if Path("/sys/module", module).is_dir():
        return True
    tree = Path("/lib/modules", os.uname().release)
    names = {f"{module}.ko", f"{module.replace('_', '-')}.ko"}
    return tree.is_dir() and any(p.name.split(".ko")[0] + ".ko" in names
                                 for p in tree.rglob("*.ko*"))


def by_name(checks) -> dict:
    return {c.name: c for c in checks}


def test_doctor_says_what_this_kernel_lacks(tmp_path: Path) -> None:
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    facts: dict = {}
    checks = by_name(initiator_checks(driver, facts))
    modules = facts["initiators"]["modules"]
    for module in ("iscsi_tcp", "nvme_tcp", "dm_multipath"):
        assert (modules[module] != "missing") == kernel_has(module), (module, modules)
        assert f"{module} {modules[module]}" in checks["kernel modules"].detail
    lacking = [m for m in modules if not kernel_has(m)]
    assert (checks["kernel modules"].status == "warn") == bool(lacking)
    for module in lacking:
        assert module in checks["kernel modules"].detail.split(": ", 1)[1]

    protocols = by_name(protocol_checks({}, frozenset()))
    if not kernel_has("iscsi_tcp"):
        assert "host: no" in protocols["iscsi"].detail
        assert "no iscsi_tcp module in this kernel" in protocols["iscsi"].detail
        # only QEMU's own initiator could attach, and it is not asked for: not OK
        assert protocols["iscsi"].status == "warn", protocols["iscsi"]
    if not kernel_has("nvme_tcp"):
        assert protocols["nvmeof"].status == "warn", protocols["nvmeof"]
        assert "no nvme_tcp module in this kernel" in protocols["nvmeof"].detail
    # with QEMU's own initiator asked for, iSCSI attaches can work (QEMU has its iscsi driver)
    native = by_name(protocol_checks({}, frozenset({"--native-iscsi"})))["iscsi"]
    assert native.status == ("ok" if "QEMU: yes" in native.detail else "warn"), native


def test_doctor_multipath_answers_follow_the_options(tmp_path: Path) -> None:
    running = any((p / "comm").read_text().strip() == "multipathd"
                  for p in Path("/proc").iterdir() if p.name.isdigit() and (p / "comm").exists())
    dm = kernel_has("dm_multipath")
    plain = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "a")
    check = by_name(initiator_checks(plain, {}))["multipathd"]
    assert check.status == "ok" and "virtdriver will not use it" in check.detail
    asked = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "b", use_multipath=True)
    check = by_name(initiator_checks(asked, {}))["multipathd"]
    if running and dm:
        assert check.status == "ok" and "multipath device" in check.detail
    else:
        assert check.status == "warn" and "falls back to one path" in check.detail
    enforced = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "c",
                                   use_multipath=True, enforce_multipath=True)
    check = by_name(initiator_checks(enforced, {}))["multipathd"]
    assert check.status == ("ok" if running and dm else "fail"), check
