"""Each adapter means what nova's own driver means (issue #21, part 3).

For every volume type of nova's table, a ``connection_info`` as Cinder's driver and volume
manager produce it (:mod:`cinder_documents`), with and without front-end QoS (and with burst
lengths), attached rw, ro, and multiattach rw/ro, on virtio and on scsi with a unit, with
``[libvirt] use_default_aio_mode_for_volumes`` off and on: nova's driver renders its disk (then
nova's compute applies its cache step, ``_set_cache_mode``, as it does to every volume), the
adapter renders its own, and the two ``LibvirtConfigGuestDisk`` objects are compared attribute by
attribute. What the adapter adds beyond nova's attributes may only be per-disk ``<seclabel>``s
(docs/nova.md). Real parts: nova's drivers and config, nova's ``Host`` on this machine's libvirtd
(for the encryption-secret lookup both make).

Needs nova 34: ``scripts/nova-suite.sh`` runs this file in its nova venv; in virtdriver's own
venv it is skipped.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest.importorskip("nova.conf", reason="needs nova 34; scripts/nova-suite.sh runs it in its venv")

import cinder_documents as docs  # noqa: E402

pytestmark = pytest.mark.hypervisor

BUSES = {"virtio": {"bus": "virtio", "dev": "vdb", "type": "disk"},
         "scsi": {"bus": "scsi", "dev": "sdb", "type": "disk", "unit": 1}}

#: nova's disk attributes that a volume's config never sets (image disks, snapshots, ...).
NOT_FOR_VOLUMES = ("backing_store", "boot_order", "ephemeral_encryption", "mirror", "ns_prefix",
                   "ns_uri", "root_name", "snapshot", "target_path")


@pytest.fixture(scope="module")
def nova_host() -> Any:
    if not os.path.exists("/var/run/libvirt/libvirt-sock"):
        pytest.skip("libvirtd is not running (./scripts/setup-host.sh starts it)")
    import libvirt
    from nova.virt.libvirt import host

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # "no such secret" is expected
    return host.Host("qemu:///system")


@pytest.fixture
def conf() -> Any:
    import nova.conf
    from oslo_config import fixture

    config = fixture.Config(nova.conf.CONF)
    config.setUp()
    config.config(group="libvirt", virt_type="kvm")
    yield config
    config.cleanUp()


def _construct(cls: type, host: Any) -> Any:
    """A volume driver as nova builds it; StorPool's os-brick connector needs the StorPool
    client's configuration file, which ``get_config`` never uses: without it the connector is
    left out (for nova's class and the adapter alike)."""
    from nova.virt.libvirt.volume import volume
    from os_brick import exception as brick_exception

    try:
        return cls(host)
    except brick_exception.BrickException:
        driver = cls.__new__(cls)
        volume.LibvirtBaseVolumeDriver.__init__(driver, host, is_block_dev=True)
        return driver


def _drivers(kind: str, host: Any) -> tuple[Any, Any]:
    from nova.virt.libvirt import driver as nova_driver
    from oslo_utils import importutils

    from virtdriver.nova import NOVA_DRIVER_CLASSES

    path = nova_driver.VOLUME_DRIVERS[kind]
    return (_construct(importutils.import_class(path), host),
            _construct(NOVA_DRIVER_CLASSES[path], host))


def _fields(disk: Any) -> dict[str, Any]:
    """nova's attributes of a disk config, comparable (numbers as text, sub-objects as tuples)."""
    out = {}
    for name, value in vars(disk).items():
        if name in NOT_FOR_VOLUMES or name in ("rendered", "source_extra", "iotune_extra",
                                               "host_extra", "driver_extra"):
            continue
        if name == "device_addr" and value is not None:
            # libvirt reads an absent bus or target of a drive address as 0
            value = tuple("0" if v is None else str(v) for v in (
                value.controller, value.bus, value.target, value.unit)) + (value.type,)
        elif name == "volume_encryption" and value is not None:
            value = (value.format, value.secret.type, value.secret.uuid)
        elif isinstance(value, list):
            value = [None if v is None else str(v) for v in value]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        out[name] = value
    if out.get("source_type") != "network":
        # nova's quobyte driver names a protocol for a file disk; only a network disk writes it
        out.pop("source_protocol", None)
    return out


def _nova_cache_step(disk: Any) -> None:
    """What nova's compute driver does to every volume's config (default ``disk_cachemodes``)."""
    from types import SimpleNamespace

    from nova.virt.libvirt import driver as nova_driver

    nova_driver.LibvirtDriver._set_cache_mode(SimpleNamespace(disk_cachemodes={}), disk)


def documented_refusal(info: dict[str, Any]) -> str | None:
    """The refusal docs/nova.md lists for this document (nova renders it), or ``None``."""
    data = info["data"]
    if info["multiattach"] and data.get("encrypted"):
        return "encrypted"
    if (info["multiattach"] and data["access_mode"] == "rw"
            and data.get("format", "raw") != "raw"):
        return "cannot be shared read-write: libvirt allows shared write access to raw images"
    return None


def _kinds() -> list[str]:
    return sorted(docs.DRIVER_DATA)


def test_documents_cover_every_type_of_novas_table() -> None:
    from nova.virt.libvirt import driver as nova_driver

    assert sorted(set(nova_driver.VOLUME_DRIVERS) - {"fake"}) == _kinds()


def _compare(nova_vol: Any, adapter: Any, info: dict[str, Any], disk_info: dict[str, Any],
             label: str) -> list[str]:
    """The differences between nova's disk (after nova's cache step) and the adapter's."""
    from nova.exception import InvalidVolume

    theirs = nova_vol.get_config(info, dict(disk_info))
    _nova_cache_step(theirs)
    refusal = documented_refusal(info)
    if refusal is not None:
        with pytest.raises(InvalidVolume, match=refusal):
            adapter.get_config(info, dict(disk_info))
        return []
    ours = adapter.get_config(info, dict(disk_info))
    want, got = _fields(theirs), _fields(ours)
    differences = [f"{label}: {name}: nova {want.get(name)!r}, virtdriver {got.get(name)!r}"
                   for name in sorted(set(want) | set(got)) if want.get(name) != got.get(name)]
    extra = [e.tag for e in ours.source_extra if e.tag != "seclabel"]
    extra += list(ours.iotune_extra) + [k for h in ours.host_extra for k in h]
    extra += list(ours.driver_extra)  # error policies: only when asked for (and for a lun)
    if extra:
        differences.append(f"{label}: beyond nova's attributes: {extra}")
    return differences


@pytest.mark.parametrize("aio", [False, True], ids=["aio-native", "aio-default"])
@pytest.mark.parametrize("kind", _kinds())
def test_adapter_disk_equals_novas(kind: str, aio: bool, nova_host: Any, conf: Any) -> None:
    from nova.exception import InvalidVolume

    conf.config(group="libvirt", use_default_aio_mode_for_volumes=aio)
    nova_vol, adapter = _drivers(kind, nova_host)

    def fs_path(_kind: str, info: dict[str, Any]) -> str:
        return nova_vol._get_device_path(info)

    differences = []
    compared = 0
    for qos in docs.QOS:
        for attach in docs.ATTACH:
            for bus, disk_info in BUSES.items():
                info = docs.document(kind, qos, attach, fs_path)
                differences += _compare(nova_vol, adapter, info, disk_info,
                                        f"{qos}/{attach}/{bus}")
                compared += 1
    assert compared == len(docs.QOS) * len(docs.ATTACH) * len(BUSES)
    assert not differences, "\n".join(differences)


@pytest.fixture
def volume_secret(nova_host: Any) -> Any:
    """A LUKS passphrase secret for a fresh volume id on this libvirtd, as nova defines one for
    an encrypted volume (usage type ``volume``, the volume id as usage)."""
    import uuid

    volume_id = str(uuid.uuid4())
    conn = nova_host.get_connection()
    secret = conn.secretDefineXML(
        "<secret ephemeral='yes' private='yes'><usage type='volume'>"
        f"<volume>{volume_id}</volume></usage></secret>")
    yield volume_id, secret.UUIDString()
    secret.undefine()


@pytest.mark.parametrize("kind", _kinds())
def test_encrypted_volume_disk_equals_novas(kind: str, nova_host: Any, conf: Any,
                                            volume_secret: Any) -> None:
    volume_id, secret_uuid = volume_secret
    nova_vol, adapter = _drivers(kind, nova_host)
    differences = []
    for attach in ("rw", "ro", "multiattach-rw"):
        info = docs.document(kind, "qos", attach, lambda _k, i: nova_vol._get_device_path(i))
        info["serial"] = info["data"]["volume_id"] = volume_id
        info["data"]["encrypted"] = True
        differences += _compare(nova_vol, adapter, info, BUSES["virtio"], attach)
        if documented_refusal(info) is None:
            disk = adapter.get_config(info, dict(BUSES["virtio"]))
            assert disk.volume_encryption.secret.uuid == secret_uuid
    assert not differences, "\n".join(differences)


def test_ro_refused_on_ide_says_why(nova_host: Any, conf: Any) -> None:
    """nova renders a read-only ide disk and libvirt refuses it at attach; virtdriver refuses it
    when rendering, and nova's message carries the reason."""
    from nova.exception import InvalidVolumeAccessMode

    nova_vol, adapter = _drivers("iscsi", nova_host)
    info = docs.document("iscsi", "no-qos", "ro", lambda _k, _i: "")
    disk_info = {"bus": "ide", "dev": "hdb", "type": "disk"}
    assert nova_vol.get_config(info, dict(disk_info)).readonly
    with pytest.raises(InvalidVolumeAccessMode) as raised:
        adapter.get_config(info, dict(disk_info))
    message = raised.value.format_message()
    assert message.startswith("Invalid volume access mode: ro: ")
    assert "libvirt cannot make a ide disk read-only" in message
