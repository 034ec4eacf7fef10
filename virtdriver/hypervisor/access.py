"""Why libvirt or QEMU refused a disk: the data's owner and mode against QEMU's user, the
directories above it, an SELinux boolean that is off, a LUN that takes no SCSI commands.

With ``label_policy='none'`` libvirt neither labels nor re-owns a disk, so data that QEMU's user
cannot open fails the attach with libvirt's bare "Could not open '/dev/loop0': Permission
denied". :func:`explain_denied` turns that into what the operator must know: who owns the data,
who QEMU runs as, and the two ways out.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Mapping
from typing import Any

import libvirt

from virtdriver.config import Disk
from virtdriver.config.reader import parse_xml
from virtdriver.errors import MalformedXML, VirtDriverError


def qemu_user(domain_xml: str) -> tuple[int, int] | None:
    """The uid and gid QEMU runs as for this guest: the label of the guest's DAC seclabel
    (``+64055:+64055``), or ``None`` when libvirt does not say."""
    try:
        root = parse_xml(domain_xml)
    except MalformedXML:
        return None
    for label in root.iterfind("seclabel[@model='dac']/label"):
        uid, sep, gid = (label.text or "").strip().partition(":")
        try:
            return int(uid.lstrip("+")), int(gid.lstrip("+"))
        except ValueError:
            return None
    return None


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def explain_denied(path: str, domain_xml: str) -> str | None:
    """One sentence for a "Permission denied" on ``path`` with label_policy 'none'."""
    user = qemu_user(domain_xml)
    try:
        info = os.stat(path)
    except OSError:
        return None
    owner = f"{_user(info.st_uid)}:{_group(info.st_gid)}"
    mode = stat.filemode(info.st_mode)
    who = f"{_user(user[0])} (uid {user[0]})" if user else "libvirt's QEMU user"
    return (f"QEMU runs as {who} and cannot open {path} (owner {owner}, mode {mode}); with "
            f"label_policy 'none' libvirt does not change its owner or label: make the data "
            f"accessible to {_user(user[0]) if user else 'that user'} where it is provided "
            f"(e.g. a udev rule), or attach with label_policy 'auto' so libvirt does")


def _allows(info: os.stat_result, uid: int, gid: int, need: int) -> bool:
    """Do the mode bits of ``info`` grant ``need`` (an octal rwx mask, e.g. 0o1 for search) to
    ``uid`` with primary group ``gid`` and its supplementary groups? (ACLs are not read.)"""
    if uid == 0:
        return True
    if info.st_uid == uid:
        shift = 6
    else:
        try:
            groups = set(os.getgrouplist(pwd.getpwuid(uid).pw_name, gid))
        except KeyError:
            groups = {gid}
        shift = 3 if info.st_gid in groups else 0
    return (info.st_mode >> shift) & need == need


def _described(path: str, info: os.stat_result) -> str:
    return (f"{path} (owner {_user(info.st_uid)}:{_group(info.st_gid)}, mode "
            f"{stat.filemode(info.st_mode)})")


def closed_directory(path: str, uid: int, gid: int) -> str | None:
    """The first directory above ``path`` that ``uid:gid`` may not pass (no search permission
    by its mode), described; ``None`` when every one lets it through."""
    parts = os.path.abspath(path).split("/")[1:-1]
    current = ""
    for part in parts:
        current += "/" + part
        try:
            info = os.stat(current)
        except OSError:
            return None
        if not _allows(info, uid, gid, 0o1):
            return (f"QEMU runs as {_user(uid)} (uid {uid}), which may not pass "
                    f"{_described(current, info)}: every directory above a volume must let "
                    "QEMU's user through (libvirt changes the volume's owner, never its "
                    "directories')")
    return None


def closed_file(path: str, uid: int, gid: int, *, write: bool) -> str | None:
    """Why ``uid:gid`` may not open ``path`` by its mode (read, and write when ``write``), or
    ``None``. For a file on a share whose server squashes root, libvirt cannot make the file
    QEMU's (its ``chown`` is refused and it goes on): the storage must."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    # A device node is opened in QEMU's own /dev, whose node libvirt owns: the host's says little.
    if not stat.S_ISREG(info.st_mode) or _allows(info, uid, gid, 0o6 if write else 0o4):
        return None
    return (f"QEMU runs as {_user(uid)} (uid {uid}), which may not "
            f"{'read and write' if write else 'read'} {_described(path, info)}; where libvirt "
            "may not change a file's owner (a share whose server squashes root) the storage "
            "must make it accessible to QEMU's user")


