"""Doctor's storage probes: every registered protocol, and whether shares reach the guests.

The protocol list is the registry's: each volume driver, built-in or from a plugin package,
declares what the host needs (:meth:`~virtdriver.volume.base.VolumeDriver.host_probe`,
``qemu_block_driver``, ``qemu_option``), so a plugin appears here exactly as a built-in does.

Mount propagation is checked for real: a small tmpfs is mounted below the mount base for a
moment and looked for from a fresh mount namespace made the way libvirt makes QEMU's (a copy,
every mount a slave) and from every running QEMU on this host; then it is removed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from virtdriver.errors import VirtDriverError
from virtdriver.hypervisor import mounts
from virtdriver.ops.doctor.probes import _run
from virtdriver.ops.doctor.verdict import Check, Status
from virtdriver.volume.registry import get_driver, known_types

PROPAGATION = "mount propagation"


def qemu_block_drivers() -> set[str]:
    """The block drivers ``qemu-img`` lists (qemu-block-extra adds iscsi, rbd, gluster, ...)."""
    qemu_img = shutil.which("qemu-img")
    return listed_block_drivers(_run([qemu_img, "--help"])) if qemu_img else set()


def listed_block_drivers(help_text: str) -> set[str]:
    """The drivers in ``qemu-img --help``: one line (QEMU 7) or a wrapped block (QEMU 10).

    No QMP command lists the block drivers a QEMU can load (its schema names every driver
    whether or not its module is installed), so this is QEMU's own list, read as it prints it.
    """
    names: list[str] = []
    lines = iter(help_text.splitlines())
    for line in lines:
        if re.match(r"Supported (image )?formats:", line):
            names += line.split(":", 1)[1].split()
            for more in lines:
                if not more.strip() and names:
                    break
                names += more.split()
            break
    return set(names)


def protocol_checks(facts: dict[str, Any], enabled: frozenset[str] = frozenset()) -> list[Check]:
    """For each registered protocol: can the host connect it, or QEMU by itself? ``enabled``:
    the QEMU options (``--native-iscsi``, ...) this driver is configured with; a protocol that
    only QEMU can open, behind an option that is off, is not OK: its attach would fail."""
    drivers = qemu_block_drivers()
    found: dict[str, dict[str, Any]] = {}
    checks = []
    for volume_type in known_types():
        try:
            driver = get_driver(volume_type)
            host = driver.host_probe()
        except (VirtDriverError, ImportError) as exc:
            checks.append(Check("protocols", volume_type, "warn", f"its driver does not load: "
                                f"{exc}"))
            continue
        qemu = driver.qemu_block_driver
        qemu_ok = qemu is not None and qemu in drivers
        found[volume_type] = {"kernel": host[0] if host else None,
                              "qemu": qemu_ok if qemu else None}
        parts = []
        if host is not None:
            parts.append(f"host: {'yes' if host[0] else 'no'} ({host[1]})")
        if qemu is not None:
            how = f", with {driver.qemu_option}" if driver.qemu_option and qemu_ok else ""
            parts.append(f"QEMU: {'yes' if qemu_ok else 'no'} ({qemu} driver"
                         f"{'' if qemu_ok else ' missing: qemu-block-extra'}{how})")
        if not parts:
            parts.append("its driver declares no host probe: doctor cannot tell")
        qemu_used = qemu_ok and (not driver.qemu_option or driver.qemu_option in enabled)
        status: Status = "ok" if (host is not None and host[0]) or qemu_used else "warn"
        if qemu_ok and not qemu_used and status == "warn":
            parts.append(f"attaches work only with {driver.qemu_option}")
        checks.append(Check("protocols", volume_type, status, "; ".join(parts)))
    facts["protocols"] = found
    facts["qemu_block_drivers"] = sorted(drivers)
    return checks


# ---- mount propagation --------------------------------------------------------------------------


def propagation_check(mount_base: str, facts: dict[str, Any]) -> Check:
    """Do shares mounted below the mount base reach guests, new and running?"""
    base = os.path.realpath(mount_base)
    fix = mounts.fix_command(base)
    info: dict[str, Any] = {"mount_base": base}
    facts["mount_propagation"] = info
    if not os.path.isdir(base):
        info["state"] = "missing"
        return Check("host", PROPAGATION, "warn",
                     f"{base} does not exist yet: the first share attach creates it and makes it "
                     "a shared mount, but guests started before then cannot use shares until "
                     f"restarted; at boot, before guests start: mkdir -p {base} && {fix}")
    shared = mounts.propagates(base)
    info["shared"] = shared
    try:
        new_ns, running = _probe(base)
    except (OSError, subprocess.SubprocessError) as exc:
        info["state"] = "unprobed"
        return Check("host", PROPAGATION, "warn", f"cannot probe below {base}: {exc}")
    blind = sorted(name for name, sees in running.items() if not sees)
    info.update(new_namespace=new_ns, running_guests=running)
    if not new_ns:
        return Check("host", PROPAGATION, "warn",
                     f"a mount below {base} does not reach a new guest's namespace ({base} is not "
                     "a shared mount): the first share attach makes it one, but guests started "
                     f"before then cannot use shares until restarted; at boot, before guests "
                     f"start: {fix}")
    if blind:
        return Check("host", PROPAGATION, "warn",
                     f"mounts below {base} reach new guests, not {len(blind)} running guest(s) "
                     f"started before it was shared ({', '.join(blind)}): restart them to attach "
                     "shares to them")
    seen = f" and all {len(running)} running guest(s)" if running else ""
    return Check("host", PROPAGATION, "ok",
                 f"a mount below {base} reached a new guest's namespace{seen}")


def _probe(base: str) -> tuple[bool, dict[str, bool]]:
    """Mount a tmpfs below ``base`` for a moment; who sees it?"""
    child = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "slave", "sh", "-c",
         "echo ready; read go; cat /proc/self/mountinfo"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        errors="surrogateescape")  # mount points are bytes, not always UTF-8
    try:
        if child.stdout is None or child.stdout.readline() != "ready\n":
            raise OSError(f"unshare failed: {child.communicate(timeout=20)[1].strip()}")
        with _probe_mount(base) as point:
            out, _ = child.communicate("go\n", timeout=20)
            running = {name: bool(mounts.qemu_sees(pid, point)) for name, pid in _qemus()}
        return any(e.mount_point == point for e in mounts.parse_mountinfo(out)), running
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@contextlib.contextmanager
def _probe_mount(base: str) -> Iterator[str]:
    point = tempfile.mkdtemp(prefix=".virtdriver-doctor-", dir=base)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "virtdriver-doctor", point],
                       check=True, capture_output=True, text=True)
        try:
            yield point
        finally:
            subprocess.run(["umount", point], check=False, capture_output=True)
    finally:
        os.rmdir(point)


_GUEST_NAME = re.compile(rb"-name\0guest=([^,\0]+)")


def _qemus(proc: Path = Path("/proc")) -> list[tuple[str, int]]:
    """(guest name, pid) of every QEMU guest running on this host."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        name = _GUEST_NAME.search(cmdline)
        if name and b"qemu" in cmdline.split(b"\0", 1)[0]:
            found.append((name.group(1).decode(errors="replace"), int(entry.name)))
    return sorted(found)
