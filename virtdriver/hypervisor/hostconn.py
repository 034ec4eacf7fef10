"""Host-side resources of a volume: how to release them, kept beside the locks.

Whether a volume is still used on this host is always answered from libvirt's live state
(:mod:`virtdriver.hypervisor.usage`). What is kept on disk is only *how* to release what an attach
set up on the host — os-brick's connection (properties without secrets, device info), libvirt
secrets created for QEMU (CHAP), the share mounted for file volumes — in
``<state_dir>/connections/<volume id>.json``. A record that no guest's disk matches any more is a
leaked connection, which ``audit`` reports.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import libvirt

from virtdriver.errors import HostConnectFailed
from virtdriver.hypervisor import brick, mounts
from virtdriver.secrets import without_secrets


@dataclasses.dataclass
class HostRecord:
    """What was set up on this host for one volume."""

    protocol: str | None = None
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)
    device_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    secrets: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (type, usage)
    mount_point: str | None = None
    connector_options: dict[str, Any] = dataclasses.field(default_factory=dict)


class HostConnections:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.records = state_dir / "connections"

    def _path(self, volume_id: str) -> Path:
        return self.records / f"{volume_id}.json"

    def load(self, volume_id: str) -> HostRecord | None:
        try:
            raw = json.loads(self._path(volume_id).read_text())
        except FileNotFoundError:
            return None
        raw["secrets"] = [tuple(s) for s in raw.get("secrets", [])]
        return HostRecord(**raw)

    def save(self, volume_id: str, record: HostRecord) -> None:
        self.records.mkdir(parents=True, exist_ok=True)
        tmp = self._path(volume_id).with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(record), default=str))
        os.replace(tmp, self._path(volume_id))

    def connect(self, volume_id: str, protocol: str, properties: dict[str, Any],
                **connector_options: Any) -> dict[str, Any]:
        """os-brick connect (idempotent for an already connected volume), recorded.

        A share is mounted below the connector's mount point base: that base is made a shared
        mount first, so the mount reaches the guests' QEMU (see :mod:`.mounts`).
        """
        for key, value in connector_options.items():
            if key.endswith("_mount_point_base") and value:
                mounts.ensure_shared(str(value), self.state_dir / "locks")
        device_info = brick.connect(protocol, properties, self.state_dir, **connector_options)
        record = self.load(volume_id) or HostRecord()
        record.protocol = protocol
        record.properties = without_secrets(properties)
        record.device_info = without_secrets(device_info)
        record.connector_options = dict(connector_options)
        mount_base = connector_options.get(f"{protocol.lower()}_mount_point_base")
        if mount_base and device_info.get("path"):
            record.mount_point = os.path.dirname(device_info["path"])
        self.save(volume_id, record)
        return device_info

    def add_secret(self, conn: libvirt.virConnect, volume_id: str, usage_type: str, usage: str,
                   value: bytes) -> None:
        """Define (or refresh) a private libvirt secret for QEMU, recorded for removal."""
        xml = (f"<secret ephemeral='no' private='yes'><usage type='{usage_type}'>"
               f"<target>{usage}</target></usage></secret>")
        try:
            try:
                secret = conn.secretLookupByUsage(USAGE_TYPES[usage_type], usage)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_SECRET:
                    raise
                secret = conn.secretDefineXML(xml, 0)
            secret.setValue(value, 0)
        except libvirt.libvirtError as exc:
            raise HostConnectFailed(f"cannot store the {usage_type} secret for volume "
                                    f"{volume_id} in libvirt", exc.get_error_message()) from None
        record = self.load(volume_id) or HostRecord()
        if (usage_type, usage) not in record.secrets:
            record.secrets.append((usage_type, usage))
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
        self._path(volume_id).unlink(missing_ok=True)

    def connected(self) -> list[str]:
        """Volume ids with host-side resources recorded."""
        if not self.records.is_dir():
            return []
        return sorted(p.stem for p in self.records.glob("*.json"))


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