def why_attach_refused(dom: libvirt.virDomain, disk: Disk, message: str,
                       info: Mapping[str, Any], label_policy: str) -> str:
    """libvirt's refusal of an attach of ``disk``, with the reason it does not give.

    For a denied open, why (:func:`_why_denied`); for QEMU's own iSCSI initiator, the name it
    logged in as (a target's ACL admits names); for ``device='lun'``, why a passed-through
    block device could not be used."""
    source = disk.source
    if source is not None and source.protocol == "iscsi" and source.initiator is not None \
            and source.initiator.iqn is not None:
        return (f"{message} (QEMU's iSCSI initiator logged in as {source.initiator.iqn.name}: "
                "the target must admit that name; --initiator-iqn names another, the default "
                "is the host's /etc/iscsi/initiatorname.iscsi)")
    path = disk.source.dev or disk.source.file if disk.source is not None else None
    lun = why_lun_refused(disk, path, message)
    if lun:
        return f"{message}: {lun}"
    if not path or "Permission denied" not in message:
        return message
    why = _why_denied(dom, disk, path, info, label_policy)
    return f"{message}: {why}" if why else message


def _why_denied(dom: libvirt.virDomain, disk: Disk, path: str, info: Mapping[str, Any],
                label_policy: str) -> str | None:
    """Why QEMU was denied ``path``, in the first of these that holds.

    A directory above it QEMU's user may not pass; with label_policy 'none', whose data it is;
    the file's own mode (on a share libvirt cannot re-own); an SELinux boolean that is off."""
    try:
        live: str | None = dom.XMLDesc(0)
    except libvirt.libvirtError:
        live = None
    user = qemu_user(live) if live else None
    closed = closed_directory(path, *user) if user else None
    if closed:
        return closed
    if label_policy == "none" and live:
        explained = explain_denied(path, live)
        if explained:
            return explained
    closed = closed_file(path, *user, write=not disk.readonly) if user else None
    if closed:
        return closed
    off = booleans_off(info)
    if off:
        return (f"the SELinux boolean{'s' if len(off) > 1 else ''} {', '.join(off)} "
                f"{'are' if len(off) > 1 else 'is'} off, so the guest's QEMU may not open this "
                f"{info.get('driver_volume_type')} file (libvirt cannot relabel a file on the "
                f"share); the host's operator decides: "
                f"{'; '.join(f'setsebool -P {b} on' for b in off)} "
                "('virtdriver doctor' checks it)")
    return None


def booleans_off(info: Mapping[str, Any]) -> list[str]:
    """The SELinux booleans the volume's protocol declares that are off on this host."""
    from virtdriver.selinux import boolean
    from virtdriver.volume.registry import get_driver

    try:
        declared = get_driver(str(info.get("driver_volume_type"))).selinux_booleans
    except (VirtDriverError, ImportError):
        return []
    return [name for name in declared if boolean(name) is False]


def why_lun_refused(disk: Disk, path: str | None, message: str) -> str | None:
    """For ``device='lun'`` on a host block device, why libvirt or QEMU could not use it."""
    if disk.device != "lun" or disk.type != "block":
        return None
    if "SG_IO" in message:
        return (f"device='lun' passes the guest's SCSI commands to {path}, which does not take "
                "them (not a SCSI disk: a loop or other non-SCSI block device); attach it with "
                "device='disk'")
    if "pr helper" in message or "pr-helper" in message:
        return ("device='lun' on a host block device needs qemu-pr-helper for the guest's SCSI "
                "reservations (<reservations managed='yes'/>): install it (Debian: "
                "qemu-system-common) or set pr_helper in libvirt's qemu.conf; 'virtdriver "
                "doctor' checks it")
    return None


__all__ = ["booleans_off", "closed_directory", "closed_file", "explain_denied", "qemu_user",
           "why_attach_refused", "why_lun_refused"]
