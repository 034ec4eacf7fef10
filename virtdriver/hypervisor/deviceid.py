"""Which volume a kernel block device is, read from sysfs, against what connection_info names.

os-brick finds a volume's device by where it should be (an iSCSI by-path link, a SCSI address, a
namespace); a leftover device or a stale link can put another volume there (OSSA-2023-003,
CVE-2023-2088). Before a guest gets the device, each of its paths (a multipath map's too) is
compared with what the storage service said, where it said it:

- iSCSI, iSER: the session's target name and the LUN (``target_iqn``/``target_lun``, or the
  ``target_iqns``/``target_luns`` of every path); a SCSI disk in no iSCSI session is not one;
- Fibre Channel: the remote port's WWPN and the LUN (``target_wwn``/``target_wwns``,
  ``target_lun``);
- NVMe-oF: the subsystem NQN, the namespace's UUID and NGUID (``target_nqn``/``nqn``,
  ``vol_uuid``/``uuid``, ``volume_nguid``/``nguid``);
- RBD mapped by the kernel: the pool and image (``name``).

A protocol or a fact connection_info does not state is not compared; a LUN it states in a
spelling that is no LUN number (``true``, ``2.0``, ``"0x2"``) is a mismatch, never skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from virtdriver.errors import InvalidConnectionInfo
from virtdriver.volume.base import lun

SYS: Final = Path("/sys")
SCSI_PROTOCOLS: Final = ("ISCSI", "ISER", "FIBRE_CHANNEL")
_SCSI_ADDRESS = re.compile(r"(\d+):(\d+):(\d+):(\d+)")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _disks(device: str) -> list[str]:
    """The block devices behind ``device``: itself, or a device-mapper map's paths."""
    name = os.path.basename(os.path.realpath(device))
    slaves = sorted(p.name for p in (SYS / "block" / name / "slaves").glob("*"))
    return slaves or [name]


class _Uncomparable(Exception):
    """A fact connection_info states in a form that cannot be compared (the phrase says so)."""


def _stated(properties: Mapping[str, Any], *keys: str) -> tuple[str, list[object]]:
    """The first of ``keys`` that connection_info sets, and its value(s) as a list."""
    key = next((k for k in keys if properties.get(k) not in (None, "", [], ())), keys[0])
    value = properties.get(key)
    return key, list(value) if isinstance(value, (list, tuple)) else [] if value is None else [
        value]


def _texts(properties: Mapping[str, Any], *keys: str) -> set[str]:
    """The names stated under the first of ``keys`` set; one that is not text is refused."""
    key, values = _stated(properties, *keys)
    texts = set()
    for v in values:
        if not isinstance(v, str):
            raise _Uncomparable(f"connection_info's {key} {v!r} is not a string")
        texts.add(v)
    return texts


def _luns(properties: Mapping[str, Any]) -> set[int]:
    """The LUNs connection_info states, each read as rendering reads it
    (:func:`virtdriver.volume.base.lun`); ``true``, ``2.0`` or ``"0x2"`` is refused, never
    compared loosely or skipped."""
    key, values = _stated(properties, "target_luns", "target_lun")
    try:
        return {lun(v, f"connection_info's {key}") for v in values}
    except InvalidConnectionInfo as exc:
        raise _Uncomparable(str(exc)) from None


def _hex(value: str) -> str:
    return value.lower().removeprefix("0x").replace("-", "").replace(":", "")


def mismatch(protocol: str | None, properties: Mapping[str, Any], device: object
             ) -> str | None:
    """What about ``device`` (os-brick's ``path``) contradicts ``properties`` (one phrase), or
    ``None``; a path that is not a device path (RBD's librados handle) says nothing."""
    if protocol is None or not isinstance(device, str) or not device.startswith("/dev/"):
        return None
    try:
        return _mismatch(protocol, properties, device)
    except _Uncomparable as exc:
        return str(exc)


def _mismatch(protocol: str, properties: Mapping[str, Any], device: str) -> str | None:
    if protocol in SCSI_PROTOCOLS:
        return _scsi_mismatch(protocol, properties, _disks(device))
    if protocol == "NVMEOF":
        return _nvme_mismatch(properties, os.path.basename(os.path.realpath(device)))
    if protocol == "RBD":
        return _rbd_mismatch(properties, os.path.basename(os.path.realpath(device)))
    return None


def _scsi_mismatch(protocol: str, properties: Mapping[str, Any],
                   disks: Iterable[str]) -> str | None:
    luns = _luns(properties)
    if protocol == "FIBRE_CHANNEL":
        targets = {_hex(t) for t in _texts(properties, "target_wwns", "target_wwn")}
    else:
        targets = _texts(properties, "target_iqns", "target_iqn")
    for disk in disks:
        scsi = Path(os.path.realpath(SYS / "block" / disk / "device"))
        address = _SCSI_ADDRESS.fullmatch(scsi.name)
        if address is None:
            continue  # not a SCSI disk (a partition, a loop device): nothing to compare
        lun = int(address.group(4))
        if luns and lun not in luns:
            return (f"/dev/{disk} is LUN {lun}, connection_info says "
                    f"{' or '.join(map(str, sorted(luns)))}")
        if protocol != "FIBRE_CHANNEL" and _iscsi_session(scsi) is None:
            return f"/dev/{disk} is a SCSI disk in no iSCSI session"
        target = _scsi_target(protocol, scsi)
        if targets and target is not None and target not in targets:
            return f"/dev/{disk} belongs to target {target}, connection_info says " \
                   f"{' or '.join(sorted(targets))}"
    return None


def _scsi_target(protocol: str, scsi: Path) -> str | None:
    """The iSCSI target name, or the FC remote port's WWPN, of a SCSI device's path."""
    if protocol == "FIBRE_CHANNEL":
        target = scsi.parent.name  # targetH:C:T
        port = _read(SYS / "class" / "fc_transport" / target / "port_name")
        return _hex(port) if port else None
    session = _iscsi_session(scsi)
    if session is None:
        return None
    return _read(SYS / "class" / "iscsi_session" / session / "targetname") or None


def _nvme_mismatch(properties: Mapping[str, Any], name: str) -> str | None:
    block = SYS / "block" / name
    nqns = _texts(properties, "target_nqn", "nqn")
    found = _read(block / "device" / "subsysnqn")
    if nqns and found and found not in nqns:
        return f"/dev/{name} is in subsystem {found}, connection_info says {sorted(nqns)[0]}"
    for keys, fact in ((("vol_uuid", "uuid"), "uuid"), (("volume_nguid", "nguid"), "nguid")):
        wanted = next(iter(_texts(properties, *keys)), None)
        seen = _read(block / fact)
        if wanted and seen and _hex(seen) != _hex(wanted):
            return f"/dev/{name} has {fact} {seen}, connection_info says {wanted}"
    return None


def _rbd_mismatch(properties: Mapping[str, Any], name: str) -> str | None:
    number = name.removeprefix("rbd")
    wanted = next(iter(_texts(properties, "name")), None)
    if not number.isdigit() or wanted is None:
        return None
    device = SYS / "bus" / "rbd" / "devices" / number
    found = f"{_read(device / 'pool')}/{_read(device / 'name')}"
    if found != "/" and found != wanted:
        return f"/dev/{name} maps {found}, connection_info says {wanted}"
    return None


def _iscsi_session(scsi: Path) -> str | None:
    """The iSCSI session (``sessionN``) a SCSI device's sysfs path runs through, if any."""
    return next((part for part in scsi.parts if re.fullmatch(r"session\d+", part)), None)
