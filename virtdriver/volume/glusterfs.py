"""GlusterFS: a file on the FUSE-mounted volume, or QEMU's native ``protocol='gluster'``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from virtdriver.config import Host, Source
from virtdriver.errors import InvalidConnectionInfo, show
from virtdriver.volume import probes
from virtdriver.volume.base import DATA, RenderOptions, VolumeSource, disk_format
from virtdriver.volume.remotefs import RemoteFsVolumeDriver, split_export

GLUSTERD_PORT = 24007


class GlusterFSVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "glusterfs"
    brick_protocol = "GLUSTERFS"

    qemu_block_driver = "gluster"
    qemu_option = "--native-glusterfs"

    def brick_protocol_for(self, options: RenderOptions) -> str | None:
        return None if options.native_glusterfs else self.brick_protocol

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.fuse_mount("mount.glusterfs")

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        if not options.native_glusterfs:
            return super().source(data, options)
        export = self.export(data)  # "host:/volume"
        host, volume = split_export(export, f"{DATA}.export")
        volume = volume.strip("/")
        if not volume or "/" in volume:
            raise InvalidConnectionInfo(f"{DATA}.export", f"{show(export)} is not 'host:/volume'")
        name = self.file_path(data, RenderOptions(mount_base="/")).rpartition("/")[2]
        source = Source(protocol="gluster", name=f"{volume}/{name}",
                        hosts=[Host(name=host, port=GLUSTERD_PORT)])
        return VolumeSource("network", source, format=disk_format(data))
