"""``testfs``: a network-filesystem protocol from outside virtdriver, for virtdriver's tests.

A volume is a file on a GlusterFS share the host mounts through os-brick (as a third-party
shared-filesystem protocol would be): everything the host side needs -- the os-brick protocol,
where shares are mounted, the connector's keyword arguments -- is declared here, through the
contract of :class:`virtdriver.volume.base.VolumeDriver`, and nowhere in virtdriver. So is what
nova needs (:class:`~virtdriver.volume.base.NovaBinding`): nova's generic volume driver, whose
connect is the host's, stands under its derived adapter in ``virtdriver.nova``.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

from virtdriver.config import Source
from virtdriver.errors import InvalidConnectionInfo
from virtdriver.volume.base import NovaBinding, RenderOptions, VolumeDriver, VolumeSource


class TestFsVolumeDriver(VolumeDriver):
    volume_type = "testfs"
    brick_protocol = "GLUSTERFS"
    nova = NovaBinding("nova.virt.libvirt.volume.volume.LibvirtVolumeDriver")

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        path = data.get("device_path")
        if not isinstance(path, str) or not path.startswith("/"):
            raise InvalidConnectionInfo("connection_info.data.device_path",
                                        "is missing: the host connects testfs volumes first")
        return VolumeSource("file", Source(file=path), format="raw", cache="none", io="native")

    def mount_base(self, options: RenderOptions) -> str | None:
        return options.mount_base

    def connector_options(self, options: RenderOptions) -> dict[str, Any]:
        return {"glusterfs_mount_point_base": options.mount_base}

    def host_probe(self) -> tuple[bool, str] | None:
        found = shutil.which("mount.glusterfs") is not None
        return found, "mount.glusterfs found" if found else "no mount.glusterfs"
