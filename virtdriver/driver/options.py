"""The host options a driver is configured with, in one object."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from virtdriver.errors import InvalidRenderOption, show
from virtdriver.hypervisor.locks import DEFAULT_TIMEOUT

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


@dataclasses.dataclass(frozen=True)
class HostOptions:
    """How this host attaches volumes: where state lives, shares mount, labels, initiators."""

    state_dir: Path = DEFAULT_STATE_DIR
    mount_base: str | None = None  # default: <state_dir>/mnt
    label_policy: str = "auto"
    shared_image_label: str | None = None
    detach_timeout: float = 30.0
    lock_timeout: float = DEFAULT_TIMEOUT
    native_iscsi: bool = False
    native_glusterfs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        object.__setattr__(self, "mount_base",
                           str(self.mount_base) if self.mount_base else str(self.state_dir / "mnt"))
        check_timeout(self.detach_timeout, "detach_timeout")
        check_timeout(self.lock_timeout, "lock_timeout")

    @property
    def lock_dir(self) -> Path:
        return self.state_dir / "locks"

    def render_options(self) -> RenderOptions:
        """What a protocol module needs to know of the host."""
        from virtdriver.volume.base import RenderOptions

        return RenderOptions(mount_base=self.mount_base, native_iscsi=self.native_iscsi,
                             native_glusterfs=self.native_glusterfs)

    def render_kwargs(self) -> dict[str, Any]:
        """The host options :func:`virtdriver.render.build_disk` takes."""
        return {"mount_base": self.mount_base, "label_policy": self.label_policy,
                "shared_image_label": self.shared_image_label,
                "native_iscsi": self.native_iscsi, "native_glusterfs": self.native_glusterfs}
