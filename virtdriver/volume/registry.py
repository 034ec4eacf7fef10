"""Finding the volume driver for a ``driver_volume_type``.

Drivers, the built-in ones included, are registered in the ``virtdriver.volume_drivers``
entry-point group. A third-party package adds a protocol by declaring an entry point::

    [project.entry-points."virtdriver.volume_drivers"]
    mystore = "mystore_virtdriver:MyStoreVolumeDriver"

Entry points are read once, through :func:`importlib.metadata.entry_points`, when a protocol is
first asked for; each driver is imported on first use and kept.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

from virtdriver.errors import UnsupportedVolumeType, VirtDriverError, show
from virtdriver.volume.base import VolumeDriver

GROUP = "virtdriver.volume_drivers"


@functools.cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def known_types() -> list[str]:
    """Every registered ``driver_volume_type``, sorted."""
    return sorted(_entry_points())


@functools.cache
def _driver(volume_type: str) -> VolumeDriver:
    ep = _entry_points().get(volume_type)
    if ep is None:
        raise UnsupportedVolumeType(volume_type, known_types())
    try:
        cls = ep.load()
    except (ImportError, AttributeError) as exc:
        raise VirtDriverError(f"entry point {show(ep.value)} for {show(ep.name)} cannot be "
                              f"loaded: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, VolumeDriver)):
        raise VirtDriverError(f"entry point {show(ep.value)} for {show(ep.name)} is not a "
                              "VolumeDriver")
    return cls()


def get_driver(volume_type: object) -> VolumeDriver:
    """The (kept) driver instance for ``volume_type``; :class:`UnsupportedVolumeType` if none."""
    if not isinstance(volume_type, str):
        raise UnsupportedVolumeType(volume_type, known_types())
    return _driver(volume_type)


def refresh() -> None:
    """Forget the entry points and drivers read (after installing a plugin at run time)."""
    _entry_points.cache_clear()
    _driver.cache_clear()
