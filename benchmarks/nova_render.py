"""Disks per second for upstream Nova rendering one multiattach iSCSI ``<disk>``.

Run with the Nova venv's python, NOT the project's (create it with
``benchmarks/setup-nova-venv.sh``)::

    /var/tmp/nova-venv/bin/python benchmarks/nova_render.py --seconds 1

It goes through the path nova-compute uses for a volume attach:
``LibvirtISCSIVolumeDriver(host).get_config(connection_info, disk_info).to_xml()``.
``LibvirtDriver._get_volume_config`` then also runs ``_set_cache_mode``, which for a
shareable (multiattach) disk only forces ``cache='none'`` -- already what ``get_config`` set --
so it is left out. The SCSI unit goes in through ``disk_info['unit']``, as nova's blockinfo
does; the base driver turns it into a ``LibvirtConfigGuestDeviceAddressDrive``.

``host`` is a stand-in: the only thing ``get_config`` asks of it is ``find_secret('volume',
volume_id)``, which a real ``nova.virt.libvirt.host.Host`` answers with ``None`` when the
volume has no LUKS secret (a real Host needs libvirt-python and a libvirtd connection).

Prints one JSON line: ``{"nova_version", "disks_per_s", "xml"}``. Nothing of nova is copied.
"""

from __future__ import annotations

import argparse
import json
import warnings
from importlib.metadata import version

from timing import best_rate

CONNECTION_INFO = {
    "driver_volume_type": "iscsi",
    "serial": "4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e",
    "multiattach": True,
    "data": {
        "volume_id": "4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e",
        "target_iqn": "iqn.2010-10.org.openstack:volume-4f1c2b7e",
        "target_portal": "192.0.2.5:3260",
        "target_lun": 1,
        "device_path": "/dev/disk/by-path/ip-192.0.2.5:3260-iscsi-"
                       "iqn.2010-10.org.openstack:volume-4f1c2b7e-lun-1",
        "qos_specs": {"read_iops_sec": 500, "write_iops_sec": "300"},
        "discard": True,
        "access_mode": "ro",
    },
}
# What nova.virt.libvirt.blockinfo hands the volume driver for a virtio-scsi disk at unit 3.
DISK_INFO = {"bus": "scsi", "dev": "sdb", "type": "disk", "unit": 3}


class NoSecretHost:
    """Minimal stand-in for nova.virt.libvirt.host.Host: the volume has no LUKS secret."""

    def find_secret(self, usage_type: str, usage_id: str) -> None:
        return None


def make_driver():  # type: ignore[no-untyped-def]
    warnings.simplefilter("ignore")  # eventlet/oslo deprecation noise on import
    import nova.conf
    nova.conf.CONF([], project="nova", default_config_files=[])  # defaults: virt_type=kvm
    from nova.virt.libvirt.volume.iscsi import LibvirtISCSIVolumeDriver
    return LibvirtISCSIVolumeDriver(NoSecretHost())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one window")
    parser.add_argument("--windows", type=int, default=3, help="best of this many windows")
    args = parser.parse_args()

    driver = make_driver()

    def render() -> str:
        return driver.get_config(CONNECTION_INFO, DISK_INFO).to_xml()

    xml = render()
    rate = best_rate(render, args.seconds, args.windows)
    print(json.dumps({"nova_version": version("nova"), "disks_per_s": round(rate, 1),
                      "xml": xml}))


if __name__ == "__main__":
    main()
