"""Host-side connections: os-brick connect/disconnect and the record of how to undo them.

Whether a volume is still used on this host is always answered from libvirt's live state
(:mod:`virtdriver.hypervisor.usage`). What is kept on disk is only *how* to disconnect it —
os-brick's connection properties (secrets removed) and device info — in
``<state_dir>/connections/<volume id>.json``, written on connect and removed on disconnect. A record
without any guest using the volume is a leaked connection, which ``audit`` reports.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from virtdriver.hypervisor import brick
from virtdriver.secrets import without_secrets


class HostConnections:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.records = state_dir / "connections"

    def _record(self, volume_id: str) -> Path:
        return self.records / f"{volume_id}.json"

    def connect(self, volume_id: str, protocol: str, properties: dict[str, Any]) -> dict[str, Any]:
        """Connect (idempotent in os-brick for an already connected volume) and record it."""
        device_info = brick.connect(protocol, properties, self.state_dir)
        self.records.mkdir(parents=True, exist_ok=True)
        record = {"protocol": protocol, "properties": without_secrets(properties),
                  "device_info": without_secrets(device_info)}
        tmp = self._record(volume_id).with_suffix(".tmp")
        tmp.write_text(json.dumps(record, default=str))
        os.replace(tmp, self._record(volume_id))
        return device_info

    def disconnect(self, volume_id: str, properties: dict[str, Any] | None = None) -> bool:
        """Disconnect the volume if it was connected here; ``False`` when there was nothing."""
        path = self._record(volume_id)
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:
            return False
        brick.disconnect(record["protocol"], properties or record["properties"],
                         record["device_info"], self.state_dir)
        path.unlink(missing_ok=True)
        return True

    def forget(self, volume_id: str) -> None:
        """Drop the record without disconnecting: the device turned out to belong to another
        attachment (the same data under another volume id), which must keep it."""
        self._record(volume_id).unlink(missing_ok=True)

    def connected(self) -> list[str]:
        """Volume ids with a host connection recorded."""
        if not self.records.is_dir():
            return []
        return sorted(p.stem for p in self.records.glob("*.json"))
