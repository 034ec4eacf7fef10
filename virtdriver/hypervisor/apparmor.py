"""Least privilege for read-only disks on AppArmor hosts.

libvirt's AppArmor driver keeps one profile per guest (``libvirt-<uuid>``) whose file rules
``virt-aa-helper`` writes to ``/etc/apparmor.d/libvirt/libvirt-<uuid>.files``. When it generates
them from a guest's definition (guest start, and after every detach) a read-only disk gets
``rk``. A hot-plugged disk is different: libvirt calls ``virt-aa-helper -r -F PATH`` before the
disk is part of the definition, and the helper gives such a new file ``rwk`` whatever the disk
says, so the confined QEMU of a guest that attached a volume read-only may open it for writing
until the profile is next regenerated.

:func:`regenerate_profile` asks ``virt-aa-helper`` for what libvirt itself does after a detach:
the guest's profile regenerated from its live definition (``-r`` without ``-F``), in which the
read-only disk is now ``rk``. :func:`writable_readonly_disks` reads a guest's rules and names the
read-only disks that still have a writable one (for audit).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

LOG = logging.getLogger("virtdriver.apparmor")

HELPER_PATHS = ("/usr/lib/libvirt/virt-aa-helper", "/usr/libexec/virt-aa-helper",
                "/usr/lib64/libvirt/virt-aa-helper")
PROFILE_DIR = Path("/etc/apparmor.d/libvirt")


def helper() -> str | None:
    """libvirt's ``virt-aa-helper``, if this host has it."""
    return next((p for p in HELPER_PATHS if Path(p).exists()), None) or shutil.which(
        "virt-aa-helper")


def profile_name(guest_uuid: str) -> str:
    return f"libvirt-{guest_uuid}"


def regenerate_profile(guest_uuid: str, live_xml: str) -> str | None:
    """Regenerate and reload a running guest's profile from its live definition, as libvirt
    does after a detach. Returns ``None``, or why it could not be done (the caller warns: the
    attach itself stands, with libvirt's writable rule)."""
    path = helper()
    if path is None:
        return "libvirt's virt-aa-helper is not installed"
    try:
        done = subprocess.run([path, "-r", "-u", profile_name(guest_uuid)], input=live_xml,
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"virt-aa-helper failed: {exc}"
    if done.returncode != 0:
        return f"virt-aa-helper failed: {(done.stderr or done.stdout).strip()[:400]}"
    return None


def profile_rules(guest_uuid: str, profile_dir: Path = PROFILE_DIR) -> dict[str, str] | None:
    """The guest's file rules (``{path: permissions}``), or ``None`` when it has no profile."""
    try:
        text = (profile_dir / f"{profile_name(guest_uuid)}.files").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    rules: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if not line.startswith('"'):
            continue
        end = line.find('"', 1)
        if end > 0:
            path, perms = line[1:end], line[end + 1:].strip()
            rules[path] = rules.get(path, "") + perms
    return rules


def writable_readonly_disks(guest_uuid: str, readonly_paths: list[str],
                            profile_dir: Path = PROFILE_DIR) -> list[str]:
    """The read-only disks' paths that the guest's profile lets its QEMU open for writing."""
    rules = profile_rules(guest_uuid, profile_dir)
    if rules is None:
        return []
    return [p for p in readonly_paths if "w" in rules.get(p, "")]
