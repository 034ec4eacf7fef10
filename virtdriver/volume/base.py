"""The contract between the render path and a protocol's volume driver.

A volume driver reads ``connection_info`` (Cinder's shape) and answers one question: *where is the
data and how does QEMU open it?* — as a :class:`VolumeSource`. It never decides read-only,
sharing, cache policy for sharing, or labels: :mod:`virtdriver.policy` owns those.

``connection_info`` looks like::

    {"driver_volume_type": "iscsi",
     "serial": "4f1c2b7e-...",
     "multiattach": true,
     "data": {"volume_id": "4f1c2b7e-...", "access_mode": "rw",
              "target_iqn": "iqn.2010-10.org.openstack:volume-4f1c2b7e",
              "target_portal": "192.0.2.5:3260", "target_lun": 1,
              "device_path": "/dev/disk/by-path/ip-192.0.2.5:3260-iscsi-...-lun-1",
              "qos_specs": {"read_iops_sec": 500}, "discard": true}}

``data.device_path`` is filled in by the host connect step (os-brick) for types the host attaches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from virtdriver.config import Source
from virtdriver.errors import InvalidConnectionInfo, show

# host_name is part of this contract too (protocol modules and plugins import it from here); the
# one rule for host names and addresses lives in hostname.py.
from virtdriver.volume.hostname import host_name as host_name
from virtdriver.volume.hostname import split_host_port

DATA = "connection_info.data"


@dataclass(slots=True)
class RenderOptions:
    """Host-side choices that influence a volume's source (not its sharing policy)."""

    mount_base: str | None = None
    native_iscsi: bool = False
    native_glusterfs: bool = False
    initiator_iqn: str | None = None


@dataclass(frozen=True, slots=True)
class NovaBinding:
    """What nova needs to know of a protocol, for :mod:`virtdriver.nova` to derive its adapter.

    ``driver_class`` is the dotted path of the nova 34 volume-driver class the adapter subclasses
    (its constructor, os-brick connector, mounts, connect, disconnect and extend; only
    ``get_config`` is virtdriver's). Where nova's table (``nova.virt.libvirt.driver.
    VOLUME_DRIVERS``) names that class for this ``driver_volume_type``, the adapter replaces it;
    a type nova's table does not know (a plugin's) is added to it, served by the adapter.
    ``default_aio_drops_native``: nova's driver leaves ``io`` to QEMU when ``[libvirt]
    use_default_aio_mode_for_volumes`` is set (nova's iscsi, iser, fibre_channel and nfs do).
    """

    driver_class: str
    default_aio_drops_native: bool = False


@dataclass(slots=True)
class VolumeSource:
    """What a volume driver returns: disk type, source, and QEMU's opening defaults."""

    disk_type: str  # "block", "file" or "network"
    source: Source
    format: str = "raw"
    cache: str = "none"
    io: str | None = None

    @property
    def host_attached(self) -> bool:
        """True for a host file or device (labelled by libvirt); network disks are not."""
        return self.disk_type != "network"


