"""virtdriver: a libvirt volume driver that gets volume multiattach right.

The public API: :func:`build_disk` renders a volume's ``<disk>``; :class:`Disk` is the XML model;
:mod:`virtdriver.errors` holds every exception raised on purpose.
"""

from virtdriver import errors
from virtdriver.config import Disk
from virtdriver.render import build_disk

__all__ = ["Attachment", "Disk", "LibvirtVolumeDriver", "build_disk", "errors"]


def __getattr__(name: str) -> object:
    # The hypervisor layer imports libvirt; load it only when asked for.
    if name in ("LibvirtVolumeDriver", "Attachment"):
        from virtdriver import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'virtdriver' has no attribute {name!r}")
__version__ = "0.1.0"
