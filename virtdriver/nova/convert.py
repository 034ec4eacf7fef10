"""A :class:`virtdriver.config.Disk` converted field by field into nova's disk config object.

nova's ``LibvirtConfigGuestDisk`` is what nova's compute driver hands to libvirt (``to_xml()``),
compares (swap, detach) and stores. We fill its attributes from the ``Disk`` virtdriver rendered,
never by parsing XML (nova's parser drops ``device``, ``<auth>`` and ``<iotune>``). The few things
nova's object has no attribute for -- per-disk ``<seclabel>`` (label policy), the initiator IQN of
a QEMU-native iSCSI source, ``<host>`` transport/socket, ``<source>``-level ``<auth>``, the
``<driver>``'s error policies -- are kept by :class:`RenderedDisk`, a subclass that adds them when
formatting. ``.rendered`` keeps the ``Disk`` itself, so ``to_xml()`` never loses a field we
rendered.
"""

from __future__ import annotations

from typing import Any

from lxml import etree
from nova.virt.libvirt import config as vconfig

from virtdriver.config import Auth, Disk, IoTune

#: ``<iotune>`` children nova's object has an attribute for (``disk_<name>``).
NOVA_IOTUNE = ("total_bytes_sec", "read_bytes_sec", "write_bytes_sec", "total_iops_sec",
               "read_iops_sec", "write_iops_sec", "total_bytes_sec_max", "read_bytes_sec_max",
               "write_bytes_sec_max", "total_iops_sec_max", "read_iops_sec_max",
               "write_iops_sec_max", "size_iops_sec")


class RenderedDisk(vconfig.LibvirtConfigGuestDisk):
    """nova's disk config plus what nova's attributes cannot say; ``rendered`` is our ``Disk``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rendered: Disk | None = None
        self.source_extra: list[etree._Element] = []   # seclabels, initiator, source auth
        self.iotune_extra: dict[str, str] = {}          # burst lengths, group name
        self.host_extra: list[dict[str, str]] = []      # transport/socket per <host>
        self.driver_extra: dict[str, str] = {}          # error_policy, rerror_policy

    def format_dom(self) -> etree._Element:
        dev = super().format_dom()
        driver = dev.find("driver")
        if driver is not None:
            for key, value in self.driver_extra.items():
                driver.set(key, value)
        source = dev.find("source")
        if source is not None:
            for index, extra in enumerate(self.host_extra):
                hosts = source.findall("host")
                if index < len(hosts):
                    for key, value in extra.items():
                        hosts[index].set(key, value)
            for element in self.source_extra:
                source.append(_copy(element))
        if self.iotune_extra:
            iotune = dev.find("iotune")
            if iotune is None:
                iotune = etree.SubElement(dev, "iotune")
            for key, value in self.iotune_extra.items():
                etree.SubElement(iotune, key).text = value
        return dev


def _copy(element: etree._Element) -> etree._Element:
    return etree.fromstring(etree.tostring(element))


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def to_nova(disk: Disk) -> RenderedDisk:
    """nova's config object for ``disk``, every rendered field carried over."""
    conf = RenderedDisk()
    conf.rendered = disk
    conf.source_type = disk.type
    conf.source_device = disk.device or "disk"
    _driver(conf, disk)
    _source(conf, disk)
    auth = disk.auth
    if auth is None and _by_uuid(disk.source.auth if disk.source is not None else None):
        auth = disk.source.auth  # type: ignore[union-attr]  # nova's slot: same meaning
    if auth is not None and auth.secret is not None:
        conf.auth_username = auth.username
        conf.auth_secret_type = auth.secret.type
        conf.auth_secret_uuid = auth.secret.uuid
    if disk.target is not None:
        conf.target_dev = disk.target.dev
        conf.target_bus = disk.target.bus
    conf.serial = disk.serial
    if disk.iotune is not None:
        _iotune(conf, disk.iotune)
    if disk.blockio is not None:
        conf.logical_block_size = _str(disk.blockio.logical_block_size)
        conf.physical_block_size = _str(disk.blockio.physical_block_size)
    conf.readonly = disk.readonly
    conf.shareable = disk.shareable
    if disk.boot is not None:
        conf.boot_order = _str(disk.boot.order)
    if disk.address is not None and disk.address.type == "drive":
        addr = vconfig.LibvirtConfigGuestDeviceAddressDrive()
        addr.controller, addr.bus = disk.address.controller, disk.address.bus
        addr.target, addr.unit = disk.address.target, disk.address.unit
        conf.device_addr = addr
    if disk.encryption is not None and disk.encryption.secret is not None:
        enc = vconfig.LibvirtConfigGuestDiskEncryption()
        enc.format = disk.encryption.format
        enc.secret = vconfig.LibvirtConfigGuestDiskEncryptionSecret()
        enc.secret.type = disk.encryption.secret.type
        enc.secret.uuid = disk.encryption.secret.uuid
        conf.volume_encryption = enc
    if disk.alias is not None:
        conf.alias = disk.alias.name
    return conf


def _by_uuid(auth: Auth | None) -> bool:
    """True for an ``<auth>`` nova's attributes can hold (a secret named by UUID).

    libvirt reads ``<auth>`` inside ``<source>`` and beside it alike; a secret named by usage
    (QEMU-native iSCSI CHAP) stays inside ``<source>``.
    """
    return (auth is not None and auth.secret is not None and auth.secret.uuid is not None
            and auth.secret.usage is None)


def _driver(conf: RenderedDisk, disk: Disk) -> None:
    drv = disk.driver
    if drv is None:
        return
    conf.driver_name = drv.name
    conf.driver_format = drv.type
    conf.driver_cache = drv.cache
    conf.driver_io = drv.io
    conf.driver_discard = drv.discard
    conf.driver_extra = {k: v for k, v in (("error_policy", drv.error_policy),
                                           ("rerror_policy", drv.rerror_policy)) if v}


def _source(conf: RenderedDisk, disk: Disk) -> None:
    src = disk.source
    if src is None:
        return
    conf.source_path = src.dev or src.file or src.dir
    conf.source_protocol = src.protocol
    conf.source_name = src.name
    conf.source_hosts = [h.name or "" for h in src.hosts]
    conf.source_ports = [_str(h.port) for h in src.hosts]
    conf.host_extra = [{k: v for k, v in (("transport", h.transport), ("socket", h.socket))
                        if v is not None} for h in src.hosts]
    source_auth = None if _by_uuid(src.auth) and disk.auth is None else src.auth
    for part in (*src.seclabels, source_auth, src.initiator):
        if part is not None:
            conf.source_extra.append(part.to_element())


def _iotune(conf: RenderedDisk, iotune: IoTune) -> None:
    for name in NOVA_IOTUNE:
        value = getattr(iotune, name)
        if value is not None:
            setattr(conf, "disk_" + name, str(value))
    for name in ("group_name", "total_bytes_sec_max_length", "read_bytes_sec_max_length",
                 "write_bytes_sec_max_length", "total_iops_sec_max_length",
                 "read_iops_sec_max_length", "write_iops_sec_max_length"):
        value = getattr(iotune, name)
        if value is not None:
            conf.iotune_extra[name] = str(value)
