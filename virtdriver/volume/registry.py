"""Finding the volume driver for a ``driver_volume_type``.

Drivers, the built-in ones included, are registered in the ``virtdriver.volume_drivers``
entry-point group. A third-party package adds a protocol by declaring an entry point::

    [project.entry-points."virtdriver.volume_drivers"]
    mystore = "mystore_virtdriver:MyStoreVolumeDriver"

Entry points are read once, drivers are imported on first use and cached.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

from virtdriver.errors import UnsupportedVolumeType, VirtDriverError, show
from virtdriver.volume.base import VolumeDriver

GROUP = "virtdriver.volume_drivers"

_loaded: dict[str, VolumeDriver] = {}


@functools.cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def known_types() -> list[str]:
    """Every registered ``driver_volume_type``, sorted."""
    return sorted(_entry_points())


def get_driver(volume_type: object) -> VolumeDriver:
    """The (cached) driver instance for ``volume_type``; :class:`UnsupportedVolumeType` if none."""
    driver = _loaded.get(volume_type) if isinstance(volume_type, str) else None
    if driver is not None:
        return driver
    ep = _entry_points().get(volume_type) if isinstance(volume_type, str) else None
    if ep is None:
        raise UnsupportedVolumeType(volume_type, known_types())
    cls = ep.load()
    if not (isinstance(cls, type) and issubclass(cls, VolumeDriver)):
        raise VirtDriverError(f"entry point {show(ep.value)} for {show(ep.name)} is not a VolumeDriver")
    driver = _loaded[ep.name] = cls()
    return driver


def refresh() -> None:
    """Forget cached entry points and drivers (after installing a plugin at run time)."""
    _entry_points.cache_clear()
    _loaded.clear()
