"""The host options a driver is configured with, in one object."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from virtdriver import arguments
from virtdriver.errors import InvalidRenderOption, show
from virtdriver.hostfiles import setting
from virtdriver.hypervisor.locks import DEFAULT_TIMEOUT, NOTICE_AFTER
from virtdriver.policy import check_option_text

if TYPE_CHECKING:
    from virtdriver.volume.base import RenderOptions

DEFAULT_STATE_DIR = Path("/var/lib/virtdriver")
MAX_WAIT = 7 * 24 * 3600.0  # seconds: longer than any wait makes sense, short of overflowing


def check_timeout(value: object, where: str) -> float:
    """A wait in seconds: a positive finite number up to a week (``inf`` is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRenderOption(f"{where}: {show(value)} is not a number of seconds")
    if not math.isfinite(value) or not 0 < value <= MAX_WAIT:
        raise InvalidRenderOption(f"{where}: {show(value)} is not a number of seconds from "
                                  f"above 0 to {MAX_WAIT:g}")
    return float(value)


@dataclass(frozen=True)
class HostOptions:
    """How this host attaches volumes: where state lives, shares mount, labels, initiators."""

    state_dir: Path = DEFAULT_STATE_DIR
    mount_base: str | None = None  # default: <state_dir>/mnt
    label_policy: str = "auto"
    shared_image_label: str | None = None
    detach_timeout: float = 30.0
    lock_timeout: float = DEFAULT_TIMEOUT
    lock_notice_after: float = NOTICE_AFTER  # a longer wait for a lock is said (a warning)
    native_iscsi: bool = False
    native_glusterfs: bool = False
    #: os-brick connects kernel iSCSI/FC/NVMe-oF volumes over every path, to a multipath device
    #: (nova: ``[libvirt] volume_use_multipath``); ``enforce_multipath`` fails an attach when
    #: multipathd is not running instead of falling back to one path.
    use_multipath: bool = False
    enforce_multipath: bool = False
    #: The initiator name QEMU's own iSCSI initiator logs in as (``native_iscsi``); default: the
    #: host's (``/etc/iscsi/initiatorname.iscsi``), the name the storage service was given.
    initiator_iqn: str | None = None

    def __post_init__(self) -> None:
        arguments.path(self.state_dir, "state_dir", InvalidRenderOption)
        arguments.path(self.mount_base, "mount_base", InvalidRenderOption, optional=True)
        for name in ("label_policy", "shared_image_label"):
            arguments.text(getattr(self, name), name, InvalidRenderOption,
                           optional=name == "shared_image_label")
        for name in ("native_iscsi", "native_glusterfs", "use_multipath", "enforce_multipath"):
            arguments.flag(getattr(self, name), name, InvalidRenderOption)
        arguments.text(self.initiator_iqn, "initiator_iqn", InvalidRenderOption, optional=True)
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        object.__setattr__(self, "mount_base",
                           str(self.mount_base) if self.mount_base
                           else str(self.state_dir / "mnt"))
        check_timeout(self.detach_timeout, "detach_timeout")
        check_timeout(self.lock_timeout, "lock_timeout")
        check_timeout(self.lock_notice_after, "lock_notice_after")
        check_option_text("initiator_iqn", self.initiator_iqn)
        if self.enforce_multipath and not self.use_multipath:
            raise InvalidRenderOption("enforce_multipath needs use_multipath")

    @functools.cached_property
    def lock_dir(self) -> Path:
        return self.state_dir / "locks"

    @property
    def native_initiator(self) -> str | None:
        """The initiator name for QEMU's own iSCSI initiator: configured, else the host's."""
        if not self.native_iscsi:
            return None
        return self.initiator_iqn or host_initiator_name()

    def render_options(self) -> RenderOptions:
        """What a protocol module needs to know of the host."""
        from virtdriver.volume.base import RenderOptions

        return RenderOptions(mount_base=self.mount_base, native_iscsi=self.native_iscsi,
                             native_glusterfs=self.native_glusterfs,
                             initiator_iqn=self.native_initiator)

    def render_kwargs(self) -> dict[str, Any]:
        """The host options :func:`virtdriver.render.build_disk` takes."""
        return {"mount_base": self.mount_base, "label_policy": self.label_policy,
                "shared_image_label": self.shared_image_label,
                "native_iscsi": self.native_iscsi, "native_glusterfs": self.native_glusterfs,
                "initiator_iqn": self.native_initiator}


INITIATOR_NAME_FILE = Path("/etc/iscsi/initiatorname.iscsi")


def host_initiator_name(path: Path = INITIATOR_NAME_FILE) -> str | None:
    """The host's iSCSI initiator name (``InitiatorName=`` of open-iscsi's file), if any."""
    return setting(path, "InitiatorName")
