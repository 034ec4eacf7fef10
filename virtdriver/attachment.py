"""An attachment as the compute API shows it, read back from a guest's disk."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from virtdriver.config import Disk
from virtdriver.hypervisor.domains import DiskUse
from virtdriver.policy.identity import ALIAS_PREFIX  # noqa: F401 - re-exported


@dataclass(frozen=True)
class Attachment:
    """One volume attached to one guest, in the compute API's os-volume_attachments shape."""

    device: str
    id: str
    serverId: str  # noqa: N815 - the compute API's spelling
    volumeId: str  # noqa: N815
    attach_mode: str
    shareable: bool
    source: str
    server_name: str
    target_dev: str
    bus: str | None
    cache: str | None
    live: bool
    error_policy: str | None = None  # libvirt's; None: QEMU's default (enospc)
    rerror_policy: str | None = None  # None: as error_policy

    def to_api(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_use(cls, use: DiskUse, volume: str | None = None) -> Attachment | None:
        """The attachment a disk is; ``volume``: the volume it serves, when the caller knows it
        (else the disk's alias or swap note says)."""
        disk = use.disk
        vid = volume if volume is not None else use.volume
        if vid is None or disk.target is None:
            return None
        return cls(device=f"/dev/{disk.target.dev}", id=vid, serverId=use.domain_uuid,
                   volumeId=vid, attach_mode="ro" if disk.readonly else "rw",
                   shareable=disk.shareable, source=describe_source(disk),
                   server_name=use.domain_name, target_dev=disk.target.dev or "",
                   bus=disk.target.bus, cache=disk.driver.cache if disk.driver else None,
                   live=use.live,
                   error_policy=disk.driver.error_policy if disk.driver else None,
                   rerror_policy=disk.driver.rerror_policy if disk.driver else None)


def describe_source(disk: Disk) -> str:
    src = disk.source
    if src is None:
        return ""
    if src.protocol:
        hosts = ",".join(f"{h.name}:{h.port}" if h.port else (h.name or h.socket or "")
                         for h in src.hosts)
        return f"{src.protocol}://{hosts}/{src.name or ''}"
    return src.dev or src.file or src.dir or ""
