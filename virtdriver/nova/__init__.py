"""virtdriver inside nova 34 (``pip install virtdriver[nova]``).

- :data:`NOVA_DRIVER_CLASSES`: nova's volume-driver class paths to adapters whose ``get_config``
  is rendered by virtdriver (:mod:`virtdriver.nova.adapters`);
- :class:`LibvirtDriver`: nova's libvirt compute driver using them, loaded with
  ``compute_driver = virtdriver.nova.LibvirtDriver`` in ``nova.conf``
  (:mod:`virtdriver.nova.compute`).

This package is the only part of virtdriver that imports nova.
"""

from virtdriver.nova.adapters import NOVA_DRIVER_CLASSES, VirtdriverRendering
from virtdriver.nova.compute import LibvirtDriver
from virtdriver.nova.convert import RenderedDisk, to_nova

__all__ = ["NOVA_DRIVER_CLASSES", "LibvirtDriver", "RenderedDisk", "VirtdriverRendering",
           "to_nova"]