class VolumeDriver:
    """Base of every protocol driver; one subclass per ``driver_volume_type``.

    ``brick_protocol`` names the os-brick connector that connects the host side, or is ``None``
    when QEMU opens the volume itself (rbd, nbd, QEMU-native iSCSI).
    """

    volume_type: ClassVar[str]
    brick_protocol: ClassVar[str | None] = None
    #: How nova serves this protocol (:class:`NovaBinding`), declared on the class itself (a
    #: subclass is another protocol and inherits none); ``None``: nova does not.
    nova: ClassVar[NovaBinding | None] = None

    def brick_protocol_for(self, options: RenderOptions) -> str | None:
        """The os-brick protocol used with these host options (``None``: QEMU connects)."""
        return self.brick_protocol

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        raise NotImplementedError

    # ---- what the host side needs (the hypervisor layer asks; a plugin gets the same) ---------

    def connector_options(self, options: RenderOptions) -> dict[str, Any]:
        """Keyword arguments for os-brick's connector factory (e.g. a share's mount base)."""
        return {}

    def mount_base(self, options: RenderOptions) -> str | None:
        """Where the host mounts this protocol's shares (``None``: it mounts nothing)."""
        return None

    def host_secrets(self, data: Mapping[str, Any], options: RenderOptions) -> list[HostSecret]:
        """libvirt secrets QEMU needs to open the volume, defined before the attach and removed
        with the host side (e.g. CHAP for QEMU's own iSCSI initiator)."""
        return []

    def check_host_side(self, data: Mapping[str, Any], options: RenderOptions) -> None:
        """Check what the host side connects to (portals, a share's host), before it does:
        raise :class:`~virtdriver.errors.InvalidConnectionInfo` naming the key. Called when a
        request is parsed, before any lock or connect; ``source()`` checks it again."""

    def data_key(self, data: Mapping[str, Any], options: RenderOptions) -> tuple[str, ...] | None:
        """What names the volume's data before the host connects it, for a protocol whose
        device path is only known afterwards (an iSCSI target and LUN); ``None``: the rendered
        source names it."""
        return None

    # ---- what the host needs, and online extend (read by ``doctor`` and ``extend_volume``) ----
    # A plugin declares these exactly as a built-in does; ``doctor`` lists every registered type.

    #: QEMU's block driver when QEMU itself can connect the volume (``qemu-img --help`` lists it).
    qemu_block_driver: ClassVar[str | None] = None
    #: The host option that makes QEMU connect it, when that is not the default (``--native-...``).
    qemu_option: ClassVar[str] = ""
    #: Why an attached volume of this type cannot be grown online, or ``None`` when it can.
    extend_refused: ClassVar[str | None] = None
    #: SELinux booleans the guests' QEMU (``svirt_t``) needs to open this protocol's files when
    #: they keep their file system's own label, which libvirt cannot change (an NFS mount without
    #: security labels: ``nfs_t``, ``virt_use_nfs``). ``doctor`` reports them; a refused attach
    #: names the one that is off.
    selinux_booleans: ClassVar[tuple[str, ...]] = ()
    #: Whether os-brick's multipath for this protocol is dm-multipath, built by ``multipathd``
    #: (an attach with multipath on checks that it runs).
    multipathd: ClassVar[bool] = False
    #: The oldest os-brick whose connector works for this protocol (an attach checks it first).
    min_os_brick: ClassVar[tuple[int, ...]] = ()

    def host_probe(self) -> tuple[bool, str] | None:
        """Can this host connect the volume itself (kernel, tools)? ``(ok, why)`` in a few words,
        or ``None`` when the host has no part in it (QEMU connects)."""
        return None

    def extend_refusal(self, options: RenderOptions) -> str | None:
        """Why online extend is impossible with these host options (``None``: it is possible)."""
        return self.extend_refused


@dataclass(frozen=True)
class HostSecret:
    """A libvirt secret a volume needs: usage type (``iscsi``, ``ceph``), usage name, value."""

    usage_type: str
    usage: str
    value: bytes = field(repr=False)


# ---- reading ``data`` with messages that say where the problem is ------------------------------


def _where(key: str) -> str:
    return f"{DATA}.{key}"


_SURROGATE = re.compile("[\ud800-\udfff]")  # cannot be encoded: never a path or a name


def optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidConnectionInfo(_where(key), f"{show(value)} is not a string")
    if (not value or "\n" in value or "\r" in value or "\x00" in value
            or (not value.isascii() and _SURROGATE.search(value))):
        raise InvalidConnectionInfo(_where(key), f"{show(value)} must be a non-empty single line")
    return value


def required_str(data: Mapping[str, Any], key: str) -> str:
    value = optional_str(data, key)
    if value is None:
        raise InvalidConnectionInfo(_where(key), "is missing")
    return value


def absolute_path(data: Mapping[str, Any], key: str) -> str:
    value = required_str(data, key)
    if not value.startswith("/") or "/../" in value or value.endswith(("/", "/..")):
        raise InvalidConnectionInfo(_where(key), f"{show(value)} is not an absolute path to a "
                                    "file or device")
    return value


