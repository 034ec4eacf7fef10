"""Host connections that no record and no guest accounts for: found, and released on demand.

The kernel knows what is connected: iSCSI sessions (``/sys/class/iscsi_session``), NVMe-oF
controllers (``/sys/class/nvme-fabrics/ctl``), mapped RBD images (``/sys/bus/rbd/devices``) and
mounts (``/proc/self/mountinfo``, those in virtdriver's mount base only). One of them is
accounted for when a host-connection record names it (its target, subsystem, image, device or
mount point) or a guest's disk, running or defined, uses one of its devices or a file below it.
What is left is an orphan: a connection a crashed attach, a lost record or another tool left
behind, which holds target resources and host memory until reboot.

:func:`sweep` removes an orphan only when nothing on the host holds its devices: no guest, no
holder (device mapper, LVM, md), no mount, no process with the device open (for a mount: no mount
below it, no process with a file, working directory, root, program or mapped file below it). It
goes orphan by orphan: a release that fails all the same keeps that orphan, the others are still
swept, and :class:`~virtdriver.errors.OrphansNotReleased` then says each outcome. Mount points
are bytes: a name that is not UTF-8 is kept as ``os.fsdecode`` gives it and shown escaped. It runs
under the host-connections lock, which every virtdriver connect holds shared until its record is
written, so a connection being made is never taken for an orphan. A compute service that connects
volumes without virtdriver's records (nova's own volume drivers) does not take that lock: sweep
while it attaches nothing there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import libvirt

from virtdriver.errors import (
    HostConnectFailed,
    InvalidRenderOption,
    OrphansNotReleased,
    StateError,
    show,
)
from virtdriver.hypervisor.locks import connections_lock
from virtdriver.hypervisor.mounts import MountEntry, read_mountinfo, shown_path

if TYPE_CHECKING:
    from virtdriver.hypervisor.domains import DomainState
    from virtdriver.hypervisor.hostconn import HostConnections, HostRecord

SYS: Final = Path("/sys")
KINDS: Final = ("iscsi", "nvmeof", "rbd", "mount")


@dataclass(frozen=True)
class HostConnection:
    """One connection the kernel has: its kind, what it reaches, and the devices it gives."""

    kind: str  # KINDS
    name: str  # the target IQN, the subsystem NQN, pool/image, the mount point
    handle: str  # what releases it: session number, controller, rbd id, mount point
    devices: tuple[str, ...] = ()  # /dev paths (for a mount: the mount point)

    def describe(self) -> str:
        where = f" ({', '.join(self.devices)})" if self.devices and self.kind != "mount" else ""
        return f"{self.kind} {shown_path(self.name)}{where}"


def check_mount_base(mount_base: str) -> str:
    """The mount base to look for orphans in: an absolute path, as attach takes it (a relative
    one would match no mount point and hide every orphan)."""
    if not os.path.isabs(mount_base):
        raise InvalidRenderOption(f"mount_base: {show(mount_base)} is not absolute: give the "
                                  "absolute directory shares are mounted in (--mount-base)")
    return mount_base


def host_connections(mount_base: str) -> list[HostConnection]:
    """Every iSCSI session, NVMe-oF controller, mapped RBD image and mount in ``mount_base``."""
    return [*_iscsi(), *_nvmeof(), *_rbd(), *_mounts(mount_base)]


def _read(path: Path) -> str:
    try:
        return os.fsdecode(path.read_bytes().strip())  # any bytes: a name is kept, not refused
    except OSError:
        return ""


def _iscsi() -> list[HostConnection]:
    found = []
    for session in sorted((SYS / "class" / "iscsi_session").glob("session*")):
        blocks = sorted(p.name for p in session.glob("device/target*/*/block/*"))
        found.append(HostConnection("iscsi", _read(session / "targetname"),
                                    session.name[len("session"):],
                                    tuple(f"/dev/{b}" for b in blocks)))
    return found


def _nvmeof() -> list[HostConnection]:
    found = []
    for ctl in sorted((SYS / "class" / "nvme-fabrics" / "ctl").glob("nvme*")):
        names = {p.name for p in (SYS / "class" / "nvme" / ctl.name).glob("nvme*n*")}
        blocks = sorted({_namespace_device(n) for n in names})
        found.append(HostConnection("nvmeof", _read(ctl / "subsysnqn"), ctl.name,
                                    tuple(f"/dev/{b}" for b in blocks)))
    return found


def _namespace_device(name: str) -> str:
    """``nvme0c1n1`` (a path of a multipath namespace) is the block device ``nvme0n1``."""
    head, sep, rest = name.partition("c")
    if sep and "n" in rest:
        return f"{head}n{rest.partition('n')[2]}"
    return name


def _rbd() -> list[HostConnection]:
    found = []
    for device in sorted((SYS / "bus" / "rbd" / "devices").glob("*")):
        name = f"{_read(device / 'pool')}/{_read(device / 'name')}"
        found.append(HostConnection("rbd", name, device.name, (f"/dev/rbd{device.name}",)))
    return found


def _mountinfo() -> list[MountEntry]:
    try:
        return read_mountinfo()
    except OSError:
        return []


def _mounts(mount_base: str) -> list[HostConnection]:
    base = os.path.normpath(mount_base)
    return [HostConnection("mount", e.mount_point, e.mount_point, (e.mount_point,))
            for e in _mountinfo() if os.path.dirname(e.mount_point) == base]


def _real(path: str) -> str:
    return os.path.realpath(path)


def _held_through(device: str) -> set[str]:
    """The device and what is built on it (device mapper, md): a guest may use either."""
    name = os.path.basename(_real(device))
    names, todo = {name}, [name]
    while todo:
        for holder in (SYS / "class" / "block" / todo.pop() / "holders").glob("*"):
            if holder.name not in names:
                names.add(holder.name)
                todo.append(holder.name)
    return {f"/dev/{n}" for n in names}


def orphans(connections: Iterable[HostConnection], records: Iterable[HostRecord],
            guest_sources: Iterable[str]) -> list[HostConnection]:
    """The connections no record (:class:`~virtdriver.hypervisor.hostconn.HostRecord`) and no
    guest disk source accounts for."""
    sources = {_real(s) for s in guest_sources}
    named, recorded_devices, recorded_mounts = set(), set(), set()
    for record in records:
        props = record.properties or {}
        for key in ("target_iqn", "target_nqn", "nqn", "subsysnqn", "name"):
            if isinstance(props.get(key), str):
                named.add(props[key])
        named.update(v for v in props.get("target_iqns") or [] if isinstance(v, str))
        for portal in props.get("portals") or []:  # NVMe-oF's newer shape names the NQN above
            if isinstance(portal, dict) and isinstance(portal.get("nqn"), str):
                named.add(portal["nqn"])
        path = (record.device_info or {}).get("path")
        if isinstance(path, str):
            recorded_devices.add(_real(path))
        if record.mount_point:
            recorded_mounts.add(os.path.normpath(record.mount_point))
    left = []
    for conn in connections:
        if conn.kind == "mount":
            point = os.path.normpath(conn.name)
            if point in recorded_mounts or any(s.startswith(point + os.sep) for s in sources):
                continue
        else:
            reach = {d for device in conn.devices for d in _held_through(device)}  # real names
            if conn.name in named or reach & (sources | recorded_devices):
                continue
        left.append(conn)
    return left


def busy(conn: HostConnection) -> str | None:
    """Why ``conn`` must stay although nothing accounts for it, or ``None``: a holder, a mount,
    a process with one of its devices open (for a mount: a mount below it, a process with a
    file, its working directory, root, program or a mapped file below it)."""
    if conn.kind == "mount":
        return _mount_busy(conn.name)
    for device in conn.devices:
        name = os.path.basename(_real(device))
        holders = [p.name for p in (SYS / "class" / "block" / name / "holders").glob("*")]
        if holders:
            return f"{device} is held by {', '.join(holders)}"
    mounted = _mounted_devices()
    for device in conn.devices:
        if _real(device) in mounted:
            return f"{device} is mounted"
    users = _openers({_real(d) for d in conn.devices})
    return f"its devices are open ({', '.join(users)})" if users else None


def _mount_busy(point: str) -> str | None:
    """What keeps the mount at ``point`` in use (umount would answer "target is busy")."""
    below = sorted({e.mount_point for e in _mountinfo()
                    if e.mount_point.startswith(point.rstrip("/") + "/")})
    if below:
        return f"a mount below it ({', '.join(shown_path(b) for b in below)})"
    reasons = []
    if users := _openers({point}, below=True):
        reasons.append(f"files below it are open ({', '.join(users)})")
    if users := _working_in(point):
        reasons.append(f"processes work in it ({', '.join(users)})")
    return "; ".join(reasons) or None


def _mounted_devices() -> set[str]:
    return {_real(e.source) for e in _mountinfo() if e.source.startswith("/dev/")}


def _inside(target: str, paths: set[str], below: bool) -> bool:
    return target in paths or (below and any(target.startswith(p.rstrip("/") + "/")
                                             for p in paths))


def _openers(paths: set[str], *, below: bool = False) -> list[str]:
    """``command (pid N)`` of every process with one of ``paths`` (or a file below) open."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            targets = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        except OSError:  # gone, or not ours to look at
            continue
        if any(_inside(t, paths, below) for t in targets):
            found.append(f"{_read(proc / 'comm')} (pid {proc.name})")
    return found


