"""The per-disk attach policy: read-only, sharing, cache/io, labels and refusals of one disk.

Protocol drivers say where a volume is; this module says how it may be used:

- **Attach mode.** Exactly ``ro`` or ``rw`` (default ``rw``). The effective mode is ``ro`` when
  either the request or the storage service's ``data.access_mode`` says so. ``ro`` gives
  ``<readonly/>``.
- **Multiattach.** Every attachment of a multiattach volume, read-only ones included, is
  ``<shareable/>`` with ``cache='none'`` — QEMU's image locking refuses a second opener otherwise,
  and a host page cache per guest would serve stale data. ``io='native'`` is kept only with cache
  ``none``/``directsync``; otherwise ``threads``.
- **Cache and error policies.** An attachment may ask for ``cache='directsync'`` instead (both
  bypass the host page cache; directsync also writes through the disk's cache) and for libvirt's
  ``error_policy``/``rerror_policy``; ``device='lun'`` gets ``error_policy='report'`` unless
  asked otherwise, so that a clustered guest sees an I/O error instead of being paused.
- **Refusals.** A shareable read-write disk in a format other than raw (libvirt allows shared
  writes to raw images only); encryption together with multiattach (the LUKS layer is not safe to
  share); ``<shareable/>`` on a volume not flagged multiattach; an attach mode on a disk that is
  not a volume (:func:`check_block_device_attach_mode`).
- **What libvirt 9 or QEMU 7 refuse** is refused here first, with the key named:
  ``device='lun'`` only on a raw block device or a QEMU-native iSCSI source and never encrypted;
  no read-only disk on the buses libvirt cannot make read-only (ide, sata); block sizes QEMU
  rejects (logical above physical, anything but 512 on ide/sata); throttle values above QEMU's
  ceiling (see :func:`check_throttle`); a bus that cannot be hot-plugged where attach would use it.
- **SCSI reservations.** ``device='lun'`` on a host block device gets ``<reservations
  managed='yes'/>``: PERSISTENT RESERVE OUT needs CAP_SYS_RAWIO, which QEMU lacks, so libvirt
  starts a ``qemu-pr-helper`` per guest to send it (doctor warns on a host without one; libvirt
  then refuses the attach). QEMU-native iSCSI passes reservations through libiscsi: no element.
- **Labels** (``label_policy``): ``auto`` adds nothing and lets libvirt give shareable disks the
  shared image label (it never restores labels of shared or read-only disks on detach);
  ``explicit`` pins the shared image SELinux context on shareable host disks; ``none`` turns
  relabelling off (``selinux`` and ``dac``) for storage whose labels are managed elsewhere.
  Network disks are never labelled by libvirt and get no per-disk labels. A per-disk label names
  a security model, and libvirt refuses to *start* a guest whose definition names a model its
  security drivers do not run (it accepts it at hot-plug): given the host's models
  (``security_models``), only those are written, and ``explicit`` without SELinux is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from virtdriver.config import Disk, Reservations, SecLabel
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
ERROR_POLICIES: Final = ("stop", "report", "ignore", "enospace")  # libvirt's error_policy
READ_ERROR_POLICIES: Final = ("stop", "report", "ignore")  # libvirt's rerror_policy
LABEL_POLICIES: Final = ("auto", "explicit", "none")
LUN_PROTOCOLS: Final = ("iscsi",)  # network sources libvirt passes SCSI commands through to
NO_READONLY_BUSES: Final = ("ide", "sata")  # libvirt: "readonly ide disks are not supported"
NO_HOTPLUG_BUSES: Final = ("ide", "sata")  # libvirt: "disk bus 'ide' cannot be hotplugged"
SECTOR_ONLY_BUSES: Final = ("ide", "sata")  # QEMU's ide-hd: "logical_block_size must be 512"
DEFAULT_BLOCK_SIZE: Final = 512  # what QEMU assumes for a block size that is not given
# QEMU's scsi-hd (also under usb-storage) sends at most 36 characters of a serial to the guest;
# QEMU 8.1 and later refuse a longer one ("can't be longer than 36 characters").
SERIAL_LIMIT: Final = {"scsi": 36, "usb": 36}
THROTTLE_MAX: Final = 10**15  # QEMU's ceiling for a rate and for a burst's rate x length
#: The security models whose per-disk ``relabel='no'`` means "leave this disk's labels alone".
#: AppArmor has none to leave alone: its per-guest profile rule is what lets QEMU open the disk.
RELABEL_MODELS: Final = ("selinux", "dac")


def check_attach_mode(mode: object, where: str = "attach_mode") -> str:
    """``mode`` if it is ``ro`` or ``rw``; :class:`InvalidAttachMode` otherwise."""
    if mode not in ATTACH_MODES:
        raise InvalidAttachMode(f"{where}: {show(mode)} is not an attach mode (use 'ro' or 'rw')")
    return mode


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
                       context_file: Path | None = None) -> str:
    """The host's shared image SELinux context: configured, else the first line of the
    ``virtual_image_context`` file of the SELinux policy in force."""
    if configured:
        return configured
    from virtdriver.selinux import image_contexts, virtual_image_context_path  # ctypes: lazily

    path = context_file or virtual_image_context_path()
    shared = image_contexts(path).get("shared")
    if not shared:
        raise UnsafeAttachment(f"label_policy 'explicit' needs the shared image SELinux context: "
                               f"{path} is missing or empty; give it with --shared-image-label")
    return shared


def check_label_policy(label_policy: str, security_models: Sequence[str] | None) -> None:
    """Refuse a label policy that cannot mean anything with the host's security drivers:
    ``explicit`` pins an SELinux context, which a host without libvirt's SELinux driver cannot
    apply (and whose guests would then not start). ``None``: the host is not known (render)."""
    if label_policy != "explicit" or security_models is None or "selinux" in security_models:
        return
    drivers = ", ".join(security_models) or "none"
    raise UnsafeAttachment(f"label_policy 'explicit' pins an SELinux context, but this host's "
                           f"libvirt runs no SELinux security driver (its security drivers: "
                           f"{drivers}); use label_policy 'auto'"
                           + (" or 'none'" if "dac" in security_models else ""))


def check_option_text(name: str, value: object) -> str | None:
    """A host option's text: ``None``, or a non-empty printable single line.

    Control characters (C0, DEL, C1, line and paragraph separators) and lone surrogates are
    refused: they reach XML attributes and file names libvirt or QEMU refuse or mis-handle.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value or not value.isprintable():
        raise InvalidRenderOption(f"{name}: {show(value)} is not a non-empty line of printable "
                                  "text")
    return value


