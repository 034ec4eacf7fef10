"""Doctor's probes of libvirt, QEMU, labels, directories and os-brick: each returns checks.

Nothing is changed on the host, except that os-brick is set up (its lock directory created)
when the connector properties are read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from virtdriver.errors import VirtDriverError
from virtdriver.ops.doctor.verdict import Check
from virtdriver.selinux import boolean, image_contexts, policy_name, virtual_image_context_path

if TYPE_CHECKING:
    from virtdriver.driver import LibvirtVolumeDriver

KVM_DEVICE = Path("/dev/kvm")
SELINUX_ENFORCE = Path("/sys/fs/selinux/enforce")


# ---- libvirt and QEMU ---------------------------------------------------------------------------


def open_libvirt(driver: LibvirtVolumeDriver, checks: list[Check]) -> Any:
    try:
        return driver.connection.get()
    except VirtDriverError as exc:
        checks.append(Check("hypervisor", "libvirt", "fail", f"{exc}; nothing can be attached "
                            "(is libvirtd, or virtqemud, running?)"))
        return None


def hypervisor_checks(driver: LibvirtVolumeDriver, facts: dict[str, Any]) -> list[Check]:
    """libvirt's and QEMU's versions and whether a shareable disk gets ``share-rw=on``."""
    from virtdriver.hypervisor.capabilities import (
        MIN_LIBVIRT_SHARE_RW,
        MIN_QEMU_SHARE_RW,
        version_string,
    )

    try:
        caps = driver.capabilities()
    except VirtDriverError as exc:
        return [Check("hypervisor", "libvirt", "fail", f"cannot read capabilities: {exc}")]
    facts["capabilities"] = caps
    libvirt_min, qemu_min = version_string(MIN_LIBVIRT_SHARE_RW), version_string(MIN_QEMU_SHARE_RW)
    libvirt_ok = _at_least(caps["libvirt_version"], libvirt_min)
    qemu_ok = _at_least(caps["qemu_version"], qemu_min)
    checks = [
        Check("hypervisor", "libvirt", "ok" if libvirt_ok else "fail",
              f"libvirt {caps['libvirt_version']} at {driver.uri}" + (
                  "" if libvirt_ok else f"; {libvirt_min} or later passes share-rw=on to QEMU")),
        Check("hypervisor", "qemu", "ok" if qemu_ok else "fail",
              f"QEMU {caps['qemu_version']} ({caps['emulator'] or 'emulator unknown'})" + (
                  "" if qemu_ok else f"; {qemu_min} or later has share-rw")),
    ]
    if caps["supports_multiattach"]:
        checks.append(Check("hypervisor", "multiattach", "ok",
                            "shareable disks are opened with share-rw=on: one volume can be "
                            "attached to several guests"))
    else:
        why = ("this QEMU's scsi-hd has no share-rw property" if not caps["qemu_share_rw"]
               else "libvirt or QEMU is too old for share-rw")
        checks.append(Check("hypervisor", "multiattach", "fail",
                            f"{why}: a second guest cannot open a volume another guest holds"))
    return checks


def _at_least(version: str, minimum: str) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split("."))

    return parts(version) >= parts(minimum)


def kvm_check(conn: Any, facts: dict[str, Any]) -> Check:
    """``/dev/kvm`` opens, and libvirt's domain capabilities offer ``type='kvm'``."""
    import libvirt

    from virtdriver.hypervisor.capabilities import kvm_available

    device = kvm_available()
    try:
        domcaps = conn.getDomainCapabilities(None, None, None, "kvm", 0)
        offered = "<domain>kvm</domain>" in domcaps
    except libvirt.libvirtError:
        offered = False
    facts["kvm"] = {"device_openable": device, "domain_capabilities": offered}
    if device and offered:
        return Check("hypervisor", "kvm", "ok",
                     f"{KVM_DEVICE} opens and libvirt offers <domain type='kvm'>")
    missing = ([] if device else [f"{KVM_DEVICE} cannot be opened"]) + (
        [] if offered else ["libvirt does not offer type 'kvm'"])
    return Check("hypervisor", "kvm", "warn",
                 f"{'; '.join(missing)}: guests run under TCG emulation (hot-plug still works)")


