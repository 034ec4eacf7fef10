"""The render path: ``connection_info`` + attach mode → a libvirt ``<disk>``."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from virtdriver.config import (
    Address,
    Alias,
    BlockIO,
    Disk,
    Driver,
    Encryption,
    IoTune,
    Secret,
    Target,
)
from virtdriver.errors import InvalidConnectionInfo, InvalidRenderOption, show
from virtdriver.policy import (
    apply_policy,
    check_block_sizes,
    check_label_options,
    check_option_flag,
    check_option_text,
    check_throttle,
    effective_attach_mode,
    fitting_serial,
)
from virtdriver.policy.identity import UUID_PATTERN, alias_for, check_volume_id
from virtdriver.shapes import normalize
from virtdriver.volume.base import RenderOptions, optional_bool, whole_number
from virtdriver.volume.registry import get_driver

LOG = logging.getLogger(__name__)

BUS_PREFIX: Final = {"virtio": "vd", "scsi": "sd", "sata": "sd", "usb": "sd", "ide": "hd"}
DEVICES: Final = ("disk", "lun")
MAX_SCSI_UNIT: Final = 16383
UNSIGNED_LONG_MAX: Final = 2**64 - 1  # libvirt's schema type for every <iotune> value

_TARGET_DEV = re.compile(r"(vd|sd|hd)[a-z]{1,3}")
_USER_ALIAS = re.compile(r"ua-[A-Za-z0-9_-]+")  # the only aliases libvirt keeps
_SERIAL = re.compile(r"[A-Za-z0-9_.+\- ]{1,255}")

QOS_KEYS: Final = frozenset(f"{kind}_{unit}_sec{suffix}"
                            for kind in ("total", "read", "write") for unit in ("bytes", "iops")
                            for suffix in ("", "_max", "_max_length")) | {"size_iops_sec"}


def build_disk(connection_info: Mapping[str, Any], *, attach_mode: str | None = None,
               target_dev: str = "vdb", bus: str = "virtio", device: str = "disk",
               scsi_unit: int | None = None, luks_secret_uuid: str | None = None,
               mount_base: str | None = None, label_policy: str = "auto",
               shared_image_label: str | None = None, native_iscsi: bool = False,
               native_glusterfs: bool = False, initiator_iqn: str | None = None,
               alias: str | None = None,
               security_models: Sequence[str] | None = None, cache: str | None = None,
               error_policy: str | None = None, rerror_policy: str | None = None) -> Disk:
    """Render the ``<disk>`` for a volume.

    ``connection_info`` may have any shape :func:`virtdriver.shapes.normalize` accepts;
    ``attach_mode`` ``None`` means the attachment record's own, else ``rw``.
    Raises a :class:`~virtdriver.errors.VirtDriverError` subclass naming the offending input for
    anything invalid or unsafe; never returns XML libvirt's schema would reject. ``alias``
    overrides the volume's own user alias (a guest that already holds that alias).
    ``security_models``: the security drivers of the libvirt the disk is for (its capabilities'
    ``<secmodel>``s); per-disk labels are written only for those. ``None`` (the default, for a
    disk rendered without a host) writes them for every model the label policy concerns.
    ``cache`` (``none`` or ``directsync``), ``error_policy`` and ``rerror_policy``: the
    attachment's own (see :func:`virtdriver.policy.apply_policy`).
    """
    connection_info, attach_mode = normalize(connection_info, attach_mode)
    # Every message quotes input through errors.show(), bounded in depth and length.
    data = connection_info.get("data")
    if not isinstance(data, Mapping):
        raise InvalidConnectionInfo("connection_info.data", "is missing or not a JSON object")
    _check_target(target_dev, bus, device, scsi_unit)
    check_label_options(label_policy, shared_image_label)
    options = RenderOptions(
        mount_base=check_option_text("mount_base", mount_base),
        native_iscsi=check_option_flag("native_iscsi", native_iscsi),
        native_glusterfs=check_option_flag("native_glusterfs", native_glusterfs),
        initiator_iqn=check_option_text("initiator_iqn", initiator_iqn))
    check_option_text("shared_image_label", shared_image_label)
    driver = get_driver(connection_info.get("driver_volume_type"))
    volume = driver.source(data, options)
    lun = device == "lun"

    multiattach = connection_info.get("multiattach", False)
    if not isinstance(multiattach, bool):
        raise InvalidConnectionInfo("connection_info.multiattach", f"{show(multiattach)} is not "
                                    "true or false")
    mode = effective_attach_mode(attach_mode, data.get("access_mode"))
    disk = Disk(
        type=volume.disk_type, device=device,
        driver=Driver(name="qemu", type=volume.format, cache=volume.cache, io=volume.io,
                      discard=_discard(data)),
        source=volume.source,
        target=Target(dev=target_dev, bus=bus),
    )
    if not lun:
        disk.blockio = _block_sizes(data, bus)
        serial = _serial(connection_info.get("serial"))
        disk.serial = fitting_serial(bus, serial) if serial is not None else None
    qos = data.get("qos_specs")
    if qos is not None:
        disk.iotune = iotune_from_qos(qos)
    if luks_secret_uuid is not None:
        if not isinstance(luks_secret_uuid, str) or not UUID_PATTERN.fullmatch(luks_secret_uuid):
            raise InvalidRenderOption(f"luks_secret_uuid: {show(luks_secret_uuid)} is not a UUID")
        disk.encryption = Encryption(format="luks",
                                     secret=Secret(type="passphrase", uuid=luks_secret_uuid))
    if alias is not None and (not isinstance(alias, str) or not _USER_ALIAS.fullmatch(alias)):
        raise InvalidRenderOption(f"alias: {show(alias)} is not a user alias (ua- and letters, "
                                  "digits, '_', '-')")
    alias = alias or user_alias(connection_info)
    if alias is not None:
        disk.alias = Alias(name=alias)
    if scsi_unit is not None:
        disk.address = Address.drive(scsi_unit)
    encrypted = optional_bool(data, "encrypted") or luks_secret_uuid is not None
    return apply_policy(disk, attach_mode=mode, multiattach=multiattach,
                        host_attached=volume.host_attached, encrypted=encrypted,
                        label_policy=label_policy, shared_label=shared_image_label,
                        security_models=_models(security_models), cache=cache,
                        error_policy=error_policy, rerror_policy=rerror_policy)


def _models(models: object) -> tuple[str, ...] | None:
    if models is None:
        return None
    if (isinstance(models, (str, bytes, bytearray)) or not isinstance(models, Sequence)
            or not all(isinstance(m, str) for m in models)):
        raise InvalidRenderOption(f"security_models: {show(models)} is not a list of security "
                                  "model names")
    return tuple(models)


MAX_NESTING: Final = 32


def check_nesting(value: object, where: str = "connection_info", limit: int = MAX_NESTING) -> None:
    """Refuse documents nested deeper than ``limit`` (a real one is about 3 levels deep).

    Checked without recursion, before anything recursive (``repr`` in messages, ``deepcopy``)
    could hit the interpreter's recursion limit instead of giving a typed error.
    """
    stack: list[tuple[object, str, int]] = [(value, where, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, Mapping):
            items = [(f"{path}.{k}" if isinstance(k, str) else f"{path}[{show(k)}]", v)
                     for k, v in node.items()]
        elif isinstance(node, (list, tuple)):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(node)]
        else:
            continue
        if depth >= limit:
            raise InvalidConnectionInfo(path[:200], f"is nested more than {limit} levels deep")
        stack.extend((v, p, depth + 1) for p, v in items)


def volume_id(connection_info: Mapping[str, Any]) -> str | None:
    """The volume's id: ``data.volume_id``, else ``serial`` (Cinder sets both to the UUID)."""
    data = connection_info.get("data")
    value = data.get("volume_id") if isinstance(data, Mapping) else None
    where = "connection_info.data.volume_id"
    if value is None:
        value, where = connection_info.get("serial"), "connection_info.serial"
    if value is None:
        return None
    return check_volume_id(value, where)


