"""Mount propagation: shares mounted under the mount base must reach every guest's QEMU.

libvirt starts each QEMU in its own mount namespace, a copy of the host's taken when the guest
starts, with every mount a *slave* of the host's. A share mounted later (os-brick mounts NFS,
GlusterFS, ... on first attach) reaches that namespace only if it is mounted below a *shared*
mount; otherwise QEMU answers ``blockdev-add ... No such file or directory``. systemd makes ``/``
shared; a host without systemd usually keeps it private. So before the first share is mounted,
the mount base is made a shared mount point (``mount --bind B B; mount --make-shared B``) unless
it already sits on a shared mount. Guests started before that still cannot see shares:
:func:`qemu_sees` tells, and ``doctor`` reports it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from virtdriver.errors import HostConnectFailed

LOG = logging.getLogger(__name__)
MOUNTINFO = Path("/proc/self/mountinfo")
_OCTAL = re.compile(rb"\\([0-7]{3})")


@dataclass(frozen=True)
class MountEntry:
    """One line of ``/proc/PID/mountinfo``: where, its propagation tags (``shared:N``...) and
    what is mounted (a device, a share, ``tmpfs``)."""

    mount_point: str
    tags: tuple[str, ...]
    source: str = ""

    @property
    def shared(self) -> bool:
        return any(t.startswith("shared:") for t in self.tags)


def read_mountinfo(path: Path = MOUNTINFO) -> list[MountEntry]:
    """The mounts of a process's namespace, in the kernel's order (later ones on top)."""
    return parse_mountinfo(path.read_bytes())


def parse_mountinfo(text: bytes | str) -> list[MountEntry]:
    """``/proc/PID/mountinfo`` as entries; a name that is not UTF-8 (mount points are bytes) is
    kept as the file system encoding decodes it (``os.fsdecode``), so it still names the path."""
    raw = os.fsencode(text) if isinstance(text, str) else text
    entries = []
    for line in raw.split(b"\n"):  # the kernel escapes a newline, a space, a tab, a backslash
        fields = line.split(b" ")  # in a name, and nothing else (a \r or \v is a name's own)
        if len(fields) < 7 or b"-" not in fields[6:]:
            continue
        dash = fields.index(b"-", 6)
        optional = tuple(os.fsdecode(f) for f in fields[6:dash])
        source = unescape(fields[dash + 2]) if len(fields) > dash + 2 else ""
        entries.append(MountEntry(unescape(fields[4]), optional, source))
    return entries


def unescape(field: bytes) -> str:
    """One mountinfo field as a path: octal escapes undone on the bytes, then decoded."""
    return os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m.group(1), 8) & 0xFF]), field))


def shown_path(path: str) -> str:
    """A path as an operator may read it: bytes that are not UTF-8 and control characters
    escaped (``\\xff``, ``\\n``)."""
    try:
        text = os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeError:  # a lone surrogate no file name decodes to
        text = path.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def containing_mount(path: str, entries: list[MountEntry]) -> MountEntry | None:
    """The mount ``path`` lives on: the longest mount point above it, the topmost when stacked."""
    best: MountEntry | None = None
    for entry in entries:
        point = entry.mount_point
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.mount_point)):
            best = entry
    return best


def propagates(base: str | os.PathLike[str], mountinfo: Path = MOUNTINFO) -> bool:
    """True when mounts made below ``base`` reach namespaces copied from this one later."""
    found = containing_mount(os.path.realpath(base), read_mountinfo(mountinfo))
    return found is not None and found.shared


def fix_command(base: str) -> str:
    """What an operator runs (at boot, before guests start) to do it by hand."""
    return f"mount --bind {base} {base} && mount --make-shared {base}"


def ensure_shared(base: str | os.PathLike[str], lock_dir: Path) -> bool:
    """Make ``base`` a shared mount point unless mounts below it already propagate.

    Idempotent across threads and processes (an ``flock`` in ``lock_dir`` and a fresh look at
    ``/proc/self/mountinfo`` under it). Returns True when it changed the host.
    """
    real = os.path.realpath(base)
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_dir / "mount-base.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.makedirs(real, exist_ok=True)
        except OSError as exc:
            raise HostConnectFailed(f"cannot create the mount base {real}", str(exc)) from None
        entries = read_mountinfo()
        found = containing_mount(real, entries)
        if found is not None and found.shared:
            return False
        if found is None or found.mount_point != real:
            _mount(real, "--bind", real, real)
        _mount(real, "--make-shared", real)
        if not propagates(real):
            raise HostConnectFailed(f"the mount base {real} is still not a shared mount; shares "
                                    "mounted there would not reach running guests",
                                    f"run '{fix_command(real)}' before starting guests")
        LOG.info("made the mount base %s a shared mount point: shares mounted below it reach "
                 "guests started from now on", real)
        return True
    finally:
        os.close(fd)


def _mount(base: str, *args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HostConnectFailed(
            f"cannot make the mount base {base} a shared mount (shares mounted there would not "
            f"reach running guests); run '{fix_command(base)}' before starting guests",
            done.stderr.strip() or f"mount {' '.join(args)} exited {done.returncode}")


def qemu_sees(pid: int, path: str) -> bool | None:
    """Whether the mount at ``path`` exists in process ``pid``'s namespace (``None``: unknown)."""
    try:
        entries = read_mountinfo(Path(f"/proc/{pid}/mountinfo"))
    except OSError:
        return None
    return any(e.mount_point == path for e in entries)


def qemu_pid(guest_uuid: str, proc: Path = Path("/proc")) -> int | None:
    """The pid of the QEMU running guest ``guest_uuid`` on this host (its ``-uuid`` argument)."""
    wanted = f"-uuid\0{guest_uuid}\0".encode()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def check_guest_sees(guest_uuid: str, guest_name: str, path: str, mount_base: str) -> None:
    """Refuse up front when a running guest's QEMU cannot see the share ``path`` is on.

    That is a guest started before the mount base became a shared mount: nothing mounted below
    the base since then reaches its namespace, and QEMU would fail with a bare "No such file".
    """
    if not os.path.isdir(mount_base):
        return  # no share is mounted below a base that is not there
    real_base = os.path.realpath(mount_base)
    real = os.path.realpath(path)
    if not real.startswith(real_base.rstrip("/") + "/"):
        return  # outside the base: on no share mounted below it (mountinfo not read)
    share = containing_mount(real, read_mountinfo())
    if share is None or not share.mount_point.startswith(real_base.rstrip("/") + "/"):
        return
    pid = qemu_pid(guest_uuid)
    if pid is None or qemu_sees(pid, share.mount_point) is not False:
        return
    from virtdriver.errors import AttachFailed

    raise AttachFailed(
        f"guest {guest_name} cannot see the share mounted at {share.mount_point}: it was started "
        f"before {real_base} became a shared mount, so mounts made there since do not reach its "
        f"QEMU. Shut the guest down and start it again, and make the base shared at boot, before "
        f"guests start: {fix_command(real_base)}")