def check_option_flag(name: str, value: object) -> bool:
    """A boolean host option: ``True`` or ``False`` only (a string "false" would be true)."""
    if not isinstance(value, bool):
        raise InvalidRenderOption(f"{name}: {show(value)} is not true or false")
    return value


def check_label_options(label_policy: object, shared_label: object) -> None:
    """A shared image label is only used with ``label_policy='explicit'``: refuse it otherwise
    rather than ignore it silently."""
    if shared_label is not None and label_policy != "explicit":
        raise InvalidRenderOption("shared_image_label (--shared-image-label) is only used with "
                                  "label_policy 'explicit' (--label-policy explicit)")


def check_hotplug_bus(bus: object, where: str = "bus") -> None:
    """Refuse a bus libvirt cannot hot-plug a disk on (attach to a running guest would fail)."""
    if bus in NO_HOTPLUG_BUSES:
        raise InvalidRenderOption(f"{where}: {show(bus)} cannot be hot-plugged into a running "
                                  f"guest; use one of virtio, scsi, usb")


def fitting_serial(bus: str, serial: str) -> str:
    """The serial as the guest sees it on ``bus``: at most what QEMU's device sends."""
    return serial[:SERIAL_LIMIT.get(bus, len(serial))]


def check_block_sizes(bus: str, logical: int | None, physical: int | None) -> None:
    """Block sizes QEMU accepts for ``bus``: logical never above physical, 512 on ide/sata."""
    where = "connection_info.data.logical_block_size"
    log = logical or DEFAULT_BLOCK_SIZE
    if bus in SECTOR_ONLY_BUSES and log != DEFAULT_BLOCK_SIZE:
        raise InvalidConnectionInfo(where, f"{log} is not possible on bus {bus!r} (only 512)")
    if log > (physical or DEFAULT_BLOCK_SIZE):
        raise InvalidConnectionInfo(where, f"{log} is larger than the physical block size "
                                    f"({physical or DEFAULT_BLOCK_SIZE}); QEMU refuses that")


