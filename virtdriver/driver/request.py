"""A volume request: a private copy of ``connection_info`` and what follows from it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from virtdriver.config import Disk
from virtdriver.errors import InvalidConnectionInfo, PolicyRefusal, VirtDriverError, show
from virtdriver.hypervisor.dataid import DataIdentity, data_identity, identity_token
from virtdriver.policy.attach import effective_attach_mode
from virtdriver.render import build_disk, check_nesting, volume_id
from virtdriver.shapes import normalize
from virtdriver.volume import RenderOptions, VolumeDriver, get_driver


@dataclass(frozen=True)
class VolumeRequest:
    """One volume as a caller asked for it."""

    info: dict[str, Any]
    vid: str
    multiattach: bool
    driver: VolumeDriver
    protocol: str | None  # os-brick's, None when QEMU connects by itself
    options: RenderOptions
    mode: str = "rw"  # what the document itself says: ro when its record or access_mode says so

    @classmethod
    def parse(cls, connection_info: Mapping[str, Any], options: RenderOptions) -> VolumeRequest:
        info, stated = copy_info_and_mode(connection_info)
        vid = volume_id(info)
        if vid is None:
            raise InvalidConnectionInfo("connection_info.data.volume_id",
                                        "is missing (neither volume_id nor serial identifies the "
                                        "volume, so its attachments could not be found again)")
        multiattach = info.get("multiattach", False)
        if not isinstance(multiattach, bool):
            raise InvalidConnectionInfo("connection_info.multiattach",
                                        f"{show(multiattach)} is not true or false")
        driver = get_driver(info.get("driver_volume_type"))
        driver.check_host_side(info["data"], options)  # before any lock or connect
        mode = effective_attach_mode(stated, info["data"].get("access_mode"))
        _check_renders(info, mode, options)
        return cls(info, vid, multiattach, driver, driver.brick_protocol_for(options), options,
                   mode)

    @property
    def data(self) -> dict[str, Any]:
        return self.info["data"]

    def data_before_connect(self) -> DataIdentity | None:
        """The data's identity as far as it is known before the host connects it.

        That is the protocol's own key (an iSCSI target and LUN), else the source it renders to
        now (a local device, a network volume); ``None`` when only the connect will tell.
        """
        key = self.driver.data_key(self.data, self.options)
        if key is not None:
            return ("key", *key)
        try:
            source = self.driver.source(self.data, self.options).source
        except VirtDriverError:
            return None
        return data_identity(Disk(source=source))

    def lock_data(self, identity: DataIdentity | None) -> list[tuple[str, str]]:
        """The data lock to take with the volume lock, for the data as known before connect.

        ``identity`` is what :meth:`data_before_connect` found (none when the data is not known
        yet); the checks under the lock use that same identity.
        """
        return [] if identity is None else [(identity_token(identity), f"volume {self.vid}")]


def _check_renders(info: dict[str, Any], mode: str, options: RenderOptions) -> None:
    """Render the disk once, so that bad input is refused as such before any lock or connect
    (a device path that only the host's connect fills in is not asked for yet)."""
    try:
        build_disk(info, attach_mode=mode, target_dev="sda", bus="scsi",
                   mount_base=options.mount_base, native_iscsi=options.native_iscsi,
                   native_glusterfs=options.native_glusterfs,
                   initiator_iqn=options.initiator_iqn)
    except InvalidConnectionInfo as exc:
        if not (exc.path.endswith(".device_path") and exc.problem.startswith("is missing")):
            raise
    except PolicyRefusal:
        pass  # asked again with the attachment's own mode and the host's options


def copy_info(connection_info: Mapping[str, Any]) -> dict[str, Any]:
    """A private deep copy in the legacy form (:func:`virtdriver.shapes.normalize`)."""
    return copy_info_and_mode(connection_info)[0]


def copy_info_and_mode(connection_info: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """A private deep copy in the legacy form and the attachment record's mode (else ``rw``),
    after checking the depth (before the copy recurses)."""
    if not isinstance(connection_info, Mapping):
        raise InvalidConnectionInfo("connection_info", "is not a JSON object")
    check_nesting(connection_info)
    normalized, mode = normalize(connection_info)  # any shape Cinder or nova sends
    info = _copied(normalized)
    info["data"] = dict(info["data"])
    return info, mode


_SCALARS = (str, int, float, bool, type(None))


def _copied(value: Any) -> Any:
    """A deep copy of a JSON document: its dicts and lists copied, its scalars shared (they
    cannot change); anything else through ``copy.deepcopy``. The depth was checked before."""
    kind = type(value)
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)
