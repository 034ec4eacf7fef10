"""Small read-only looks at the host, for the protocol drivers' ``host_probe``.

Each answers "is this piece there?" from the filesystem only (``/sys``, ``/proc``, ``$PATH``):
nothing is loaded, mounted or started. A probe returns ``(ok, why)`` with ``why`` a few words.
"""

from __future__ import annotations

import shutil
from pathlib import Path

SYS = Path("/sys")
PROC_FILESYSTEMS = Path("/proc/filesystems")
DEV_FUSE = Path("/dev/fuse")


def binary(name: str) -> bool:
    """A program on ``$PATH`` or in ``/sbin`` (root's tools are not always on a user's path)."""
    return shutil.which(name) is not None or Path("/sbin", name).exists() or Path(
        "/usr/sbin", name).exists()


def module(name: str) -> bool:
    """A kernel module loaded or built in (built-ins with parameters appear in /sys/module)."""
    return (SYS / "module" / name).is_dir()


def filesystem(name: str) -> bool:
    """The kernel mounts filesystems of type ``name``."""
    try:
        return any(line.split()[-1] == name
                   for line in PROC_FILESYSTEMS.read_text().splitlines() if line.split())
    except OSError:
        return False


def path(where: Path, what: str, *, directory: bool = False) -> tuple[bool, str]:
    """``(True, "<path>")`` when a client's file (or directory) is there, else ``(False, "no
    <what>")``."""
    found = where.is_dir() if directory else where.exists()
    return (True, f"{where}") if found else (False, f"no {what}")


def verdict(missing: list[str], present: str) -> tuple[bool, str]:
    """``(True, present)`` when nothing is missing, else ``(False, "no x, no y")``."""
    return not missing, ", ".join(missing) or present


def iscsi_initiator() -> tuple[bool, str]:
    missing = [] if binary("iscsiadm") else ["no iscsiadm"]
    if not ((SYS / "class" / "iscsi_transport").is_dir() or module("iscsi_tcp")):
        missing.append("no iscsi_tcp")
    return verdict(missing, "iscsiadm and iscsi_tcp")


def nvme_fabrics() -> tuple[bool, str]:
    missing = ([] if Path("/dev/nvme-fabrics").exists() else ["no /dev/nvme-fabrics"]) + (
        [] if binary("nvme") else ["no nvme CLI"])
    return verdict(missing, "/dev/nvme-fabrics and nvme CLI")


def fuse_mount(helper: str) -> tuple[bool, str]:
    """FUSE and the mount helper of a FUSE filesystem (``mount.glusterfs``, ...)."""
    missing = ([] if DEV_FUSE.exists() else ["no /dev/fuse"]) + (
        [] if binary(helper) else [f"no {helper}"])
    return verdict(missing, f"FUSE and {helper}")


def kernel_mount(fs_types: tuple[str, ...], helper: str) -> tuple[bool, str]:
    """A kernel filesystem (any of ``fs_types``) and its mount helper (``mount.nfs``, ...)."""
    missing = ([] if any(filesystem(t) for t in fs_types) else [f"no {fs_types[0]} filesystem"]) \
        + ([] if binary(helper) else [f"no {helper}"])
    return verdict(missing, f"{fs_types[0]} filesystem and {helper}")
