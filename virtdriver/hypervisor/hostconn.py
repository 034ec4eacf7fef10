"""Host-side resources of a volume: how to release them, kept beside the locks.

Whether a volume is still used on this host is always answered from libvirt's live state
(:mod:`virtdriver.hypervisor.volume_users`). What is kept on disk is only *how* to release what
an attach set up on the host — os-brick's connection (properties without secrets, device info),
libvirt secrets created for QEMU (CHAP), the share mounted for file volumes — in
``<state_dir>/connections/<volume id>.json``. A record that no guest's disk matches any more is a
leaked connection, which ``audit`` reports.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import libvirt

from virtdriver.config.secret import LibvirtSecret, SecretUsage
from virtdriver.errors import DamagedRecord, HostConnectFailed, StateError, WrongDevice
from virtdriver.hostfiles import read_bytes
from virtdriver.hypervisor import brick, deviceid, mounts
from virtdriver.hypervisor.locks import connections_lock, file_token
from virtdriver.policy.migration import Arrival
from virtdriver.secrets import without_secrets
from virtdriver.volume.base import HostSecret


@dataclass
class HostRecord:
    """What was set up on this host for one volume."""

    protocol: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    device_info: dict[str, Any] = field(default_factory=dict)
    secrets: list[tuple[str, str]] = field(default_factory=list)  # (type, usage)
    mount_point: str | None = None
    connector_options: dict[str, Any] = field(default_factory=dict)
    # Guests expected by live migration (prepared here, not arrived yet): their disks, as the
    # sharing rules will see them, written as Arrival.to_json gives them.
    arriving: list[dict[str, Any]] = field(default_factory=list)


class HostConnections:
    """The records under ``<state_dir>/connections``, one per volume (named by
    :func:`~virtdriver.hypervisor.locks.file_token`, the volume id kept inside)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.records = state_dir / "connections"

    def path(self, volume_id: str) -> Path:
        return self.records / f"{file_token(volume_id)}.json"

    def load(self, volume_id: str) -> HostRecord | None:
        """The volume's record, ``None`` when there is none; :class:`StateError` when damaged."""
        return self._read(self.path(volume_id))[1]

    def _read(self, path: Path) -> tuple[str | None, HostRecord | None]:
        try:
            text = read_bytes(path).decode("utf-8")
        except FileNotFoundError:
            if os.path.islink(path):  # a link that leads nowhere is damage, not "no record"
                raise DamagedRecord(path, "a symbolic link to a file that does not exist"
                                    ) from None
            return None, None
        except (OSError, ValueError) as exc:
            raise DamagedRecord(path, str(getattr(exc, "strerror", None) or exc)) from None
        return self._parse(path, text)

    def _parse(self, path: Path, text: str) -> tuple[str | None, HostRecord | None]:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise DamagedRecord(path, str(exc)) from None
        try:
            if not isinstance(raw, dict):
                raise TypeError("not a JSON object")
            vid = raw.pop("volume_id", None)
            raw["secrets"] = [tuple(s) for s in raw.get("secrets", [])]
            record = HostRecord(**raw)
            if not isinstance(record.properties, dict) or not isinstance(record.device_info, dict):
                raise TypeError("properties or device_info is not an object")
            if not isinstance(record.arriving, list) or not all(
                    isinstance(a, dict) for a in record.arriving):
                raise TypeError("arriving is not a list of objects")
            for arrival in record.arriving:
                Arrival.from_json(arrival)
        except (TypeError, ValueError) as exc:
            raise DamagedRecord(path, str(exc)) from None
        return vid, record

    def save(self, volume_id: str, record: HostRecord) -> None:
        """Write the record whole or not at all: a new file, renamed over the old one."""
        path = self.path(volume_id)
        values = {f.name: getattr(record, f.name) for f in fields(record)}
        text = json.dumps(values | {"volume_id": volume_id}, default=str).encode()
        tmp = path.with_suffix(".tmp")
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:  # the first record in this state directory
                self.records.mkdir(parents=True, exist_ok=True)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(text)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            raise StateError(f"cannot write the host-connection record {path}: "
                             f"{exc.strerror or exc} (check the state directory)") from None

    def connect(self, volume_id: str, protocol: str, properties: dict[str, Any], *,
                record: HostRecord | None = None, **connector_options: Any) -> dict[str, Any]:
        """os-brick connect (idempotent for an already connected volume), recorded.

        A share is mounted below the connector's mount point base: that base is made a shared
        mount first, so the mount reaches the guests' QEMU (see :mod:`.mounts`). ``record``: the
        volume's record as the caller read it under the volume's lock (else it is read here).
        """
        for key, value in connector_options.items():
            if key.endswith("_mount_point_base") and value:
                mounts.ensure_shared(str(value), self.state_dir / "locks")
        if record is None:  # a damaged record stops us before connecting
            record = self.load(volume_id) or HostRecord()
        with connections_lock(self.state_dir / "locks", sweeping=False):  # not swept meanwhile
            device_info = brick.connect(protocol, properties, self.state_dir,
                                        **connector_options)
            self._check_device(volume_id, protocol, properties, device_info,
                               connected_before=record.protocol is not None,
                               **connector_options)
            record.protocol = protocol
            record.properties = without_secrets(properties)
            record.device_info = without_secrets(device_info)
            record.connector_options = dict(connector_options)
            mount_base = connector_options.get(f"{protocol.lower()}_mount_point_base")
            if mount_base and device_info.get("path"):
                record.mount_point = os.path.dirname(device_info["path"])
            try:
                self.save(volume_id, record)
            except StateError:
                brick.disconnect(protocol, properties, device_info, self.state_dir,
                                 **connector_options)
                raise
        return device_info

    def _check_device(self, volume_id: str, protocol: str, properties: dict[str, Any],
                      device_info: dict[str, Any], *, connected_before: bool,
                      **connector_options: Any) -> None:
        """Refuse a device that is not the volume connection_info names
        (:mod:`.deviceid`); undo this connect without touching that device."""
        problem = deviceid.mismatch(protocol, properties, device_info.get("path"))
        if problem is None:
            return
        if not connected_before:  # os-brick finds its devices from the properties, not the path
            brick.disconnect(protocol, properties, {k: v for k, v in device_info.items()
                                                    if k != "path"}, self.state_dir,
                             force=True, **connector_options)
        raise WrongDevice(f"volume {volume_id}: the device os-brick connected is not the "
                          f"volume connection_info names ({problem}); refusing it, nothing "
                          "was attached")

    def undo_failed_connect(self, protocol: str, properties: dict[str, Any],
                            **connector_options: Any) -> None:
        """After os-brick's connect failed: its disconnect, forced, for what it may have left."""
        brick.disconnect(protocol, properties, None, self.state_dir, force=True,
                         **connector_options)

    def add_secret(self, conn: libvirt.virConnect, volume_id: str, secret: HostSecret) -> None:
        """Define (or refresh) a private libvirt secret for QEMU, recorded for removal."""
        xml = LibvirtSecret(ephemeral="no", private="yes",
                            usage=SecretUsage(type=secret.usage_type,
                                              target=secret.usage)).to_xml()
        record = self.load(volume_id) or HostRecord()
        try:
            try:
                found = conn.secretLookupByUsage(USAGE_TYPES[secret.usage_type], secret.usage)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_SECRET:
                    raise
                found = conn.secretDefineXML(xml, 0)
            found.setValue(secret.value, 0)
        except libvirt.libvirtError as exc:
            raise HostConnectFailed(f"cannot store the {secret.usage_type} secret for volume "
                                    f"{volume_id} in libvirt", exc.get_error_message()) from None
        if (secret.usage_type, secret.usage) not in record.secrets:
            record.secrets.append((secret.usage_type, secret.usage))
        self.save(volume_id, record)

    def release(self, volume_id: str, conn: libvirt.virConnect, mounted_in_use: Any,
                properties: dict[str, Any] | None = None) -> bool:
        """Undo everything recorded for the volume; ``False`` when nothing was recorded.

        ``mounted_in_use(path)`` answers whether any guest still has a file below a mount point
        (other volumes on the same share keep it mounted).
        """
        record = self.load(volume_id)
        if record is None:
            return False
        problem = deviceid.mismatch(record.protocol, record.properties,
                                    record.device_info.get("path"))
        if problem is not None:  # another volume now sits where this one was: leave it
            raise StateError(f"volume {volume_id}: not disconnecting its host side: {problem}; "
                             "the device changed since it was connected (see 'virtdriver "
                             "audit')")
        if record.protocol is not None:
            brick.disconnect(record.protocol, properties or record.properties,
                             record.device_info, self.state_dir, **record.connector_options)
        for usage_type, usage in record.secrets:
            _undefine_secret(conn, usage_type, usage)
        if record.mount_point and not mounted_in_use(record.mount_point):
            unmount(record.mount_point)
        self.forget(volume_id)
        return True

    def forget(self, volume_id: str) -> None:
        """Drop the record without releasing anything (the resources belong to someone else)."""
        try:
            self.path(volume_id).unlink(missing_ok=True)
        except OSError as exc:
            raise StateError(f"cannot remove {self.path(volume_id)}: "
                             f"{exc.strerror or exc}") from None

    def scan(self) -> tuple[list[str], list[Path]]:
        """Volume ids with a readable record, and the paths of damaged records."""
        found, damaged = [], []
        for path in self._paths():
            try:
                vid, _ = self._read(path)
            except StateError:
                damaged.append(path)
                continue
            found.append(vid if isinstance(vid, str) else path.stem)
        return sorted(found), damaged

    def arrivals(self) -> list[Arrival]:
        """Every guest expected here by live migration (see :meth:`arrivals_listed`)."""
        return self.arrivals_listed()[0]

    def arrivals_listed(self) -> tuple[list[Arrival], frozenset[str] | None]:
        """Every guest expected here by live migration, over all readable records, and the
        records' file names as listed (``None`` when the directory cannot be listed)."""
        found: list[Arrival] = []
        names = self._listed()
        for name in names or ():
            notes = self._read_arrivals(name)
            if notes is not None:
                found += notes
        return found, None if names is None else frozenset(names)

    def _read_arrivals(self, name: str) -> list[Arrival] | None:
        """One record's arrival notes (``None`` when it cannot be read or parsed: audit reports
        it; it must not block other volumes)."""
        try:
            raw = read_bytes(f"{self.records}/{name}")
        except (OSError, ValueError):  # ValueError: no end (a link to a device)
            return None
        try:
            record = self._parse(self.records / name, raw.decode("utf-8"))[1]
        except (StateError, UnicodeDecodeError):
            return None
        return [] if record is None else [Arrival.from_json(a) for a in record.arriving]

    def _paths(self) -> list[Path]:
        return [self.records / name for name in self._names()]

    def _names(self) -> list[str]:
        """The records' file names, sorted."""
        return self._listed() or []

    def _listed(self) -> list[str] | None:
        """The records' file names, sorted: none when there is no directory yet, ``None`` when
        it cannot be listed."""
        try:
            names = os.listdir(self.records)
        except FileNotFoundError:
            return []
        except OSError:
            return None
        return sorted(name for name in names if name.endswith(".json"))

    def connected(self) -> list[str]:
        """Volume ids with host-side resources recorded."""
        return self.scan()[0]



USAGE_TYPES = {"iscsi": libvirt.VIR_SECRET_USAGE_TYPE_ISCSI,
               "ceph": libvirt.VIR_SECRET_USAGE_TYPE_CEPH}


def _undefine_secret(conn: libvirt.virConnect, usage_type: str, usage: str) -> None:
    try:
        conn.secretLookupByUsage(USAGE_TYPES[usage_type], usage).undefine()
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_SECRET:
            raise HostConnectFailed(f"cannot remove the {usage_type} secret {usage}",
                                    exc.get_error_message()) from None


def unmount(mount_point: str) -> None:
    """Unmount a share nobody uses any more (a no-op when it is not mounted)."""
    if not os.path.ismount(mount_point):
        return
    done = subprocess.run(["umount", mount_point], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HostConnectFailed(f"cannot unmount {mount_point}", done.stderr.strip())
