"""``virtdriver doctor``: can this host attach volumes, and can it share them safely?

:func:`diagnose` reads the running libvirt and QEMU, the kernel and the filesystem and returns a
:class:`DoctorReport`: one :class:`Check` per question, each ``ok``, ``warn`` or ``fail`` with a
one-line explanation. A ``fail`` means multiattach cannot work on this host; ``warn`` means
something works less well than it could (no KVM, no initiator for a protocol, ...).

Nothing is changed on the host, except that os-brick is set up (its lock directory created)
when the connector properties are read.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from virtdriver.errors import VirtDriverError
from virtdriver.policy import VIRTUAL_IMAGE_CONTEXT

if TYPE_CHECKING:
    from virtdriver.driver import LibvirtVolumeDriver

Status = Literal["ok", "warn", "fail"]
STATUSES: Final = ("ok", "warn", "fail")

KVM_DEVICE = Path("/dev/kvm")
SELINUX_ENFORCE = Path("/sys/fs/selinux/enforce")
PROC_FILESYSTEMS = Path("/proc/filesystems")
SYS = Path("/sys")


@dataclasses.dataclass(frozen=True)
class Check:
    """One answered question: ``area`` and ``name`` say what, ``detail`` says why in one line."""

    area: str
    name: str
    status: Status
    detail: str


@dataclasses.dataclass
class DoctorReport:
    uri: str
    checks: list[Check]
    facts: dict[str, Any]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def multiattach_ok(self) -> bool:
        """True when nothing stops multiattach from working on this host."""
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "multiattach": self.multiattach_ok,
                "problems": [f"{c.name}: {c.detail}" for c in self.failures],
                "checks": [dataclasses.asdict(c) for c in self.checks],
                "facts": self.facts}


def diagnose(driver: LibvirtVolumeDriver) -> DoctorReport:
    """Every check, in the order an operator reads them (the hypervisor first)."""
    facts: dict[str, Any] = {}
    checks: list[Check] = []
    conn = _open(driver, checks)
    if conn is not None:
        checks += hypervisor_checks(driver, facts)
        checks.append(kvm_check(conn, facts))
        checks.append(security_driver_check(conn, facts))
    checks += selinux_checks(facts)
    checks += directory_checks(driver, facts)  # before os-brick creates the lock directory
    checks.append(connector_check(driver, facts))
    checks += protocol_checks(facts)
    return DoctorReport(driver.uri, checks, facts)


# ---- libvirt and QEMU ---------------------------------------------------------------------------


def _open(driver: LibvirtVolumeDriver, checks: list[Check]) -> Any:
    try:
        return driver.connection.get()
    except VirtDriverError as exc:
        checks.append(Check("hypervisor", "libvirt", "fail",
                            f"{exc}; nothing can be attached (is libvirtd running?)"))
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

    device = _openable(KVM_DEVICE)
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


def _openable(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


# ---- labels -------------------------------------------------------------------------------------


def security_models(capabilities_xml: str) -> list[str]:
    """The ``<secmodel><model>`` names of libvirt's host capabilities, in libvirt's order."""
    from virtdriver.config.model import parse_xml

    root = parse_xml(capabilities_xml)
    return [m.text.strip() for m in root.iterfind("host/secmodel/model") if m.text]


def security_driver_check(conn: Any, facts: dict[str, Any]) -> Check:
    import libvirt

    try:
        models = security_models(conn.getCapabilities())
    except (libvirt.libvirtError, VirtDriverError) as exc:
        return Check("labels", "security drivers", "warn", f"cannot read capabilities: {exc}")
    facts["security_drivers"] = models
    listed = ", ".join(models) or "none reported"
    mac = [m for m in models if m in ("selinux", "apparmor")]
    if mac:
        return Check("labels", "security drivers", "ok",
                     f"{listed}: shareable disks get the shared image label, read-only disks "
                     "the read-only one")
    if "dac" in models:
        return Check("labels", "security drivers", "warn",
                     f"{listed}: no SELinux/AppArmor confinement; only DAC ownership is managed")
    return Check("labels", "security drivers", "warn",
                 f"{listed}: guests are not confined and disks are not labelled")


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
    contexts = image_contexts()
    facts["selinux"]["image_contexts"] = contexts
    if contexts:
        checks.append(Check("labels", "image contexts", "ok",
                            f"shared: {contexts.get('shared', '?')}, "
                            f"read-only: {contexts.get('readonly', '?')} "
                            f"({VIRTUAL_IMAGE_CONTEXT})"))
    else:
        checks.append(Check("labels", "image contexts", "warn",
                            f"{VIRTUAL_IMAGE_CONTEXT} missing: label_policy 'explicit' needs "
                            "--shared-image-label"))
    return checks


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


def image_contexts(context_file: Path = VIRTUAL_IMAGE_CONTEXT) -> dict[str, str]:
    """The shared (first line) and read-only (second line) image contexts of the policy."""
    try:
        lines = [ln.strip() for ln in context_file.read_text().splitlines() if ln.strip()]
    except OSError:
        return {}
    return dict(zip(("shared", "readonly"), lines))


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
                            f"{driver.state_dir} {_says(state)}: attach cannot take its per-volume "
                            "lock (use --state-dir)"))
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


# ---- os-brick and the storage protocols ---------------------------------------------------------


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
            {"initiator": "iSCSI", "nqn": "NVMe-oF"}[k] for k in missing) + " cannot be exported " \
            "to this host)"
    return Check("storage", "connector", "ok", detail)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """A storage protocol: how the host kernel could connect it, and QEMU's own driver if any."""

    name: str
    kernel: Callable[[], tuple[bool, str]] | None
    qemu_driver: str | None = None
    qemu_option: str = ""  # the host option that makes QEMU connect it (if not the default)


