"""Volumes that are files on a shared filesystem the host mounts (NFS, GlusterFS, SMB, ...).

The file lives at ``<mount_base>/<md5 hex of the export>/<data.name>``, the path os-brick's
RemoteFsClient mounts the share at; ``data.device_path``, when the connect step filled it in, wins.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping
from typing import Any, ClassVar

from virtdriver.config import Source
from virtdriver.errors import InvalidConnectionInfo, show
from virtdriver.volume.base import (
    DATA,
    RenderOptions,
    VolumeDriver,
    VolumeSource,
    absolute_path,
    disk_format,
    required_str,
)
from virtdriver.volume.hostname import host_name, split_host_port


def mount_point(mount_base: str, export: str) -> str:
    """Where os-brick's RemoteFsClient mounts ``export`` below ``mount_base``.

    Hand-written on purpose: importing ``os_brick.remotefs`` takes about 0.5 s here (three times
    all of ``virtdriver.render``), and rendering must not load os-brick. That it is the same path
    as ``RemoteFsClient.get_mount_point`` is checked against os-brick itself by the tests.
    """
    return posixpath.join(mount_base, hashlib.md5(export.encode()).hexdigest())  # noqa: S324


def split_export(export: str, where: str) -> tuple[str, str]:
    """``host:/path`` or ``[2001:db8::5]:/path`` (NFS, GlusterFS) into the checked host and the
    path."""
    if export.startswith("["):
        host, sep, rest = export[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise InvalidConnectionInfo(where, f"{show(export)} is not '[address]:/path'")
        return host_name(f"[{host}]", where), rest[1:]
    host, sep, path = export.partition(":")
    if not sep:
        raise InvalidConnectionInfo(where, f"{show(export)} is not 'host:/path'")
    return host_name(host, where), path


def export_hosts(export: str, style: str | None, where: str) -> list[str]:
    """The hosts a share is mounted from, each checked by the one host-name rule.

    ``colon`` (``host:/path``), ``unc`` (``//host/share``), ``list``
    (``host[:port],.../volume``), or ``None`` for a share named without a host (a cluster)."""
    if style == "colon":
        return [split_export(export, where)[0]]
    if style == "unc":
        unc = export.replace("\\", "/")
        host, sep, _ = unc[2:].partition("/") if unc.startswith("//") else ("", "", "")
        if not sep:
            raise InvalidConnectionInfo(where, f"{show(export)} is not '//host/share'")
        return [host_name(host, where)]
    if style == "list" and "/" in export:
        return [split_host_port(part, where)[0] for part in export.split("/", 1)[0].split(",")]
    return []


class RemoteFsVolumeDriver(VolumeDriver):
    """A file on a mounted share; subclasses set protocol, cache and I/O defaults."""

    cache: ClassVar[str] = "none"
    io: ClassVar[str | None] = "native"
    export_prefix: ClassVar[str] = ""
    #: How the share names the hosts it is mounted from (see :func:`export_hosts`).
    export_style: ClassVar[str | None] = "colon"

    def export(self, data: Mapping[str, Any]) -> str:
        export = required_str(data, "export")
        if self.export_prefix and export.startswith(self.export_prefix):
            export = export[len(self.export_prefix):]
        export_hosts(export, self.export_style, f"{DATA}.export")
        return export

    def file_path(self, data: Mapping[str, Any], options: RenderOptions) -> str:
        if data.get("device_path") is not None:
            return absolute_path(data, "device_path")
        name = required_str(data, "name")
        if "/" in name or name in (".", ".."):
            raise InvalidConnectionInfo(f"{DATA}.name", f"{show(name)} is not a file name")
        if not options.mount_base:
            raise InvalidConnectionInfo(f"{DATA}.device_path", "is missing, so the file is found "
                                        "on the mounted share: give its mount base (mount_base, "
                                        "--mount-base on the command line)")
        if not options.mount_base.startswith("/"):
            raise InvalidConnectionInfo("mount_base",
                                        f"{show(options.mount_base)} is not absolute")
        return posixpath.join(mount_point(options.mount_base, self.export(data)), name)

    def mount_base(self, options: RenderOptions) -> str | None:
        return options.mount_base if self.brick_protocol_for(options) else None

    def connector_options(self, options: RenderOptions) -> dict[str, Any]:
        protocol = self.brick_protocol_for(options)
        if protocol is None or not options.mount_base:
            return {}
        return {f"{protocol.lower()}_mount_point_base": options.mount_base}

    def check_host_side(self, data: Mapping[str, Any], options: RenderOptions) -> None:
        if data.get("export") is not None:  # the host mounts it: its host is checked even when
            self.export(data)               # device_path says where the file already is

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        self.check_host_side(data, options)
        return VolumeSource("file", Source(file=self.file_path(data, options)),
                            format=disk_format(data), cache=self.cache, io=self.io)
