"""Small read-only looks at the host, for the protocol drivers' ``host_probe``.

Each answers "is this piece there?" from the filesystem only (``/sys``, ``/proc``, ``$PATH``):
nothing is loaded, mounted or started. A probe returns ``(ok, why)`` with ``why`` a few words.
"""

from __future__ import annotations

import os
from pathlib import Path

SYS = Path("/sys")
PROC = Path("/proc")
PROC_FILESYSTEMS = Path("/proc/filesystems")
DEV_FUSE = Path("/dev/fuse")
MODULES = Path("/lib/modules")
#: iscsiadm reaches iscsid on this abstract UNIX socket (open-iscsi's
#: ``ISCSIADM_ABSTRACT_NAMESPACE``); systemd listens on it for a socket-activated iscsid.
ISCSID_SOCKET = "@ISCSIADM_ABSTRACT_NAMESPACE"
#: The lowest os-brick whose NVMe-oF connector finds the namespace on kernels >= 5.x (older ones
#: cannot match a controller whose address carries ``src_addr``: "Volume device not found").
MIN_OS_BRICK_NVMEOF = (6, 6, 0)


def binary(name: str) -> bool:
    """A program on ``$PATH`` or in ``/sbin`` (root's tools are not always on a user's path)."""
    import shutil  # here: rendering loads the protocols that probe, not their probes

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


def module_state(name: str) -> str:
    """``loaded`` (or built in), ``loadable`` (in the running kernel's modules.dep, and module
    loading not disabled) or ``missing``."""
    if module(name):
        return "loaded"
    release = os.uname().release
    wanted = {f"{name}.ko", f"{name.replace('_', '-')}.ko"}
    for listing in ("modules.builtin", "modules.dep"):
        try:
            text = (MODULES / release / listing).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            base = line.split(":", 1)[0].rsplit("/", 1)[-1]
            if base.split(".ko", 1)[0] + ".ko" in wanted:
                if listing == "modules.builtin":
                    return "loaded"
                return "missing" if _modules_disabled() else "loadable"
    return "missing"


def _modules_disabled() -> bool:
    try:
        return (PROC / "sys" / "kernel" / "modules_disabled").read_text().strip() == "1"
    except OSError:
        return False


def running(program: str) -> int | None:
    """The pid of a process whose name (``comm``) is ``program``, if one runs."""
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == program:
                    return int(entry.name)
            except OSError:
                continue
    return None


def listening(abstract: str) -> bool:
    """A UNIX socket of that (``@``-prefixed, abstract) name is listening."""
    try:
        lines = (PROC / "net" / "unix").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(line.split()[-1] == abstract for line in lines if len(line.split()) >= 8)


def iscsid_state() -> str:
    """``running``, ``socket`` (systemd starts it on iscsiadm's first call) or ``stopped``."""
    if running("iscsid"):
        return "running"
    return "socket" if listening(ISCSID_SOCKET) else "stopped"


def os_brick_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("os-brick")
    except PackageNotFoundError:
        return None


def version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def iscsi_initiator() -> tuple[bool, str]:
    """iscsiadm, iscsid reachable, iscsi_tcp loaded or loadable (iscsid loads it)."""
    missing = [] if binary("iscsiadm") else ["no iscsiadm"]
    tcp = module_state("iscsi_tcp")
    if tcp == "missing" and not (SYS / "class" / "iscsi_transport").is_dir():
        missing.append("no iscsi_tcp module in this kernel")
    if iscsid_state() == "stopped":
        missing.append("iscsid not running (nor socket-activated)")
    return verdict(missing, f"iscsiadm, iscsid, iscsi_tcp {tcp}")


def nvme_fabrics() -> tuple[bool, str]:
    """nvme CLI, nvme_tcp loaded or loadable, and an os-brick whose connector works here."""
    missing = [] if binary("nvme") else ["no nvme CLI"]
    tcp = module_state("nvme_tcp")
    if tcp == "missing":
        missing.append("no nvme_tcp module in this kernel")
    brick = os_brick_version()
    if brick is None:
        missing.append("no os-brick")
    elif version_tuple(brick) < MIN_OS_BRICK_NVMEOF:
        missing.append(f"os-brick {brick} is older than "
                       f"{'.'.join(map(str, MIN_OS_BRICK_NVMEOF))} (its connector does not find "
                       "the namespace on current kernels)")
    return verdict(missing, f"nvme CLI, nvme_tcp {tcp}, os-brick {brick}")


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