def user_alias(connection_info: Mapping[str, Any]) -> str | None:
    """``ua-<encoded volume id>``, the alias by which the attachment is found again."""
    vid = volume_id(connection_info)
    return None if vid is None else alias_for(vid)


def _check_target(target_dev: object, bus: object, device: object, scsi_unit: object) -> None:
    _refuse_target(target_dev, bus, device, scsi_unit)


def _refuse_target(target_dev: object, bus: object, device: object, scsi_unit: object) -> None:
    if not isinstance(bus, str) or bus not in BUS_PREFIX:
        raise InvalidRenderOption(f"bus: {show(bus)} is not one of {', '.join(BUS_PREFIX)}")
    if not isinstance(device, str) or device not in DEVICES:
        raise InvalidRenderOption(f"device: {show(device)} is not 'disk' or 'lun'")
    if not isinstance(target_dev, str) or not _TARGET_DEV.fullmatch(target_dev):
        raise InvalidRenderOption(f"target_dev: {show(target_dev)} is not a disk device name such "
                                  "as vdb or sdc")
    if not target_dev.startswith(BUS_PREFIX[bus]):
        raise InvalidRenderOption(f"target_dev: {show(target_dev)} does not fit bus {show(bus)} "
                                  f"(use {BUS_PREFIX[bus]}X)")
    if scsi_unit is not None:
        if bus != "scsi":
            raise InvalidRenderOption("scsi_unit is only meaningful with bus 'scsi'")
        if (isinstance(scsi_unit, bool) or not isinstance(scsi_unit, int)
                or not 0 <= scsi_unit <= MAX_SCSI_UNIT):
            raise InvalidRenderOption(f"scsi_unit: {show(scsi_unit)} is not a unit number from 0 "
                                      f"to {MAX_SCSI_UNIT}")


