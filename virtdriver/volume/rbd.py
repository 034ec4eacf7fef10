"""Ceph RBD, opened by QEMU's librbd: ``<source protocol='rbd' name='pool/image'>``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from virtdriver.config import Auth, Host, Secret, Source
from virtdriver.errors import InvalidConnectionInfo, show
from virtdriver.volume.base import (
    DATA,
    NovaBinding,
    RenderOptions,
    VolumeDriver,
    VolumeSource,
    auth_username,
    host_name,
    optional_bool,
    optional_str,
    port_number,
    required_str,
)

_IMAGE_NAME = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+){1,2}")
# libvirt's schema: 32 hex digits with all four dashes or with none
_UUID = re.compile(r"[0-9a-fA-F]{8}(-?)[0-9a-fA-F]{4}\1[0-9a-fA-F]{4}"
                   r"\1[0-9a-fA-F]{4}\1[0-9a-fA-F]{12}")


def _list(data: Mapping[str, Any], key: str, *, non_empty: bool = False) -> list[Any]:
    """A list, or ``[]`` when the key is absent; given but empty is refused with ``non_empty``."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or (non_empty and not value):
        raise InvalidConnectionInfo(f"{DATA}.{key}", f"{show(value)} is not a non-empty list"
                                    if non_empty else f"{show(value)} is not a list")
    return value


class RBDVolumeDriver(VolumeDriver):
    volume_type = "rbd"
    nova = NovaBinding("nova.virt.libvirt.volume.net.LibvirtNetVolumeDriver")
    qemu_block_driver = "rbd"

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        name = required_str(data, "name")
        if not _IMAGE_NAME.fullmatch(name):
            raise InvalidConnectionInfo(f"{DATA}.name", f"{show(name)} is not 'pool/image'")
        # No hosts at all: QEMU takes the monitors from ceph.conf. Given, they must be a list.
        hosts, ports = _list(data, "hosts", non_empty=True), _list(data, "ports")
        if ports and len(ports) != len(hosts):
            raise InvalidConnectionInfo(f"{DATA}.ports", f"has {len(ports)} entries for "
                                        f"{len(hosts)} hosts")
        source = Source(protocol="rbd", name=name, hosts=[
            Host(name=host_name(h, f"{DATA}.hosts[{i}]"),
                 port=port_number(ports[i] if ports else None, f"{DATA}.ports[{i}]"))
            for i, h in enumerate(hosts)])
        if optional_bool(data, "auth_enabled"):
            uuid = required_str(data, "secret_uuid")
            if not _UUID.fullmatch(uuid):
                raise InvalidConnectionInfo(f"{DATA}.secret_uuid", f"{show(uuid)} is not a UUID")
            secret_type = optional_str(data, "secret_type") or "ceph"
            if secret_type != "ceph":
                raise InvalidConnectionInfo(f"{DATA}.secret_type",
                                            f"{show(secret_type)} is not ceph")
            source.auth = Auth(username=auth_username(data),
                               secret=Secret(type="ceph", uuid=uuid))
        return VolumeSource("network", source)
