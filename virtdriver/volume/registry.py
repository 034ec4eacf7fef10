"""Finding the volume driver for a ``driver_volume_type``.

Drivers, the built-in ones included, are registered in the ``virtdriver.volume_drivers``
entry-point group. A third-party package adds a protocol by declaring an entry point::

    [project.entry-points."virtdriver.volume_drivers"]
    mystore = "mystore_virtdriver:MyStoreVolumeDriver"

Entry points are read once, when a protocol is first asked for; drivers are imported on first use
and cached.

Reading them: :mod:`importlib.metadata` costs a command-line start about 20 ms (its import pulls
in ``email``, ``zipfile``, ``csv`` ..., and it parses every installed distribution's
``entry_points.txt``), a fifth of the whole ``virtdriver render``. Where the interpreter finds
distributions the standard way only (directories on ``sys.path``, no zip archives or eggs, no
other finder declaring distributions), :func:`_scan` reads the same files the same way and in the
same order, parsing only those that declare this group; anywhere else
:func:`importlib.metadata.entry_points` answers. Both give the same map (a test compares them).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys

from virtdriver.errors import UnsupportedVolumeType, VirtDriverError, show
from virtdriver.volume.base import VolumeDriver

GROUP = "virtdriver.volume_drivers"
_HEADER = f"[{GROUP}]"
# importlib.metadata.EntryPoint.pattern
_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")

_loaded: dict[str, VolumeDriver] = {}


class _Entry:
    """One entry point of the group: ``name = module:attr`` (what importlib's EntryPoint is)."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self.value = value

    def load(self) -> object:
        match = _VALUE.match(self.value)
        if match is None:
            raise VirtDriverError(f"entry point {show(self.value)} for {show(self.name)} is "
                                  "not of the form module:attribute")
        target: object = importlib.import_module(match.group("module"))
        for attr in filter(None, (match.group("attr") or "").split(".")):
            target = getattr(target, attr)
        return target


def _normalize(name: str) -> str:
    """A distribution's name as importlib.metadata compares them (``Prepared.normalize``)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _section(text: str) -> list[tuple[str, str]]:
    """The ``name = value`` pairs of this group in one ``entry_points.txt`` (importlib's
    ``Sectioned`` rules: stripped lines, ``#`` comments, ``[group]`` headers)."""
    pairs = []
    inside = False
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] == "#":
            continue
        if line.startswith("[") and line.endswith("]"):
            inside = line == _HEADER
            continue
        if inside:
            name, sep, value = line.partition("=")
            if sep:
                pairs.append((name.strip(), value.strip()))
    return pairs


def _standard_finders_only() -> bool:
    from importlib.machinery import PathFinder

    return not any(hasattr(f, "find_distributions") for f in sys.meta_path if f is not PathFinder)


def _scan() -> dict[str, _Entry] | None:
    """The group's entry points, read from the ``*.dist-info`` / ``*.egg-info`` directories on
    ``sys.path`` as importlib.metadata reads them (the first distribution of a name wins, a
    later entry point of the same name replaces an earlier one); ``None`` when this path holds
    something only importlib.metadata reads (a zip archive, an egg)."""
    if not _standard_finders_only():
        return None
    found: dict[str, _Entry] = {}
    seen: set[str] = set()
    for entry in sys.path:
        root = entry or "."
        if root.lower().endswith(".egg"):
            return None
        try:
            children = os.listdir(root)
        except OSError:
            if os.path.isfile(root):
                return None  # a zip archive on sys.path
            continue  # missing, or a path-hook entry: importlib.metadata finds nothing there
        for child in children:
            low = child.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            name = _normalize(low.rpartition(".")[0].partition("-")[0])
            if name in seen:
                continue
            seen.add(name)
            try:
                with open(os.path.join(root, child, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            if _HEADER in text:
                for ep_name, value in _section(text):
                    found[ep_name] = _Entry(ep_name, value)
    return found


@functools.cache
def _entry_points() -> dict[str, _Entry]:
    found = _scan()
    if found is not None:
        return found
    from importlib.metadata import entry_points

    return {ep.name: _Entry(ep.name, ep.value) for ep in entry_points(group=GROUP)}


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