def _binary(name: str) -> bool:
    return shutil.which(name) is not None or Path("/sbin", name).exists()


def _module(name: str) -> bool:
    """A kernel module loaded or built in (built-ins with parameters appear in /sys/module)."""
    return (SYS / "module" / name).is_dir()


def _filesystem(name: str) -> bool:
    try:
        return any(line.split()[-1] == name
                   for line in PROC_FILESYSTEMS.read_text().splitlines() if line.split())
    except OSError:
        return False


def _kernel_iscsi() -> tuple[bool, str]:
    missing = [] if _binary("iscsiadm") else ["no iscsiadm"]
    if not ((SYS / "class" / "iscsi_transport").is_dir() or _module("iscsi_tcp")):
        missing.append("no iscsi_tcp")
    return not missing, ", ".join(missing) or "iscsiadm and iscsi_tcp"


def _kernel_fc() -> tuple[bool, str]:
    hosts = list((SYS / "class" / "fc_host").glob("host*"))
    return bool(hosts), f"{len(hosts)} FC HBA(s)" if hosts else "no FC HBA"


def _kernel_nvmeof() -> tuple[bool, str]:
    missing = ([] if Path("/dev/nvme-fabrics").exists() else ["no /dev/nvme-fabrics"]) + (
        [] if _binary("nvme") else ["no nvme CLI"])
    return not missing, ", ".join(missing) or "/dev/nvme-fabrics and nvme CLI"


def _kernel_rbd() -> tuple[bool, str]:
    ok = (SYS / "bus" / "rbd").is_dir()
    return ok, "/sys/bus/rbd" if ok else "no /sys/bus/rbd"


def _kernel_nfs() -> tuple[bool, str]:
    missing = ([] if _filesystem("nfs") or _filesystem("nfs4") else ["no nfs filesystem"]) + (
        [] if _binary("mount.nfs") else ["no mount.nfs"])
    return not missing, ", ".join(missing) or "nfs filesystem and mount.nfs"


