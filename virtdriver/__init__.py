"""virtdriver: a libvirt volume driver that gets volume multiattach right.

The public API: :func:`build_disk` renders a volume's ``<disk>``; :class:`Disk` is the XML model;
:mod:`virtdriver.errors` holds every exception raised on purpose.

Everything is imported on first use (PEP 562): ``import virtdriver`` costs nothing, so that the
command line starts fast (``virtdriver --help`` needs neither the XML model nor libvirt).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from virtdriver import errors
    from virtdriver.config import Disk
    from virtdriver.driver import Attachment, LibvirtVolumeDriver
    from virtdriver.render import build_disk

__all__ = ["Attachment", "Disk", "LibvirtVolumeDriver", "build_disk", "errors"]
__version__ = "0.1.0"

_LAZY = {"errors": ("virtdriver.errors", None), "Disk": ("virtdriver.config", "Disk"),
         "build_disk": ("virtdriver.render", "build_disk"),
         "LibvirtVolumeDriver": ("virtdriver.driver", "LibvirtVolumeDriver"),
         "Attachment": ("virtdriver.driver", "Attachment")}


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'virtdriver' has no attribute {name!r}")
    module = importlib.import_module(where[0])
    value = module if where[1] is None else getattr(module, where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