def _serial(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _SERIAL.fullmatch(value):
        raise InvalidConnectionInfo("connection_info.serial",
                                    f"{show(value)} is not a disk serial "
                                    "(letters, digits, space, '_', '.', '+', '-')")
    return value


def _discard(data: Mapping[str, Any]) -> str | None:
    return "unmap" if optional_bool(data, "discard") else None


def _block_size(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    value = whole_number(value)
    if (isinstance(value, bool) or not isinstance(value, int) or not 512 <= value <= 32768
            or value & (value - 1)):
        raise InvalidConnectionInfo(f"connection_info.data.{key}", f"{show(value)} is not a power "
                                    "of two from 512 to 32768")
    return value


def _block_sizes(data: Mapping[str, Any], bus: str) -> BlockIO | None:
    logical = _block_size(data, "logical_block_size")
    physical = _block_size(data, "physical_block_size")
    check_block_sizes(bus, logical, physical)
    if logical is None and physical is None:
        return None
    return BlockIO(logical_block_size=logical, physical_block_size=physical)


def iotune_from_qos(qos: object) -> IoTune | None:
    """``<iotune>`` from Cinder's front-end ``qos_specs``; ``None`` when nothing is limited.

    Unknown keys are ignored with a warning; what libvirt or QEMU would refuse is refused by
    :func:`virtdriver.policy.check_throttle`.
    """
    where = "connection_info.data.qos_specs"
    if not isinstance(qos, Mapping):
        raise InvalidConnectionInfo(where, f"{show(qos)} is not a JSON object")
    values: dict[str, Any] = {}  # (every one an int; IoTune also holds a group name)
    for key, raw in qos.items():
        if key not in QOS_KEYS:
            LOG.warning("ignoring unknown QoS key %r", key)
            continue
        value = raw if raw.__class__ is int else whole_number(raw)
        if ((value.__class__ is not int
             and (isinstance(value, bool) or not isinstance(value, int)))
                or not 0 <= value <= UNSIGNED_LONG_MAX):
            raise InvalidConnectionInfo(f"{where}.{key}",
                                        f"{show(raw)} is not a non-negative integer "
                                        f"(at most {UNSIGNED_LONG_MAX})")
        if value:
            values[key] = value
    if not values:
        return None  # nothing limited: nothing to refuse
    check_throttle(values, where)
    return IoTune(**values)
