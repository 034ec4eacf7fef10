"""What the host's SELinux policy says about virtual disk images: where its
``virtual_image_context`` file is, and the shared and read-only image contexts in it.

The file belongs to the policy in force, so its path depends on the policy's name: RHEL's is
``targeted``, Debian's ``default``, MLS hosts ``mls`` (``SELINUXTYPE`` in ``/etc/selinux/config``).
libselinux resolves it (``selinux_virtual_image_context_path()``); where libselinux is absent the
path is built from ``/etc/selinux/config`` the way libselinux builds it. Nothing here needs
SELinux to be enabled: a host without it has no such file, and callers say so.
"""

from __future__ import annotations

import functools
from pathlib import Path

from virtdriver.hostfiles import setting

SELINUX_ROOT = Path("/etc/selinux")
BOOLEANS = Path("/sys/fs/selinux/booleans")
DEFAULT_POLICY = "targeted"  # libselinux's own default when SELINUXTYPE is not set


def policy_name(config: Path = SELINUX_ROOT / "config") -> str:
    """The policy named by ``SELINUXTYPE`` in ``/etc/selinux/config`` (libselinux's default,
    ``targeted``, when the file or the line is missing)."""
    value = setting(config, "SELINUXTYPE")
    return value.strip("\"'") if value else DEFAULT_POLICY


@functools.cache
def _libselinux_path() -> str | None:
    import ctypes  # only where a label policy asks for the host's SELinux contexts
    import ctypes.util

    name = ctypes.util.find_library("selinux")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        lookup = lib.selinux_virtual_image_context_path
    except (OSError, AttributeError):
        return None
    lookup.restype = ctypes.c_char_p
    found = lookup()
    return found.decode() if found else None


def virtual_image_context_path(root: Path = SELINUX_ROOT) -> Path:
    """The ``virtual_image_context`` file of the policy in force."""
    if root == SELINUX_ROOT:
        found = _libselinux_path()
        if found:
            return Path(found)
    return root / policy_name(root / "config") / "contexts" / "virtual_image_context"


def image_contexts(context_file: Path | None = None) -> dict[str, str]:
    """``{"shared": ..., "readonly": ...}``: the first and second line of the policy's
    ``virtual_image_context`` (what libvirt gives ``<shareable/>`` and ``<readonly/>`` disks);
    empty when the file is missing."""
    path = context_file or virtual_image_context_path()
    try:
        lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError):
        return {}
    return dict(zip(("shared", "readonly"), lines))


def boolean(name: str, root: Path = BOOLEANS) -> bool | None:
    """The current value of the SELinux boolean ``name`` (``getsebool``), or ``None`` when there
    is none: SELinux is not enabled, or the policy in force has no such boolean."""
    try:
        return (root / name).read_text().split()[0] == "1"
    except (OSError, IndexError):
        return None
