"""nova's libvirt compute driver with virtdriver's volume drivers.

``compute_driver = virtdriver.nova.LibvirtDriver`` in ``nova.conf`` loads it: nova imports
``nova.virt.`` + that value, and virtdriver's wheel installs ``nova.virt.virtdriver.nova``, which
names this class (``nova_namespace/`` in the source tree). Three places differ from nova's driver:

- the volume driver for a ``driver_volume_type`` is the adapter of
  :data:`~virtdriver.nova.adapters.NOVA_DRIVER_CLASSES` for the class nova's table names; a type
  nova knows but virtdriver does not render (nova's test-only ``fake``, or a class that a nova
  deployment put into its table) keeps nova's own driver, logged once at INFO;
- a volume's ``<disk>`` keeps the cache mode virtdriver's policy chose (nova applies
  ``[libvirt] disk_cachemodes`` on top, to hot-plugged volumes and to every disk of a guest it
  boots, and may switch ``io`` from ``native`` to ``threads``): ``_set_cache_mode`` leaves a
  :class:`~virtdriver.nova.convert.RenderedDisk` alone;
- whether the host connection of a volume may be torn down after a detach is answered from
  libvirt's live state: it is kept while any other guest on this host still has a disk carrying
  the volume's alias (``ua-`` and the encoded id), running or defined -- not from the block-storage
  service's attachment list and nova's database, which lag behind or miss guests;
- a volume-extended event reaches a read-only attachment too: libvirt refuses to block-resize a
  read-only disk, so its QEMU node is opened anew at the new size instead
  (:func:`virtdriver.hypervisor.resize.resize_disk`, as ``virtdriver extend`` does).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from nova import exception
from nova.virt.libvirt import driver as nova_driver
from nova.virt.libvirt.volume import fs
from os_brick import exception as brick_exception

from virtdriver.hypervisor.resize import resize_disk
from virtdriver.hypervisor.usage import DiskUse, DomainState, host_state
from virtdriver.nova.adapters import NOVA_DRIVER_CLASSES
from virtdriver.nova.convert import RenderedDisk

LOG = logging.getLogger(__name__)


def local_users(conn: Any, volume_id: str) -> list[DiskUse]:
    """Every disk on this host (live or defined) that serves ``volume_id``.

    The volume a disk serves is read the one way every step reads it (:attr:`DiskUse.volume`):
    the alias that encodes the id, or the swap note of a device that now serves another volume.
    """
    return [use for state in host_state(conn, mentioning=volume_id) for use in state.disks
            if use.volume == volume_id]


class LibvirtDriver(nova_driver.LibvirtDriver):
    """nova's ``LibvirtDriver`` whose volumes are rendered and accounted by virtdriver."""

    _volume_driver_lock = threading.Lock()

    def _get_volume_driver(self, connection_info):  # type: ignore[no-untyped-def]
        driver_type = connection_info.get("driver_volume_type")
        cached = self.volume_drivers.get(driver_type)
        if cached is not None:
            return cached
        path = nova_driver.VOLUME_DRIVERS.get(driver_type)
        if path is None:
            raise exception.VolumeDriverNotFound(driver_type=driver_type)
        adapter = NOVA_DRIVER_CLASSES.get(path)
        if adapter is None:
            LOG.info("volume type %s has no virtdriver adapter; nova's own %s renders it, "
                     "without virtdriver's multiattach policy", driver_type, path)
            return super()._get_volume_driver(connection_info)
        with self._volume_driver_lock:
            if driver_type not in self.volume_drivers:
                try:
                    self.volume_drivers[driver_type] = adapter(self._host)
                except brick_exception.InvalidConnectorProtocol:
                    LOG.debug("volume driver %s is not supported on this host", driver_type)
                    raise exception.VolumeDriverNotSupported(volume_driver=path)
            return self.volume_drivers[driver_type]

    def _set_cache_mode(self, conf):  # type: ignore[no-untyped-def]
        # A volume virtdriver rendered keeps the cache (and io) its policy chose; nova applies
        # [libvirt] disk_cachemodes here, at attach and again to every disk of a guest it boots.
        if isinstance(conf, RenderedDisk):
            return
        super()._set_cache_mode(conf)

    def _should_disconnect_target(self, context, instance, multiattach, vol_driver,
                                  volume_id):  # type: ignore[no-untyped-def]
        if isinstance(vol_driver, fs.LibvirtMountedFileSystemVolumeDriver):
            return True  # nova's mount manager counts the users of each mount itself
        if not volume_id:
            return True
        others = sorted({use.domain_name for use in
                         local_users(self._host.get_connection(), str(volume_id))
                         if use.domain_uuid != instance.uuid})
        if others:
            LOG.info("volume %s is still used on this host by %s; keeping its host connection",
                     volume_id, ", ".join(others))
            return False
        return True

    def _resize_attached_volume(self, new_size, block_device,
                                instance):  # type: ignore[no-untyped-def]
        # nova resizes through libvirt, which refuses a read-only disk; virtdriver's resize
        # handles both modes (see virtdriver.hypervisor.resize).
        dom = block_device._guest._domain
        disk = next((u.disk for u in DomainState.read(dom).disks if u.live and (
            u.device == block_device._disk or (u.disk.source is not None and block_device._disk
                                               in (u.disk.source.dev, u.disk.source.file)))),
                    None)
        if disk is None or not disk.readonly:
            return super()._resize_attached_volume(new_size, block_device, instance)
        LOG.debug("instance %s: reopening read-only device %s at %u bytes", instance.uuid,
                  block_device._disk, new_size)
        resize_disk(dom, disk, new_size)