MAX_DIGITS = 20  # every number we accept fits in 20 digits (libvirt's unsignedLong)


def whole_number(value: Any) -> Any:
    """``value`` as an ``int`` when it is one or a short ASCII digit string; else unchanged.

    Digit strings longer than :data:`MAX_DIGITS` are left as strings (and so refused by the
    caller's type check) instead of meeting the interpreter's int-from-string limit.
    """
    if (isinstance(value, str) and value.isdigit() and value.isascii()
            and len(value) <= MAX_DIGITS):
        return int(value)
    return value


def lun(value: Any, where: str, limit: int = 1 << 64) -> int:
    """``value`` as a LUN number (a JSON integer or a decimal string below ``limit``); ``true``,
    ``2.0`` or ``"0x2"`` is refused, as a spelling the device check would not compare."""
    number = whole_number(value)
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < limit:
        raise InvalidConnectionInfo(where, f"{show(value)} is not a LUN number")
    return number


def check_luns(data: Mapping[str, Any], limit: int = 1 << 64) -> None:
    """Refuse a ``target_lun``, or an entry of ``target_luns``, that is not a LUN number."""
    if data.get("target_lun") is not None:
        lun(data["target_lun"], _where("target_lun"), limit)
    luns = data.get("target_luns")
    if luns is None:
        return
    if not isinstance(luns, list):
        raise InvalidConnectionInfo(_where("target_luns"), f"{show(luns)} is not a list")
    for i, value in enumerate(luns):
        lun(value, f"{DATA}.target_luns[{i}]", limit)


def optional_bool(data: Mapping[str, Any], key: str) -> bool:
    """``data[key]`` as a boolean: only ``true``/``false`` (or absent, false) are accepted.

    A string such as ``"false"`` or a number is refused: read as a truth value it would silently
    mean the opposite of what was written, or hide a flag such as ``encrypted``.
    """
    value = data.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidConnectionInfo(_where(key), f"{show(value)} is not true or false")
    return value


def port_number(value: Any, where: str) -> int | None:
    """A TCP port given as an integer or a string of digits; ``None`` stays ``None``."""
    if value is None:
        return None
    value = whole_number(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise InvalidConnectionInfo(where, f"{show(value)} is not a TCP port number")
    return value


_AUTH_USER = re.compile(r"[A-Za-z0-9_+\-]+")  # libvirt's schema: genericName


def auth_username(data: Mapping[str, Any]) -> str:
    """``data.auth_username`` as libvirt's ``<auth username=...>`` accepts it."""
    value = required_str(data, "auth_username")
    if not _AUTH_USER.fullmatch(value):
        raise InvalidConnectionInfo(_where("auth_username"), f"{show(value)} is not a user name "
                                    "libvirt accepts (letters, digits, '_', '+', '-')")
    return value


def split_portal(portal: str, where: str) -> tuple[str, int | None]:
    """``192.0.2.5:3260`` or ``[2001:db8::5]:3260`` into host and port."""
    host, port = split_host_port(portal, where)
    return host, port_number(port, where)


#: The image formats both QEMU opens and libvirt's schema (``storageFormat``) names; libvirt
#: calls QEMU's ``parallels`` ``ploop`` and knows no ``vhdx``.
DISK_FORMATS: Final = ("raw", "qcow2", "vmdk", "vdi", "vpc", "qed", "ploop")


def disk_format(data: Mapping[str, Any]) -> str:
    """``data.format`` (qcow2, raw, ...) or raw."""
    value = optional_str(data, "format") or "raw"
    if value not in DISK_FORMATS:
        hint = " (libvirt calls it 'ploop')" if value == "parallels" else ""
        raise InvalidConnectionInfo(_where("format"),
                                    f"{show(value)} is not a disk format libvirt and QEMU both "
                                    f"open ({', '.join(DISK_FORMATS)}){hint}")
    return value
