"""The per-disk attach policy: read-only, sharing, cache/io, labels and refusals of one disk.

Protocol drivers say where a volume is; this module says how it may be used:

- **Attach mode.** Exactly ``ro`` or ``rw`` (default ``rw``). The effective mode is ``ro`` when
  either the request or the storage service's ``data.access_mode`` says so. ``ro`` gives
  ``<readonly/>``.
- **Multiattach.** Every attachment of a multiattach volume, read-only ones included, is
  ``<shareable/>`` with ``cache='none'`` — QEMU's image locking refuses a second opener otherwise,
  and a host page cache per guest would serve stale data. ``io='native'`` is kept only with cache
  ``none``/``directsync``; otherwise ``threads``.
- **Refusals.** A shareable read-write disk in a format other than raw (libvirt allows shared
  writes to raw images only); encryption together with multiattach (the LUKS layer is not safe to
  share); ``<shareable/>`` on a volume not flagged multiattach; an attach mode on a disk that is
  not a volume (:func:`check_block_device_attach_mode`).
- **Labels** (``label_policy``): ``auto`` adds nothing and lets libvirt give shareable disks the
  shared image label (it never restores labels of shared or read-only disks on detach);
  ``explicit`` pins the shared image SELinux context on shareable host disks; ``none`` turns
  relabelling off (``selinux`` and ``dac``) for storage whose labels are managed elsewhere.
  Network disks are never labelled by libvirt and get no per-disk labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from virtdriver.config import Disk, SecLabel
from virtdriver.errors import (
    InvalidAttachMode,
    InvalidConnectionInfo,
    InvalidRenderOption,
    MultiattachNotSupported,
    UnsafeAttachment,
    show,
)
from virtdriver.policy.sharing import DIRECT_CACHE_MODES

ATTACH_MODES: Final = ("ro", "rw")
LABEL_POLICIES: Final = ("auto", "explicit", "none")
VIRTUAL_IMAGE_CONTEXT = Path("/etc/selinux/targeted/contexts/virtual_image_context")


def check_attach_mode(mode: object, where: str = "attach_mode") -> str:
    """``mode`` if it is ``ro`` or ``rw``; :class:`InvalidAttachMode` otherwise."""
    if mode not in ATTACH_MODES:
        raise InvalidAttachMode(f"{where}: {show(mode)} is not an attach mode (use 'ro' or 'rw')")
    return mode  # type: ignore[return-value]


def effective_attach_mode(requested: object, access_mode: object) -> str:
    """``ro`` if either the request or the storage service's ``access_mode`` says ``ro``."""
    requested = check_attach_mode(requested)
    if access_mode is not None:
        if access_mode not in ATTACH_MODES:
            raise InvalidConnectionInfo("connection_info.data.access_mode",
                                        f"{show(access_mode)} is not 'ro' or 'rw'")
        if access_mode == "ro":
            return "ro"
    return requested


def check_block_device_attach_mode(bdm: Mapping[str, Any]) -> None:
    """Refuse an ``attach_mode`` on a block-device mapping that is not a volume.

    For compute services validating a server's block-device mappings: the multiattach spec makes
    an attach mode on a disk whose ``destination_type`` is not ``volume`` (an image-backed root,
    an ephemeral or swap disk) an error, not something to ignore.
    """
    if bdm.get("attach_mode") is None:
        return
    check_attach_mode(bdm["attach_mode"], "block_device_mapping.attach_mode")
    if bdm.get("destination_type") != "volume":
        raise InvalidAttachMode("block_device_mapping.attach_mode: an attach mode is only "
                                "allowed on a volume, not on a local or ephemeral disk")


def shared_image_label(configured: str | None = None,
                       context_file: Path = VIRTUAL_IMAGE_CONTEXT) -> str:
    """The host's shared image SELinux context: configured, else read from the policy file."""
    if configured:
        return configured
    try:
        first = context_file.read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        first = ""
    if not first:
        raise UnsafeAttachment(f"label_policy 'explicit' needs the shared image SELinux context: "
                               f"{context_file} is missing or empty; configure it explicitly")
    return first


def apply_policy(disk: Disk, *, attach_mode: str, multiattach: bool, host_attached: bool,
                 encrypted: bool = False, label_policy: str = "auto",
                 shared_label: str | None = None) -> Disk:
    """Apply attach mode, sharing, cache/io, labels and refusals to ``disk`` (in place).

    ``disk`` comes from a volume driver (source, format and its default cache/io). Returns it.
    """
    check_attach_mode(attach_mode)
    if label_policy not in LABEL_POLICIES:
        raise InvalidRenderOption(f"label_policy {show(label_policy)} is not one of "
                               f"{', '.join(LABEL_POLICIES)}")
    if disk.shareable and not multiattach:
        raise MultiattachNotSupported("a shareable disk was requested for a volume that is not "
                                      "multiattach; sharing it would risk corrupting its data")
    driver = disk.driver
    fmt = driver.type if driver is not None else None
    if multiattach:
        if encrypted:
            raise MultiattachNotSupported("an encrypted volume cannot be multiattach: its LUKS "
                                          "layer is not safe to share between guests")
        if attach_mode == "rw" and fmt not in (None, "raw"):
            raise MultiattachNotSupported(f"a {fmt} volume cannot be shared read-write: libvirt "
                                          "allows shared write access to raw images only")
        disk.shareable = True
        if driver is not None:
            driver.cache = "none"
    disk.readonly = attach_mode == "ro"
    if driver is not None and driver.io == "native" and driver.cache not in DIRECT_CACHE_MODES:
        driver.io = "threads"
    if host_attached and disk.source is not None:
        disk.source.seclabels = _labels(label_policy, disk.shareable, shared_label)
    return disk


def _labels(label_policy: str, shareable: bool, shared_label: str | None) -> list[SecLabel]:
    if label_policy == "none":
        return [SecLabel(model="selinux", relabel="no"), SecLabel(model="dac", relabel="no")]
    if label_policy == "explicit" and shareable:
        return [SecLabel(model="selinux", relabel="yes", label=shared_image_label(shared_label))]
    return []