# ---- labels -------------------------------------------------------------------------------------


def security_models(capabilities_xml: str) -> list[str]:
    """The ``<secmodel><model>`` names of libvirt's host capabilities, in libvirt's order."""
    from virtdriver.hypervisor.connection import security_models as models

    return list(models(capabilities_xml))


def security_driver_check(conn: Any, facts: dict[str, Any]) -> Check:
    import libvirt

    try:
        models = security_models(conn.getCapabilities())
    except (libvirt.libvirtError, VirtDriverError) as exc:
        return Check("labels", "security drivers", "warn", f"cannot read capabilities: {exc}")
    facts["security_drivers"] = models
    listed = ", ".join(models) or "none reported"
    if "selinux" in models:
        return Check("labels", "security drivers", "ok",
                     f"{listed}: libvirt gives shareable disks the shared image context and "
                     "read-only disks the read-only one, and never restores either on detach")
    if "apparmor" in models:
        return Check("labels", "security drivers", "ok",
                     f"{listed}: each guest's QEMU is confined by its own profile; attaching a "
                     "disk adds it to that guest's profile and detaching removes it, other "
                     "guests' profiles are untouched (label_policy 'explicit' is refused: no "
                     "SELinux)")
    if "dac" in models:
        return Check("labels", "security drivers", "warn",
                     f"{listed}: no SELinux/AppArmor confinement; libvirt only sets the owner of "
                     "disks to QEMU's user (label_policy 'explicit' is refused: no SELinux)")
    return Check("labels", "security drivers", "warn",
                 f"{listed}: guests are not confined and disks are neither labelled nor "
                 "re-owned (label_policy 'explicit' is refused: no SELinux)")


def selinux_checks(facts: dict[str, Any]) -> list[Check]:
    """SELinux's mode, and the image contexts libvirt gives shared and read-only disks."""
    mode = selinux_mode()
    facts["selinux"] = {"mode": mode}
    if mode == "disabled":
        return [Check("labels", "selinux", "ok",
                      "not enabled on this host: label_policy 'auto' needs nothing more")]
    checks = [Check("labels", "selinux", "ok" if mode == "enforcing" else "warn",
                    f"{mode}" + ("" if mode == "enforcing" else
                                 ": denials are logged, not enforced"))]
    path = virtual_image_context_path()
    policy = policy_name()
    contexts = image_contexts(path)
    facts["selinux"].update(policy=policy, image_contexts=contexts,
                            image_context_file=str(path))
    if contexts:
        checks.append(Check("labels", "image contexts", "ok",
                            f"policy {policy}: shared {contexts.get('shared', '?')}, "
                            f"read-only {contexts.get('readonly', '?')} ({path})"))
    else:
        checks.append(Check("labels", "image contexts", "warn",
                            f"policy {policy}: {path} missing: label_policy 'explicit' needs "
                            "--shared-image-label"))
    found = boolean_check(facts)
    return checks + ([found] if found else [])


def boolean_check(facts: dict[str, Any], read: Any = boolean) -> Check | None:
    """The SELinux booleans the registered protocols declare (``selinux_booleans``): each one's
    state, and what an operator does when one is off. virtdriver never sets a boolean: it is
    host policy, and the operator's decision."""
    from virtdriver.volume.registry import get_driver, known_types

    needs: dict[str, list[str]] = {}
    for volume_type in known_types():
        try:
            declared = get_driver(volume_type).selinux_booleans
        except (VirtDriverError, ImportError):
            continue  # protocol_checks reports a driver that does not load
        for name in declared:
            needs.setdefault(name, []).append(volume_type)
    if not needs:
        return None
    states = {name: read(name) for name in sorted(needs)}
    facts.setdefault("selinux", {})["booleans"] = states
    said = {True: "on", False: "off", None: "not in this policy"}
    listed = ", ".join(f"{name} {said[on]} ({', '.join(needs[name])})"
                       for name, on in states.items())
    off = [name for name, on in states.items() if on is False]
    if not off:
        return Check("labels", "selinux booleans", "ok", listed)
    fix = "; ".join(f"setsebool -P {name} on" for name in off)
    types = ", ".join(t for name in off for t in needs[name])
    return Check("labels", "selinux booleans", "warn",
                 f"{listed}: guests cannot open {types} volumes (their files keep the share's "
                 f"own label, which libvirt cannot change, and the policy denies it to the "
                 f"guests' QEMU); if this host attaches them: {fix}")


