"""virtdriver as nova 34's libvirt volume drivers: one adapter per protocol that nova serves.

The adapters are derived, not listed: every registered protocol (built-in or a plugin's
``virtdriver.volume_drivers`` entry point) whose driver class declares
:class:`~virtdriver.volume.base.NovaBinding` gets one, named after that class. A protocol nova's
table (``nova.virt.libvirt.driver.VOLUME_DRIVERS``) already knows replaces nova's class there (by
its dotted path, :data:`NOVA_DRIVER_CLASSES`); a type nova's table does not know is added to the
table, pointing at its adapter, so that nova's compute driver finds it. A new protocol thus
reaches nova with no change here.

Each adapter subclasses the nova class it replaces (same constructor, so the same os-brick
connector in ``self.connector``, the same mount handling, the same connect, disconnect and extend)
and overrides only ``get_config``: the ``<disk>`` is rendered by :func:`virtdriver.build_disk` --
virtdriver's validation, attach policy, refusals and labels -- and converted field by field into
nova's config object (:mod:`virtdriver.nova.convert`). Nothing of nova's ``get_config`` runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import nova.conf
from nova import exception
from nova.virt import block_device as driver_block_device
from nova.virt.libvirt import driver as nova_driver
from nova.virt.libvirt.volume import fs
from oslo_utils import importutils

from virtdriver.errors import InvalidAttachMode, InvalidConnectionInfo, VirtDriverError
from virtdriver.nova.convert import RenderedDisk, to_nova
from virtdriver.render import build_disk
from virtdriver.volume import registry
from virtdriver.volume.base import NovaBinding

CONF = nova.conf.CONF
LOG = logging.getLogger(__name__)

#: ``qos_specs`` keys virtdriver writes into ``<iotune>`` but nova's drivers do not read.
IGNORED_BY_NOVA = frozenset(f"{kind}_{unit}_sec_max_length" for kind in ("total", "read", "write")
                            for unit in ("bytes", "iops"))


class VirtdriverRendering:
    """``get_config`` by virtdriver; mixed in before the nova class an adapter replaces."""

    #: virtdriver's ``driver_volume_type`` that renders this nova type.
    volume_type: ClassVar[str]
    #: ``[libvirt] use_default_aio_mode_for_volumes`` leaves ``io`` to QEMU: only for the types
    #: whose nova driver sets ``io='native'`` under that condition (iscsi, iser, fibre_channel,
    #: nfs); scaleio, storpool and quobyte keep ``native`` in nova whatever the option says.
    default_aio_drops_native: ClassVar[bool] = False

    def get_config(self, connection_info, disk_info):  # type: ignore[no-untyped-def]
        """nova's disk config for ``connection_info``, rendered by :func:`build_disk`."""
        info = self._for_render(connection_info)
        bus = disk_info["bus"]
        unit = disk_info.get("unit") if bus == "scsi" else None
        try:
            disk = build_disk(info, target_dev=disk_info["dev"], bus=bus,
                              device=disk_info.get("type", "disk"), scsi_unit=unit,
                              luks_secret_uuid=self._luks_secret(connection_info),
                              mount_base=self._mount_base())
        except (InvalidAttachMode, InvalidConnectionInfo) as exc:
            access = (info.get("data") or {}).get("access_mode")
            if isinstance(exc, InvalidAttachMode) or exc.path.endswith(".access_mode"):
                # nova's type, and the reason in the message nova shows (a valid 'ro' refused on
                # an ide or sata bus would otherwise read as an unknown access mode)
                raise exception.InvalidVolumeAccessMode(
                    message=f"Invalid volume access mode: {access}: {exc}",
                    access_mode=access) from exc
            raise exception.InvalidVolume(reason=str(exc)) from exc
        except VirtDriverError as exc:
            raise exception.InvalidVolume(reason=str(exc)) from exc
        if (self.default_aio_drops_native and CONF.libvirt.use_default_aio_mode_for_volumes
                and disk.driver is not None):
            disk.driver.io = None  # the operator asked for QEMU's default AIO mode
        return to_nova(disk)

    # ---- what nova knows that connection_info does not say -----------------------------------

    def _for_render(self, connection_info: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``connection_info`` in the shape :func:`build_disk` reads."""
        info = dict(connection_info)
        data = dict(info.get("data") or {})
        info["driver_volume_type"] = self.volume_type
        vid = data.get("volume_id")
        if isinstance(vid, int) and not isinstance(vid, bool):
            data["volume_id"] = str(vid)  # an id given as a number (old nova data)
        qos = data.get("qos_specs")
        if isinstance(qos, Mapping) and any(k in IGNORED_BY_NOVA for k in qos):
            # nova's drivers write only the <iotune> keys of their table: a burst length
            # (*_max_length) means the same on every compute host of a cloud, whichever driver.
            LOG.debug("qos_specs: nova ignores %s", sorted(k for k in qos if k in IGNORED_BY_NOVA))
            data["qos_specs"] = {k: v for k, v in qos.items() if k not in IGNORED_BY_NOVA}
        info["data"] = data
        info["serial"] = info.get("serial")  # nova's own: no serial when nova gave none
        return info

    def _luks_secret(self, connection_info: Mapping[str, Any]) -> str | None:
        """The UUID of the libvirt secret nova defined for an encrypted volume, if any."""
        vid = driver_block_device.get_volume_id(connection_info)
        secret = self.host.find_secret("volume", vid) if vid else None  # type: ignore[attr-defined]
        return secret.UUIDString() if secret else None

    def _mount_base(self) -> str | None:
        if isinstance(self, fs.LibvirtBaseFileSystemVolumeDriver):
            return self._get_mount_point_base() or None
        return None


class NetVolumeDefaults(VirtdriverRendering):
    """nova's net driver (Ceph RBD opened by QEMU): cephx user and secret fall back to
    ``[libvirt] rbd_user`` / ``rbd_secret_uuid``, as nova's driver reads them."""

    def _for_render(self, connection_info: Mapping[str, Any]) -> dict[str, Any]:
        info = super()._for_render(connection_info)
        data = info["data"]
        if data.get("auth_enabled"):
            if data.get("secret_uuid") is None:
                data["auth_username"] = CONF.libvirt.rbd_user
                data["secret_uuid"] = CONF.libvirt.rbd_secret_uuid
        elif CONF.libvirt.rbd_secret_uuid:
            data.update(auth_enabled=True, auth_username=CONF.libvirt.rbd_user,
                        secret_uuid=CONF.libvirt.rbd_secret_uuid)
        return info


#: What a nova class's own options add to the rendering (nova's knowledge, not a protocol's).
NOVA_CLASS_MIXINS: dict[str, type[VirtdriverRendering]] = {
    "nova.virt.libvirt.volume.net.LibvirtNetVolumeDriver": NetVolumeDefaults,
}


def adapter_class(volume_type: str, name: str,
                  binding: NovaBinding) -> type[VirtdriverRendering]:
    """The adapter of one protocol: the rendering mixin before the nova class it stands on."""
    nova_class = importutils.import_class(binding.driver_class)
    mixin = NOVA_CLASS_MIXINS.get(binding.driver_class, VirtdriverRendering)
    return type(name, (mixin, nova_class), {
        "__module__": __name__, "__qualname__": name,
        "__doc__": f"virtdriver's ``{volume_type}`` as nova's {nova_class.__name__}.",
        "volume_type": volume_type,
        "default_aio_drops_native": binding.default_aio_drops_native})


def _derive() -> dict[str, type[VirtdriverRendering]]:
    """nova class path -> adapter, for every registered protocol that declares a binding; a type
    nova's table lacks is added to it under the adapter's own path."""
    table: dict[str, type[VirtdriverRendering]] = {}
    for volume_type in registry.known_types():
        try:
            driver_cls = type(registry.get_driver(volume_type))
        except VirtDriverError as exc:  # a broken plugin costs its own protocol, not nova
            LOG.warning("volume type %s: %s; nova does not serve it through virtdriver",
                        volume_type, exc)
            continue
        binding = vars(driver_cls).get("nova")
        if binding is None:
            continue
        adapter = adapter_class(volume_type, driver_cls.__name__, binding)
        globals()[adapter.__name__] = adapter  # importable by the path nova's table holds
        nova_path = nova_driver.VOLUME_DRIVERS.setdefault(
            volume_type, f"{__name__}.{adapter.__name__}")
        if nova_path not in (binding.driver_class, f"{__name__}.{adapter.__name__}"):
            LOG.warning("volume type %s: nova's table names %s, not %s; nova's own driver "
                        "serves it", volume_type, nova_path, binding.driver_class)
            continue
        table[nova_path] = adapter
    return table


#: nova's dotted class path (the values of ``nova.virt.libvirt.driver.VOLUME_DRIVERS``) to the
#: adapter that replaces it.
NOVA_DRIVER_CLASSES: dict[str, type[VirtdriverRendering]] = _derive()

__all__ = ["NOVA_DRIVER_CLASSES", "NetVolumeDefaults", "RenderedDisk", "VirtdriverRendering",
           "adapter_class", *(cls.__name__ for cls in NOVA_DRIVER_CLASSES.values())]
