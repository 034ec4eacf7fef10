"""iSCSI: a host block device from the kernel initiator, or QEMU's own initiator (libiscsi).

With the host option ``native_iscsi`` the disk becomes ``<disk type='network'>`` with
``protocol='iscsi'`` and ``name='IQN/LUN'``; CHAP credentials are referred to through a libvirt
secret of usage type ``iscsi`` whose usage name is :func:`chap_secret_usage` (the hypervisor layer
creates it from ``auth_username``/``auth_password``; the password never appears in XML).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from virtdriver.config import IQN, Auth, Host, Initiator, Secret, Source
from virtdriver.errors import InvalidConnectionInfo, show
from virtdriver.volume import probes
from virtdriver.volume.base import (
    DATA,
    HostSecret,
    NovaBinding,
    RenderOptions,
    VolumeSource,
    auth_username,
    check_luns,
    lun,
    optional_str,
    required_str,
    split_portal,
)
from virtdriver.volume.block import HostBlockDeviceDriver

ISCSI_PORT = 3260
MAX_LUN = 16384  # libiscsi's and the kernel initiator's (SAM's single-level) LUN numbers


def lun_number(data: Mapping[str, Any]) -> int:
    return lun(data.get("target_lun", 0), f"{DATA}.target_lun", MAX_LUN)


def chap_secret_usage(iqn: str, lun: int) -> str:
    """The usage name of the libvirt ``iscsi`` secret holding one target's CHAP password."""
    return f"virtdriver-iscsi-{iqn}-lun{lun}"


def check_portals(data: Mapping[str, Any]) -> None:
    """The target's portals (``target_portal``, and ``target_portals`` for multipath), checked by
    the one host rule even when the kernel's initiator, not QEMU, logs in to them; and its LUNs
    (``target_lun``, ``target_luns``), which the connected device is compared with."""
    check_luns(data, MAX_LUN)
    iqns = data.get("target_iqns")
    if iqns is not None and not (isinstance(iqns, list)
                                 and all(isinstance(i, str) and i for i in iqns)):
        raise InvalidConnectionInfo(f"{DATA}.target_iqns",
                                    f"{show(iqns)} is not a list of iSCSI names")
    if data.get("target_portal") is not None:
        split_portal(required_str(data, "target_portal"), f"{DATA}.target_portal")
    portals = data.get("target_portals")
    if portals is None:
        return
    if not isinstance(portals, list):
        raise InvalidConnectionInfo(f"{DATA}.target_portals", f"{show(portals)} is not a list")
    for i, portal in enumerate(portals):
        if not isinstance(portal, str):
            raise InvalidConnectionInfo(f"{DATA}.target_portals[{i}]",
                                        f"{show(portal)} is not a string")
        split_portal(portal, f"{DATA}.target_portals[{i}]")


def uses_chap(data: Mapping[str, Any]) -> bool:
    method = optional_str(data, "auth_method")
    if method is None or method.lower() == "none":
        return False
    if method.upper() != "CHAP":
        raise InvalidConnectionInfo(f"{DATA}.auth_method", f"{show(method)} is not CHAP or None")
    return True


class ISCSIVolumeDriver(HostBlockDeviceDriver):
    volume_type = "iscsi"
    nova = NovaBinding(
        "nova.virt.libvirt.volume.iscsi.LibvirtISCSIVolumeDriver", default_aio_drops_native=True)
    brick_protocol = "ISCSI"
    multipathd = True
    io = "native"

    qemu_block_driver = "iscsi"
    qemu_option = "--native-iscsi"

    def brick_protocol_for(self, options: RenderOptions) -> str | None:
        return None if options.native_iscsi else self.brick_protocol

    def host_secrets(self, data: Mapping[str, Any], options: RenderOptions) -> list[HostSecret]:
        if not options.native_iscsi or not uses_chap(data):
            return []
        password = data.get("auth_password")
        if not isinstance(password, str) or not password:
            raise InvalidConnectionInfo(f"{DATA}.auth_password", "is missing for CHAP")
        usage = chap_secret_usage(required_str(data, "target_iqn"), lun_number(data))
        return [HostSecret("iscsi", usage, password.encode())]

    def check_host_side(self, data: Mapping[str, Any], options: RenderOptions) -> None:
        check_portals(data)

    def data_key(self, data: Mapping[str, Any], options: RenderOptions) -> tuple[str, ...] | None:
        return ("iscsi", required_str(data, "target_iqn"), str(lun_number(data)))

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.iscsi_initiator()

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        check_portals(data)
        if not options.native_iscsi:
            return super().source(data, options)
        iqn = required_str(data, "target_iqn")
        if any(c.isspace() or c in "/<>&'\"" for c in iqn):
            raise InvalidConnectionInfo(f"{DATA}.target_iqn", f"{show(iqn)} is not an iSCSI name")
        lun = lun_number(data)
        host, port = split_portal(required_str(data, "target_portal"), f"{DATA}.target_portal")
        source = Source(protocol="iscsi", name=f"{iqn}/{lun}",
                        hosts=[Host(name=host, port=port or ISCSI_PORT)])
        if uses_chap(data):
            source.auth = Auth(username=auth_username(data),
                               secret=Secret(type="iscsi", usage=chap_secret_usage(iqn, lun)))
        if options.initiator_iqn:
            source.initiator = Initiator(iqn=IQN(name=options.initiator_iqn))
        return VolumeSource("network", source)