def selinux_mode(enforce_file: Path = SELINUX_ENFORCE) -> str:
    """``enforcing``, ``permissive`` or ``disabled`` (from sysfs, else ``getenforce``)."""
    try:
        return "enforcing" if enforce_file.read_text().strip() == "1" else "permissive"
    except OSError:
        pass
    getenforce = shutil.which("getenforce")
    if getenforce:
        out = _run([getenforce]).strip().lower()
        if out in ("enforcing", "permissive"):
            return out
    return "disabled"


# ---- directories --------------------------------------------------------------------------------


def directory_checks(driver: LibvirtVolumeDriver, facts: dict[str, Any]) -> list[Check]:
    """The lock and record directory (needed by every attach) and the mount base (shares)."""
    state = _directory_state(driver.state_dir)
    mounts = _directory_state(Path(driver.mount_base))
    facts["directories"] = {"state_dir": str(driver.state_dir), "state_dir_state": state,
                            "mount_base": driver.mount_base, "mount_base_state": mounts}
    checks = []
    if state in ("writable", "creatable"):
        checks.append(Check("host", "state dir", "ok",
                            f"{driver.state_dir} {_says(state)}: per-volume locks and "
                            "host-connection records"))
    else:
        checks.append(Check("host", "state dir", "fail",
                            f"{driver.state_dir} {_says(state)}: attach cannot take its "
                            "per-volume lock (use --state-dir)"))
    checks.append(Check("host", "mount base", "warn" if mounts == "unusable" else "ok",
                        f"{driver.mount_base} {_says(mounts)}: where NFS/GlusterFS/... shares "
                        "are mounted"))
    return checks


def _directory_state(path: Path) -> str:
    """``writable``, ``creatable`` (missing, its nearest existing parent writable) or
    ``unusable``."""
    if path.is_dir():
        return "writable" if os.access(path, os.W_OK | os.X_OK) else "unusable"
    if path.exists():
        return "unusable"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return "creatable" if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK) else "unusable"


def _says(state: str) -> str:
    return {"writable": "is writable", "creatable": "will be created",
            "unusable": "is not writable"}[state]


def connector_check(driver: LibvirtVolumeDriver, facts: dict[str, Any]) -> Check:
    """os-brick's connector properties: what the storage service is told about this host."""
    try:  # os-brick's "Could not find the iSCSI Initiator File" is DEBUG, reported below
        props = driver.connector_properties()
    except VirtDriverError as exc:
        return Check("storage", "connector", "warn", str(exc))
    except OSError as exc:  # os-brick's lock directory lives in the state dir
        return Check("storage", "connector", "warn", f"cannot set up os-brick: {exc}")
    facts["connector_properties"] = props
    shown = [f"{k}={props[k]}" for k in ("host", "ip", "initiator", "nqn") if props.get(k)]
    missing = [k for k in ("initiator", "nqn") if not props.get(k)]
    detail = " ".join(shown)
    if missing:
        detail += f" (no {' or '.join(missing)}: " + ", ".join(
            {"initiator": "iSCSI", "nqn": "NVMe-oF"}[k] for k in missing) + (
            " cannot be exported to this host)")
    return Check("storage", "connector", "ok", detail)


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20,
                              check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
