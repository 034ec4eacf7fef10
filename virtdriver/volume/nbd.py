"""NBD, opened by QEMU itself: ``data.host``/``data.port`` (TCP) or ``data.socket`` (UNIX)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from virtdriver.config import Host, Source
from virtdriver.errors import InvalidConnectionInfo
from virtdriver.volume.base import (
    DATA,
    RenderOptions,
    VolumeDriver,
    VolumeSource,
    absolute_path,
    host_name,
    optional_str,
    port_number,
)

NBD_PORT = 10809


class NBDVolumeDriver(VolumeDriver):
    volume_type = "nbd"
    qemu_block_driver = "nbd"
    # QEMU's NBD client keeps the size the server announced at connect and refuses to grow it.
    extend_refused = ("QEMU's NBD client cannot grow an export it has open; detach the volume, "
                      "grow the export, and attach it again")

    def source(self, data: Mapping[str, Any], options: RenderOptions) -> VolumeSource:
        export = optional_str(data, "name")
        if data.get("socket") is not None:
            host = Host(transport="unix", socket=absolute_path(data, "socket"))
        elif data.get("host") is not None:
            host = Host(name=host_name(data["host"], f"{DATA}.host"),
                        port=port_number(data.get("port"), f"{DATA}.port") or NBD_PORT)
        else:
            raise InvalidConnectionInfo(f"{DATA}.host", "is missing (give host/port or socket)")
        return VolumeSource("network", Source(protocol="nbd", name=export, hosts=[host]))