def check_throttle(values: Mapping[str, int], where: str) -> None:
    """Refuse ``<iotune>`` values libvirt or QEMU refuse (keys are libvirt's iotune names).

    ``total_*`` with ``read_*``/``write_*`` of the same kind; any value above
    :data:`THROTTLE_MAX` (``size_iops_sec`` too); a burst without its base rate or below it;
    a burst length without a burst, or whose product with its burst exceeds
    :data:`THROTTLE_MAX`; ``size_iops_sec`` without an iops rate.
    """
    for key, value in values.items():
        kind, _, rest = key.partition("_")  # "read", "iops_sec_max"
        if kind == "total":
            for part in ("read_" + rest, "write_" + rest):
                if part in values:
                    raise InvalidConnectionInfo(f"{where}.{key}",
                                                f"cannot be combined with {part}")
        if key.endswith("_max_length"):
            burst = key[: -len("_length")]
            if burst not in values:
                raise InvalidConnectionInfo(f"{where}.{key}", f"needs {burst}")
            if value > THROTTLE_MAX // values[burst]:
                raise InvalidConnectionInfo(f"{where}.{key}", f"{value} times {burst} "
                                            f"({values[burst]}) is above QEMU's limit "
                                            f"{THROTTLE_MAX}")
            continue
        if value > THROTTLE_MAX:  # size_iops_sec too: libvirt holds every value to QEMU's
            raise InvalidConnectionInfo(f"{where}.{key}", f"{value} is above QEMU's limit "
                                        f"{THROTTLE_MAX}")
        if key.endswith("_max"):
            base = key[: -len("_max")]
            if base not in values or value < values[base]:
                raise InvalidConnectionInfo(f"{where}.{key}", f"needs {base} set and not above it")
    if "size_iops_sec" in values and not any(
            k in values for k in ("total_iops_sec", "read_iops_sec", "write_iops_sec")):
        raise InvalidConnectionInfo(f"{where}.size_iops_sec", "needs an iops limit "
                                    "(total_iops_sec, read_iops_sec or write_iops_sec)")


def _check_device(disk: Disk, encrypted: bool) -> None:
    """``device='lun'`` passes SCSI commands through: on a SCSI bus, to a raw block device or
    QEMU-native iSCSI only (libvirt refuses other protocols, files, formats and encryption)."""
    if disk.device != "lun":
        return
    source, driver = disk.source, disk.driver
    if disk.target is None or disk.target.bus != "scsi":
        raise InvalidRenderOption("device 'lun' needs bus 'scsi'")
    protocol = source.protocol if source is not None else None
    if disk.type == "network" and protocol not in LUN_PROTOCOLS:
        raise InvalidRenderOption(f"device 'lun' is not possible with protocol {protocol!r}: "
                                  "libvirt passes SCSI commands through to iSCSI only")
    if disk.type not in ("block", "network"):
        raise InvalidRenderOption(f"device 'lun' needs a block or iSCSI volume, not a "
                                  f"{disk.type} disk")
    if driver is not None and driver.type not in (None, "raw"):
        raise InvalidRenderOption(f"device 'lun' needs a raw volume, not {driver.type}")
    if encrypted:
        raise InvalidRenderOption("device 'lun' cannot be encrypted (libvirt refuses it)")
    if disk.type == "block" and source is not None and source.reservations is None:
        # PERSISTENT RESERVE OUT needs CAP_SYS_RAWIO, which QEMU does not have: libvirt
        # starts a qemu-pr-helper for the guest that sends it on QEMU's behalf.
        source.reservations = Reservations(managed="yes")


