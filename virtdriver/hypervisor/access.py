"""Why QEMU could not open a disk: the data's owner and mode against QEMU's user.

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

from virtdriver.config.reader import parse_xml
from virtdriver.errors import MalformedXML


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


__all__ = ["explain_denied", "qemu_user"]
