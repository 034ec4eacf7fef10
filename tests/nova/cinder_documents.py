"""``connection_info`` as nova's libvirt volume drivers see it in ``get_config``, one per type.

Each is what the Cinder driver of that protocol returns from ``initialize_connection``, plus
what Cinder's volume manager adds (``_parse_connection_options``: ``qos_specs`` of a front-end
QoS spec, with the string values Cinder stores, ``access_mode``, ``encrypted``, ``discard``
where the backend reports it), plus what nova itself adds before rendering: ``serial`` and
``multiattach`` (``nova.virt.block_device``) and ``data.device_path``, which nova's
``connect_volume`` sets from os-brick's answer or from the share's mount point. quobyte keeps no
``device_path``: nova's driver computes it in ``get_config`` from the export.

``documents(fs_path)`` builds them; ``fs_path(kind, data)`` gives the mounted file of a share
(nova's ``_get_device_path``), so the fixtures agree with nova's mount bases.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

VOLUME = "9c1e7a44-52d8-4f86-9d5b-2f0a7c3e8b15"
SECRET = "457eb676-33da-42ec-9a8c-9293d545c337"

_ISCSI = {
    "target_discovered": False, "target_portal": "192.0.2.10:3260",
    "target_iqn": f"iqn.2010-10.org.openstack:volume-{VOLUME}", "target_lun": 1,
    "auth_method": "CHAP", "auth_username": "Wm3AeXtFh5bGkQpZ",
    "auth_password": "mhu3Qnb4XxjNYY6r",
    "device_path": f"/dev/disk/by-path/ip-192.0.2.10:3260-iscsi-iqn.2010-10.org.openstack:"
                   f"volume-{VOLUME}-lun-1",
}

#: Cinder driver's part of ``data``, by nova's ``driver_volume_type``.
DRIVER_DATA: dict[str, dict[str, Any]] = {
    "iscsi": _ISCSI,
    "iser": {**_ISCSI, "device_path": _ISCSI["device_path"].replace("-iscsi-", "-iser-")},
    "local": {"device_path": f"/dev/cinder-volumes/volume-{VOLUME}"},
    "rbd": {"name": f"volumes/volume-{VOLUME}", "hosts": ["192.0.2.21", "192.0.2.22"],
            "ports": ["6789", "6789"], "cluster_name": "ceph", "auth_enabled": True,
            "auth_username": "cinder", "secret_type": "ceph", "secret_uuid": SECRET,
            "keyring": None, "discard": True},
    "nfs": {"export": "192.0.2.30:/srv/cinder", "name": f"volume-{VOLUME}", "options": None,
            "format": "raw"},
    "smbfs": {"export": "//192.0.2.40/cinder", "name": f"volume-{VOLUME}.qcow2",
              "options": "-o username=cinder,password=secret", "format": "qcow2"},
    "fibre_channel": {"target_discovered": False, "target_lun": 1,
                      "target_wwn": ["500a098280feeba5", "500a098290feeba5"],
                      "initiator_target_map": {"21000024ff406cc3": ["500a098280feeba5"]},
                      "device_path": "/dev/dm-3"},
    "gpfs": {"name": f"volume-{VOLUME}", "device_path": f"/gpfs/cinder/volume-{VOLUME}"},
    "quobyte": {"export": "quobyte://192.0.2.50/cinder-volumes", "name": f"volume-{VOLUME}",
                "format": "qcow2"},
    "scaleio": {"scaleIO_volname": "Ql2iYYk9SVeGMnZt3W1cNQ==", "hostIP": None,
                "serverIP": "192.0.2.70", "serverPort": 443, "serverUsername": "admin",
                "iopsLimit": None, "bandwidthLimit": None, "scaleIO_volume_id": "d6e8f7a100000003",
                "config_group": "powerflex", "failed_over": False, "discard": True,
                "device_path": "/dev/disk/by-id/emc-vol-6e8d0b3c2d1e4f5a-d6e8f7a100000003"},
    "vzstorage": {"export": "cluster1", "name": f"volume-{VOLUME}", "format": "raw",
                  "options": ["-u", "cinder", "-g", "root", "-m", "0770"]},
    "storpool": {"client_id": 1, "volume": VOLUME,
                 "device_path": "/dev/storpool-byid/gbuk.b.lmsk"},
    "nvmeof": {"target_nqn":
               "nqn.2014-08.org.nvmexpress:uuid:5b8cbb1a-48a1-4ed6-8d6e-3e5b7c9f2a10",
               "vol_uuid": VOLUME, "portals": [["192.0.2.60", "4420", "tcp"]],
               "device_path": "/dev/nvme0n1"},
    "lightos": {"name": f"volume-{VOLUME}", "uuid": VOLUME,
                "subsystem_nqn": "nqn.2016-01.com.lightbitslabs:uuid:3d4c8e8c-0b1e",
                "lightos_nodes": {"192.0.2.80": 4420}, "found_discovery_client": True,
                "device_path": "/dev/nvme1n1"},
}

#: file-system types whose file nova finds below its mount base (``connect_volume`` sets it).
MOUNTED = ("nfs", "smbfs", "vzstorage")

#: Cinder front-end QoS specs (strings, as Cinder stores them): the keys nova writes, and the same
#: with burst lengths, which nova's drivers ignore.
QOS: dict[str, dict[str, str] | None] = {
    "no-qos": None,
    "qos": {"total_bytes_sec": "104857600", "read_iops_sec": "2000", "write_iops_sec": "1000",
            "read_iops_sec_max": "4000", "write_iops_sec_max": "2000", "size_iops_sec": "4096"},
    "qos-burst-length": {"total_bytes_sec": "104857600", "total_bytes_sec_max": "209715200",
                         "total_bytes_sec_max_length": "60", "read_iops_sec": "2000",
                         "read_iops_sec_max": "4000", "read_iops_sec_max_length": "30"},
}

#: how the volume is attached: (access_mode, multiattach)
ATTACH: dict[str, tuple[str, bool]] = {
    "rw": ("rw", False), "ro": ("ro", False), "multiattach-rw": ("rw", True),
    "multiattach-ro": ("ro", True),
}


def document(kind: str, qos: str, attach: str,
             fs_path: Callable[[str, dict[str, Any]], str]) -> dict[str, Any]:
    access_mode, multiattach = ATTACH[attach]
    data = copy.deepcopy(DRIVER_DATA[kind])
    data.update(volume_id=VOLUME, qos_specs=copy.deepcopy(QOS[qos]), access_mode=access_mode,
                encrypted=False)
    data.setdefault("discard", False)
    info = {"driver_volume_type": kind, "data": data, "serial": VOLUME,
            "multiattach": multiattach}
    if kind in MOUNTED:
        data["device_path"] = fs_path(kind, info)
    return info
