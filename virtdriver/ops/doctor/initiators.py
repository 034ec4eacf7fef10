"""Doctor's look at the host's kernel initiators: iscsid, the names the storage service is told,
multipathd, the kernel modules, os-brick's version.

Each answer is what an attach through the kernel would meet: an ``ok`` only where it can work.
Read-only: nothing is loaded or started (iscsid reachable through systemd's socket counts as
running, as iscsiadm starts it; a module the running kernel can load counts as there).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from virtdriver.driver.options import host_initiator_name
from virtdriver.ops.doctor.verdict import Check
from virtdriver.volume import probes

if TYPE_CHECKING:
    from virtdriver.driver import LibvirtVolumeDriver

AREA = "initiators"
HOST_NQN_FILE = Path("/etc/nvme/hostnqn")
MODULES = ("iscsi_tcp", "nvme_tcp", "dm_multipath")


def host_nqn(path: Path = HOST_NQN_FILE) -> str | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def initiator_checks(driver: LibvirtVolumeDriver, facts: dict[str, Any]) -> list[Check]:
    iscsid = probes.iscsid_state()
    iqn = host_initiator_name()
    nqn = host_nqn()
    mpathd = probes.running("multipathd")
    modules = {name: probes.module_state(name) for name in MODULES}
    brick = probes.os_brick_version()
    use = driver.options.use_multipath
    facts["initiators"] = {"iscsid": iscsid, "initiator_name": iqn, "host_nqn": nqn,
                           "multipathd": mpathd is not None, "use_multipath": use,
                           "enforce_multipath": driver.options.enforce_multipath,
                           "modules": modules, "os_brick": brick}
    checks = [_iscsid(iscsid, iqn), _nqn(nqn), _multipathd(mpathd, use, modules["dm_multipath"],
                                                            driver.options.enforce_multipath)]
    shown = ", ".join(f"{name} {state}" for name, state in modules.items())
    missing = [n for n, s in modules.items() if s == "missing"]
    checks.append(Check(AREA, "kernel modules", "warn" if missing else "ok",
                        shown + (f": this kernel cannot attach over {', '.join(missing)}"
                                 if missing else "")))
    nvme_ok, _ = probes.nvme_fabrics()
    floor = ".".join(map(str, probes.MIN_OS_BRICK_NVMEOF))
    if brick is None:
        checks.append(Check(AREA, "os-brick", "fail", "os-brick is not installed: nothing "
                            "attaches through the host"))
    else:
        old = probes.version_tuple(brick) < probes.MIN_OS_BRICK_NVMEOF
        checks.append(Check(AREA, "os-brick", "warn" if old else "ok",
                            f"os-brick {brick}" + (
                                f": NVMe-oF needs {floor} or later (older connectors cannot "
                                "match the kernel's controller address and leave the attach "
                                "failing)" if old else f" (NVMe-oF needs {floor} or later)")))
    facts["initiators"]["nvmeof_attach_possible"] = nvme_ok
    return checks


def _iscsid(state: str, iqn: str | None) -> Check:
    name = f"initiator name {iqn}" if iqn else "no initiator name (/etc/iscsi/initiatorname.iscsi)"
    how = {"running": "iscsid running", "socket": "iscsid socket-activated (systemd starts it)",
           "stopped": "iscsid not running"}[state]
    ok = state != "stopped" and iqn is not None
    detail = f"{how}, {name}"
    if not ok:
        detail += ": kernel iSCSI attaches cannot work"
    return Check(AREA, "iscsid", "ok" if ok else "warn", detail)


def _nqn(nqn: str | None) -> Check:
    if nqn:
        return Check(AREA, "host nqn", "ok", f"{nqn} ({HOST_NQN_FILE})")
    return Check(AREA, "host nqn", "warn", f"no {HOST_NQN_FILE}: os-brick makes one up, so the "
                 "storage service may export NVMe-oF namespaces to a name that changes")


def _multipathd(pid: int | None, use: bool, dm: str, enforce: bool) -> Check:
    state = f"multipathd running (pid {pid})" if pid else "multipathd not running"
    if use and pid and dm != "missing":
        return Check(AREA, "multipathd", "ok", f"{state}, dm_multipath {dm}: virtdriver "
                     "connects over every path and gives guests the multipath device")
    if use:
        effect = ("attaches fail (enforce_multipath)" if enforce else
                  "virtdriver falls back to one path (os-brick's single-path device)")
        return Check(AREA, "multipathd", "fail" if enforce else "warn",
                     f"{state}, dm_multipath {dm}, use_multipath on: {effect}")
    return Check(AREA, "multipathd", "ok",
                 f"{state}; virtdriver will not use it (use_multipath off: one path, "
                 "--multipath turns it on)")
