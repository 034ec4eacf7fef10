"""virtdriver: a libvirt volume driver that gets volume multiattach right.

The public API: :func:`build_disk` renders a volume's ``<disk>``; :class:`Disk` is the XML model;
:mod:`virtdriver.errors` holds every exception raised on purpose.
"""

from virtdriver import errors
from virtdriver.config import Disk
from virtdriver.render import build_disk

__all__ = ["Disk", "build_disk", "errors"]
__version__ = "0.1.0"