def _working_in(point: str) -> list[str]:
    """``command (pid N): how`` of every process whose working directory, root, program or a
    mapped file is at or below ``point`` (each keeps the mount busy, no descriptor open)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        how = [what for link, what in (("cwd", "working directory"), ("root", "root"),
                                       ("exe", "program"))
               if _inside(_link(proc / link), {point}, True)]
        if any(_inside(path, {point}, True) for path in _mapped(proc)):
            how.append("mapped file")
        if how:
            found.append(f"{_read(proc / 'comm')} (pid {proc.name}): {', '.join(how)}")
    return found


def _link(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # gone, a kernel thread, or not ours to look at
        return ""


def _mapped(proc: Path) -> set[str]:
    """The files a process has mapped (``/proc/PID/maps``' paths)."""
    try:
        lines = (proc / "maps").read_bytes().split(b"\n")
    except OSError:
        return set()
    return {os.fsdecode(f[5]) for line in lines
            if len(f := line.split(maxsplit=5)) == 6 and f[5].startswith(b"/")}


def _settle() -> None:
    """Let udev finish the events it has (a detach's, a login's): its workers open the devices
    they probe for a moment, which would read as a process holding them."""
    try:
        subprocess.run(["udevadm", "settle", "--timeout=30"], capture_output=True, check=False,
                       timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pass  # no udev here (a container): nothing to wait for


def release(conn: HostConnection) -> None:
    """Remove one orphan: log the session out, delete the controller, unmap, unmount."""
    if conn.kind == "iscsi":
        portal = _iscsi_portal(conn.handle)
        _run(["iscsiadm", "-m", "session", "-r", conn.handle, "-u"], conn)
        if portal:  # its node record too, or iscsid would log in again at its next start
            subprocess.run(["iscsiadm", "-m", "node", "-T", conn.name, "-p", portal, "-o",
                            "delete"], capture_output=True, check=False, timeout=60)
    elif conn.kind == "nvmeof":
        _write(SYS / "class" / "nvme" / conn.handle / "delete_controller", "1", conn)
    elif conn.kind == "rbd":
        _write(SYS / "bus" / "rbd" / "remove", conn.handle, conn)
    else:
        _run(["umount", conn.handle], conn)


def _iscsi_portal(session: str) -> str:
    """``address:port`` of a session's connection, as its node record is named."""
    for connection in (SYS / "class" / "iscsi_connection").glob(f"connection{session}:*"):
        address = _read(connection / "persistent_address") or _read(connection / "address")
        port = _read(connection / "persistent_port") or _read(connection / "port")
        if address and port:
            return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    return ""


def _run(command: list[str], conn: HostConnection) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="surrogateescape",
                              check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostConnectFailed(f"cannot release {conn.describe()}", str(exc)) from None
    if done.returncode != 0:
        said = [shown_path(line) for line in (done.stderr or done.stdout).strip().splitlines()]
        raise HostConnectFailed(f"cannot release {conn.describe()}",
                                said[-1] if said else f"{command[0]} exited with "
                                                      f"{done.returncode}")


def _write(path: Path, text: str, conn: HostConnection) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise HostConnectFailed(f"cannot release {conn.describe()}",
                                f"{path}: {exc.strerror or exc}") from None


def find_orphans(states: Iterable[DomainState], records: HostConnections, mount_base: str
                 ) -> tuple[list[HostConnection], list[Path]]:
    """The orphans on this host, and the damaged records that may account for some of them.

    ``states``: every domain as :func:`virtdriver.hypervisor.domains.host_state` reads it;
    ``records``: the host's :class:`~virtdriver.hypervisor.hostconn.HostConnections`.
    """
    recorded, damaged = records.scan()
    loaded = [r for vid in recorded if (r := _load(records, vid)) is not None]
    sources = [p for state in states for use in state.disks if use.disk.source is not None
               and (p := use.disk.source.dev or use.disk.source.file)]
    return orphans(host_connections(mount_base), loaded, sources), damaged


def _load(records: HostConnections, vid: str) -> HostRecord | None:
    try:
        return records.load(vid)
    except StateError:  # damaged since the scan: said by the caller's next look
        return None


def sweep(conn: libvirt.virConnect, state_dir: Path, mount_base: str, lock_timeout: float
          ) -> list[tuple[HostConnection, str | None]]:
    """Release every orphan nothing holds; each orphan with ``None`` (released) or why kept.

    Refused while a record is damaged: it may be the one that accounts for a connection. A
    release that fails (something :func:`busy` cannot see holds it) keeps that orphan and the
    sweep goes on; :class:`~virtdriver.errors.OrphansNotReleased` then says every outcome.
    """
    from virtdriver.hypervisor.domains import host_state
    from virtdriver.hypervisor.hostconn import HostConnections

    check_mount_base(mount_base)
    records = HostConnections(state_dir)
    with connections_lock(state_dir / "locks", sweeping=True, timeout=lock_timeout):
        _settle()
        found, damaged = find_orphans(host_state(conn), records, mount_base)
        if damaged:
            raise StateError(f"the host-connection record {damaged[0]} is damaged and may "
                             "account for a connection: repair or remove it before sweeping "
                             "orphans ('virtdriver audit' lists it)")
        outcome: list[tuple[HostConnection, str | None]] = []
        failed: list[str] = []
        for orphan in found:
            reason = busy(orphan)
            if reason is None:
                try:
                    release(orphan)
                except HostConnectFailed as exc:
                    reason = f"its release failed ({exc.libvirt_message or exc})"
                    failed.append(f"{orphan.describe()}: {exc.libvirt_message or exc}")
            outcome.append((orphan, reason))
    if failed:
        raise OrphansNotReleased(
            f"could not release {len(failed)} of {len(outcome)} orphaned host connection"
            f"{'s' if len(outcome) != 1 else ''} (the sweep went on with the others): "
            f"{'; '.join(failed)}", [(o.describe(), r) for o, r in outcome])
    return outcome