def check_io_policies(cache: object, error_policy: object, rerror_policy: object) -> None:
    """An attachment's own cache and error policies: the direct modes, libvirt's policies."""
    if cache is not None and cache not in DIRECT_CACHE_MODES:
        raise InvalidRenderOption(f"cache: {show(cache)} is not one of "
                                  f"{', '.join(DIRECT_CACHE_MODES)} (the host page cache would "
                                  "serve a shared disk's readers stale data)")
    if error_policy is not None and error_policy not in ERROR_POLICIES:
        raise InvalidRenderOption(f"error_policy: {show(error_policy)} is not one of "
                                  f"{', '.join(ERROR_POLICIES)}")
    if rerror_policy is not None and rerror_policy not in READ_ERROR_POLICIES:
        raise InvalidRenderOption(f"rerror_policy: {show(rerror_policy)} is not one of "
                                  f"{', '.join(READ_ERROR_POLICIES)}")


def apply_policy(disk: Disk, *, attach_mode: str, multiattach: bool, host_attached: bool,
                 encrypted: bool = False, label_policy: str = "auto",
                 shared_label: str | None = None,
                 security_models: Sequence[str] | None = None, cache: str | None = None,
                 error_policy: str | None = None, rerror_policy: str | None = None) -> Disk:
    """Apply attach mode, sharing, cache/io, labels and refusals to ``disk`` (in place).

    ``disk`` comes from a volume driver (source, format and its default cache/io). Returns it.
    ``security_models`` are the host libvirt's security drivers (``None``: not known; per-disk
    labels are then written for every model the label policy concerns). ``cache`` (``none`` or
    ``directsync``) and the error policies are the attachment's own; ``device='lun'`` reports
    errors to its guest unless told otherwise, as clustered applications expect.
    """
    check_attach_mode(attach_mode)
    check_io_policies(cache, error_policy, rerror_policy)
    if label_policy not in LABEL_POLICIES:
        raise InvalidRenderOption(f"label_policy {show(label_policy)} is not one of "
                               f"{', '.join(LABEL_POLICIES)}")
    check_label_policy(label_policy, security_models)
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
            raise MultiattachNotSupported(f"multiattach with attach_mode 'rw': a {fmt} volume "
                                          "cannot be shared read-write: libvirt allows shared "
                                          "write access to raw images only")
        disk.shareable = True
        if driver is not None:
            driver.cache = "none"
    if driver is not None:
        driver.cache = cache or driver.cache
        if disk.device == "lun" and error_policy is None:
            error_policy = "report"  # a clustered guest handles its errors; a pause fences it
        driver.error_policy = error_policy
        driver.rerror_policy = rerror_policy
    _check_device(disk, encrypted)
    disk.readonly = attach_mode == "ro"
    bus = disk.target.bus if disk.target is not None else None
    if disk.readonly and disk.device == "disk" and bus in NO_READONLY_BUSES:
        raise InvalidAttachMode(f"attach_mode 'ro': libvirt cannot make a {bus} disk read-only; "
                                "use bus virtio, scsi or usb")
    if driver is not None and driver.io == "native" and driver.cache not in DIRECT_CACHE_MODES:
        driver.io = "threads"
    if host_attached and disk.source is not None:
        check_label_policy(label_policy, security_models)
        disk.source.seclabels = _labels(label_policy, disk.shareable, shared_label,
                                        security_models)
    return disk


def label_policy_of(disk: Disk) -> tuple[str, str | None]:
    """The label policy (and shared label) that gave ``disk`` its per-disk labels: a swap
    renders the new volume's disk with it, so the guest keeps what it was attached with."""
    labels = disk.source.seclabels if disk.source is not None else []
    if any(label.relabel == "no" for label in labels):
        return "none", None
    explicit = [label.label for label in labels if label.model == "selinux" and label.label]
    if explicit:
        return "explicit", explicit[0]
    return "auto", None


def _labels(label_policy: str, shareable: bool, shared_label: str | None,
            models: Sequence[str] | None) -> list[SecLabel]:
    if label_policy == "none":
        return [SecLabel(model=model, relabel="no") for model in RELABEL_MODELS
                if models is None or model in models]
    if label_policy == "explicit" and shareable:
        return [SecLabel(model="selinux", relabel="yes", label=shared_image_label(shared_label))]
    return []