def _kernel_fuse_gluster() -> tuple[bool, str]:
    missing = ([] if Path("/dev/fuse").exists() else ["no /dev/fuse"]) + (
        [] if _binary("mount.glusterfs") else ["no mount.glusterfs"])
    return not missing, ", ".join(missing) or "FUSE and mount.glusterfs"


def _kernel_local() -> tuple[bool, str]:
    return True, "any host block device: loop, LVM, ..."


PROTOCOLS: Final = (
    Protocol("iscsi", _kernel_iscsi, "iscsi", "--native-iscsi"),
    Protocol("fibre_channel", _kernel_fc),
    Protocol("nvmeof", _kernel_nvmeof),
    Protocol("rbd", None, "rbd"),
    Protocol("nfs", _kernel_nfs),
    Protocol("glusterfs", _kernel_fuse_gluster, "gluster", "--native-glusterfs"),
    Protocol("nbd", None, "nbd"),
    Protocol("local", _kernel_local),
)


def qemu_block_drivers() -> set[str]:
    """The block drivers ``qemu-img`` lists (qemu-block-extra adds iscsi, rbd, gluster, ...)."""
    qemu_img = shutil.which("qemu-img")
    if qemu_img is None:
        return set()
    for line in _run([qemu_img, "--help"]).splitlines():
        if line.startswith("Supported formats:"):
            return set(line.split(":", 1)[1].split())
    return set()


def protocol_checks(facts: dict[str, Any],
                    protocols: Iterable[Protocol] = PROTOCOLS) -> list[Check]:
    """Which connectors can produce a disk on this host, through the kernel or through QEMU."""
    drivers = qemu_block_drivers()
    found: dict[str, dict[str, Any]] = {}
    checks = []
    for proto in protocols:
        kernel_ok, kernel_why = proto.kernel() if proto.kernel else (False, "")
        qemu_ok = proto.qemu_driver is not None and proto.qemu_driver in drivers
        found[proto.name] = {"kernel": kernel_ok if proto.kernel else None,
                             "qemu": qemu_ok if proto.qemu_driver else None}
        parts = []
        if proto.kernel:
            parts.append(f"host: {'yes' if kernel_ok else 'no'} ({kernel_why})")
        if proto.qemu_driver:
            how = f", with {proto.qemu_option}" if proto.qemu_option and qemu_ok else ""
            parts.append(f"QEMU: {'yes' if qemu_ok else 'no'} ({proto.qemu_driver} driver"
                         f"{'' if qemu_ok else ' missing: qemu-block-extra'}{how})")
        status: Status = "ok" if kernel_ok or qemu_ok else "warn"
        checks.append(Check("protocols", proto.name, status, "; ".join(parts)))
    facts["protocols"] = found
    facts["qemu_block_drivers"] = sorted(drivers)
    return checks


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20,
                              check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


# ---- output -------------------------------------------------------------------------------------


def format_report(report: DoctorReport) -> str:
    """An aligned table of every check, then the verdict."""
    rows = [(c.area, c.name, c.status.upper(), c.detail) for c in report.checks]
    header = ("AREA", "CHECK", "STATUS", "DETAIL")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  " + header[3],
             "  ".join("-" * w for w in widths) + "  " + "-" * len(header[3])]
    previous = None
    for row in rows:
        area = row[0] if row[0] != previous else ""
        previous = row[0]
        lines.append("  ".join(v.ljust(w) for v, w in zip((area, *row[1:3]), widths))
                     + "  " + row[3])
    lines.append("")
    if report.multiattach_ok:
        warns = sum(c.status == "warn" for c in report.checks)
        lines.append("Multiattach works on this host" +
                     (f" ({warns} warning{'s' if warns != 1 else ''})." if warns else "."))
    else:
        lines.append("Multiattach cannot work on this host:")
        lines += [f"  - {c.name}: {c.detail}" for c in report.failures]
    return "\n".join(lines)
