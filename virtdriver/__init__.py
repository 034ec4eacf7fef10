"""virtdriver: a libvirt volume driver that gets volume multiattach right."""

from virtdriver import errors
from virtdriver.config import Disk

__all__ = ["Disk", "errors"]
__version__ = "0.1.0"
