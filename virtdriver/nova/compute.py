"""nova's libvirt compute driver with virtdriver's volume drivers.

``compute_driver = virtdriver.nova.LibvirtDriver`` in ``nova.conf`` loads it: nova imports
``nova.virt.`` + that value, and virtdriver's wheel installs ``nova.virt.virtdriver.nova``, which
names this class (``nova_namespace/`` in the source tree). Five places differ from nova's driver:

- the volume driver for a ``driver_volume_type`` is the adapter of the class nova's table names
  (nova's own lookup otherwise: its table, its import, its cache); a type nova knows but
  virtdriver does not render (nova's test-only ``fake``, or a class that a nova deployment put
  into its table) keeps nova's own driver, logged once at INFO;
- a volume's ``<disk>`` keeps the cache mode virtdriver's policy chose (nova applies
  ``[libvirt] disk_cachemodes`` on top, to hot-plugged volumes and to every disk of a guest it
  boots, and may switch ``io`` from ``native`` to ``threads``): ``_set_cache_mode`` changes a
  :class:`~virtdriver.nova.convert.RenderedDisk` only to a direct mode (``none``,
  ``directsync``) that ``disk_cachemodes`` names for its type, shared disks included (nova's
  own driver gives a shared disk ``none`` whatever it names);
- whether the host connection of a multiattach volume may be torn down after a detach is
  answered from libvirt's live state, one decision per volume at a time: it is kept while any
  other guest on this host still has a disk carrying the volume's alias (``ua-`` and the encoded
  id), running or defined -- not from the block-storage service's attachment list and nova's
  database, which lag behind or miss guests. A shut-off guest that already let go of the volume
  here (nova decides before it undefines a deleted guest) no longer counts, so two concurrent
  deletes tear the connection down exactly once (nova's bug 2048837), instead of each keeping it
  for the other. A volume of a type virtdriver does not render (nova's own driver's disk) keeps
  nova's decision, as it keeps nova's driver;
- a volume Cinder attached read-only is connected read-only: Cinder 29 sets an attachment's mode
  from the volume's readonly flag read as an administrator, but the connection_info's
  ``access_mode`` as the user who asked, which sees no flag and says ``rw`` (nova's own driver
  then attaches it read-write); the attachment's mode wins when it is ``ro``;
- a volume-extended event reaches a read-only attachment too: libvirt refuses to block-resize a
  read-only disk, so its QEMU node is opened anew at the new size instead
  (:func:`virtdriver.hypervisor.resize.resize_disk`, as ``virtdriver extend`` does).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from nova import exception, objects
from nova.virt.libvirt import driver as nova_driver
from nova.virt.libvirt.volume import fs
from os_brick import exception as brick_exception
from oslo_concurrency import lockutils
from oslo_utils import importutils

from virtdriver.config import Disk
from virtdriver.hypervisor.domains import DiskUse, DomainState, host_state
from virtdriver.hypervisor.resize import resize_disk
from virtdriver.nova.adapters import NOVA_DRIVER_CLASSES, VirtdriverRendering
from virtdriver.nova.convert import RenderedDisk
from virtdriver.policy.sharing import DIRECT_CACHE_MODES

LOG = logging.getLogger(__name__)


def local_users(conn: Any, volume_id: str) -> list[DiskUse]:
    """Every disk on this host (live or defined) that serves ``volume_id``.

    The volume a disk serves is read the one way every step reads it (:attr:`DiskUse.volume`):
    the alias that encodes the id, or the swap note of a device that now serves another volume.
    """
    return [use for state in host_state(conn, mentioning=volume_id) for use in state.disks
            if use.volume == volume_id]


def _nova_class(adapter: type) -> type:
    """The nova class an adapter replaces: its base that is not a rendering mixin (the mixin may
    be :class:`VirtdriverRendering` or a subclass with a nova class's own defaults)."""
    return next(base for base in adapter.__bases__ if not issubclass(base, VirtdriverRendering))


#: nova's volume-driver class -> the adapter that replaces it.
ADAPTER_FOR = {_nova_class(adapter): adapter for adapter in NOVA_DRIVER_CLASSES.values()}


class LibvirtDriver(nova_driver.LibvirtDriver):
    """nova's ``LibvirtDriver`` whose volumes are rendered and accounted by virtdriver."""

    _volume_driver_lock = threading.Lock()

    def _get_volume_driver(self, connection_info):  # type: ignore[no-untyped-def]
        # nova's steps (its table, its import, its cache), with the adapter in place of the
        # class nova's table names.
        driver_type = connection_info.get("driver_volume_type")
        path = nova_driver.VOLUME_DRIVERS.get(driver_type)
        if path not in NOVA_DRIVER_CLASSES:  # unknown to nova, or no adapter: nova's own way
            if path is not None and driver_type not in self.volume_drivers:
                LOG.info("volume type %s has no virtdriver adapter; nova's own %s renders it, "
                         "without virtdriver's multiattach policy", driver_type, path)
            return super()._get_volume_driver(connection_info)
        cached = self.volume_drivers.get(driver_type)
        if cached is not None:
            return cached
        with self._volume_driver_lock:
            if driver_type not in self.volume_drivers:
                nova_class = importutils.import_class(path)
                cls = ADAPTER_FOR.get(nova_class, nova_class)
                try:
                    self.volume_drivers[driver_type] = cls(self._host)
                except brick_exception.InvalidConnectorProtocol as exc:
                    LOG.debug("volume driver %s is not supported on this host", driver_type)
                    raise exception.VolumeDriverNotSupported(volume_driver=path) from exc
            return self.volume_drivers[driver_type]

    def _connect_volume(self, context, connection_info, instance,  # type: ignore[no-untyped-def]
                        *args, **kwargs):
        # Attach, boot and a migration's arrival connect here first, and the <disk> is rendered
        # from this same connection_info afterwards (a swap's new volume has no mapping yet and
        # keeps its connection_info's mode). nova's own arguments pass on as they came (its
        # tests compare the calls).
        self._narrow_to_attachment_mode(context, connection_info, instance)
        super()._connect_volume(context, connection_info, instance, *args, **kwargs)

    def _narrow_to_attachment_mode(self, context: Any, connection_info: dict[str, Any],
                                   instance: Any) -> None:
        """Make ``access_mode`` read-only when Cinder's attachment of the volume is."""
        data = connection_info.get("data")
        if not isinstance(data, dict) or data.get("access_mode") == "ro":
            return
        volume_id = connection_info.get("serial") or data.get("volume_id")
        uuid = getattr(instance, "uuid", None)
        # Only connection_info that nova made from a Cinder attachment names the instance.
        if not volume_id or uuid is None or connection_info.get("instance") != uuid:
            return
        try:
            bdm = objects.BlockDeviceMapping.get_by_volume_and_instance(context, volume_id, uuid)
        except exception.VolumeBDMNotFound:
            return  # not one of the instance's mappings yet (a swap's new volume)
        if not bdm.attachment_id:
            return  # attached by the old flow: the connection_info is all Cinder said
        attachment = self._volume_api.attachment_get(context, bdm.attachment_id)
        if attachment.get("attach_mode") == "ro":
            LOG.warning("volume %s: Cinder's attachment %s is read-only, its connection_info "
                        "says %s; attaching it read-only", volume_id, bdm.attachment_id,
                        data.get("access_mode"))
            data["access_mode"] = "ro"

    def _set_cache_mode(self, conf):  # type: ignore[no-untyped-def]
        # A volume virtdriver rendered keeps the cache (and io) its policy chose; nova applies
        # [libvirt] disk_cachemodes here, at attach and again to every disk of a guest it boots.
        # A direct mode named for the disk's type is honoured, shared disks included: directsync
        # bypasses the host's page cache as none does, and also writes through the disk's cache.
        if isinstance(conf, RenderedDisk):
            mode = self.disk_cachemodes.get(conf.source_type)
            if mode in DIRECT_CACHE_MODES:
                conf.driver_cache = mode
            return
        super()._set_cache_mode(conf)

    def _should_disconnect_target(self, context: Any, instance: Any, multiattach: bool,
                                  vol_driver: Any, volume_id: str | None) -> bool:
        if not isinstance(vol_driver, VirtdriverRendering):
            # A type virtdriver does not render is nova's from attach to release: nova's disk,
            # without virtdriver's identity or sharing policy, so nova's decision too.
            return super()._should_disconnect_target(context, instance, multiattach,
                                                     vol_driver, volume_id)
        if not multiattach or not volume_id:
            return True  # as nova: a volume that cannot be attached twice has no other user
        if isinstance(vol_driver, fs.LibvirtMountedFileSystemVolumeDriver):
            return True  # nova's mount manager counts the users of each mount itself
        vid = str(volume_id)
        with lockutils.lock(f"virtdriver-disconnect-{vid}"):
            users = local_users(self._host.get_connection(), vid)
            # volume id -> guests (instance uuids) that let go of it here
            released = self.__dict__.setdefault("_released", {}).setdefault(vid, set())
            released &= {use.domain_uuid for use in users}  # forget guests that are gone
            others = sorted({use.domain_name for use in users if use.domain_uuid != instance.uuid
                             and (use.live or use.domain_uuid not in released)})
            released.add(instance.uuid)
        if others:
            LOG.info("volume %s is still used on this host by %s; keeping its host connection",
                     vid, ", ".join(others))
            return False
        return True

    def _resize_attached_volume(self, new_size: int, block_device: Any,
                                instance: Any) -> None:
        # nova's own resize first (``block_device.resize``: libvirt's block resize), so nova's
        # contract holds; libvirt refuses a read-only disk (``can't resize empty or readonly
        # disk``, before it touches anything), and only then is a read-only disk's QEMU node
        # opened anew at the new size (virtdriver.hypervisor.resize). Any other failure, and a
        # refusal for a disk that is not read-only (an empty one), is nova's.
        try:
            return super()._resize_attached_volume(new_size, block_device, instance)
        except nova_driver.libvirt.libvirtError as exc:
            if exc.get_error_code() != nova_driver.libvirt.VIR_ERR_OPERATION_UNSUPPORTED:
                raise
            dom = block_device._guest._domain
            disk = _live_disk(dom, block_device._disk)
            if disk is None or not disk.readonly:
                raise
        LOG.debug("instance %s: libvirt does not resize read-only device %s; reopening it at "
                  "%u bytes", instance.uuid, block_device._disk, new_size)
        resize_disk(dom, disk, new_size)


def _live_disk(dom: Any, device: str) -> Disk | None:
    """The live disk of ``dom`` that nova names ``device`` (its target or its source path)."""
    return next((use.disk for use in DomainState.read(dom).disks if use.live and (
        use.device == device or (use.disk.source is not None
                                 and device in (use.disk.source.dev, use.disk.source.file)))),
                None)
