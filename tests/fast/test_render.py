"""The render path: input checking, property-based robustness, plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from virtdriver import build_disk
from virtdriver.errors import (
    InvalidAttachMode,
    InvalidConnectionInfo,
    InvalidRenderOption,
    UnsupportedVolumeType,
    VirtDriverError,
)
from virtdriver.volume import known_types, registry

LOCAL = json.loads((FIXTURES / "connection_info" / "local.json").read_text())
ISCSI = json.loads((FIXTURES / "connection_info" / "iscsi-multiattach.json").read_text())


def with_data(base: dict, **data: object) -> dict:
    info = json.loads(json.dumps(base))
    info["data"].update(data)
    return info


@pytest.mark.parametrize("info, where", [
    ([], "connection_info: is not a JSON object"),
    ({"driver_volume_type": "local"}, "connection_info.data: is missing"),
    (with_data(LOCAL, device_path=None), "connection_info.data.device_path: is missing"),
    (with_data(LOCAL, device_path="dev/loop1"), "is not an absolute path"),
    (with_data(LOCAL, device_path="/dev/loop1\n/dev/sda"), "must be a non-empty single line"),
    (with_data(LOCAL, device_path=7), "connection_info.data.device_path: 7 is not a string"),
    (with_data(LOCAL, qos_specs={"read_iops_sec": "lots"}),
     "connection_info.data.qos_specs.read_iops_sec: 'lots' is not a non-negative integer"),
    (with_data(LOCAL, qos_specs={"read_iops_sec": -1}), "is not a non-negative integer"),
    (with_data(LOCAL, qos_specs={"total_iops_sec": 5, "read_iops_sec": 4}),
     "total_iops_sec: cannot be combined with read_iops_sec"),
    (with_data(LOCAL, qos_specs={"read_iops_sec_max": 5}), "needs read_iops_sec"),
    (with_data(LOCAL, qos_specs={"read_iops_sec": 9, "read_iops_sec_max": 5}), "not above it"),
    (with_data(LOCAL, qos_specs={"read_iops_sec": 9, "read_iops_sec_max_length": 5}),
     "needs read_iops_sec_max"),
    (with_data(LOCAL, qos_specs=[1]), "qos_specs: [1] is not a JSON object"),
    (with_data(LOCAL, logical_block_size=1000), "is not a power of two from 512 to 32768"),
    (with_data(LOCAL, physical_block_size=65536), "physical_block_size"),
    (with_data(LOCAL, discard="yes"), "data.discard: 'yes' is not true or false"),
    (with_data(LOCAL, access_mode="wo"), "data.access_mode"),
    (with_data(LOCAL, volume_id="a b"), "data.volume_id: 'a b' is not a volume id"),
    (dict(LOCAL, serial="x<y"), "connection_info.serial: 'x<y' is not a disk serial"),
    (dict(LOCAL, multiattach="yes"), "connection_info.multiattach: 'yes' is not true"),
    (with_data(dict(ISCSI, driver_volume_type="rbd"), name="no-pool"), "is not 'pool/image'"),
    (with_data(dict(ISCSI, driver_volume_type="rbd"), name="p/i", hosts=["a", "b"], ports=[1]),
     "data.ports: has 1 entries for 2 hosts"),
    (with_data(dict(ISCSI, driver_volume_type="rbd"), name="p/i", hosts=["a"], ports=["x"]),
     "data.ports[0]: 'x' is not a TCP port number"),
])
def test_invalid_connection_info_names_the_key(info: object, where: str) -> None:
    with pytest.raises(InvalidConnectionInfo) as caught:
        build_disk(info)  # type: ignore[arg-type]
    assert where in str(caught.value)


def test_rbd_port_may_be_null_or_integer() -> None:
    info = with_data(dict(ISCSI, driver_volume_type="rbd"), name="p/i", hosts=["a", "b"],
                     ports=[None, 6789])
    source = build_disk(info).source
    assert source is not None
    assert [(h.name, h.port) for h in source.hosts] == [("a", None), ("b", 6789)]


@pytest.mark.parametrize("kwargs, message", [
    ({"bus": "floppy"}, "bus: 'floppy' is not one of"),
    ({"target_dev": "vdb; rm -rf /"}, "is not a disk device name"),
    ({"target_dev": "../sda"}, "is not a disk device name"),
    ({"target_dev": "sdb"}, "does not fit bus 'virtio'"),
    ({"device": "cdrom"}, "device: 'cdrom' is not 'disk' or 'lun'"),
    ({"device": "lun"}, "device 'lun' needs bus 'scsi'"),
    ({"scsi_unit": 2}, "scsi_unit is only meaningful with bus 'scsi'"),
    ({"bus": "scsi", "target_dev": "sdb", "scsi_unit": -1}, "is not a unit number"),
    ({"luks_secret_uuid": "not-a-uuid"}, "luks_secret_uuid"),
])
def test_invalid_render_options(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidRenderOption, match=message):
        build_disk(LOCAL, **kwargs)


def test_lun_needs_a_block_or_iscsi_volume() -> None:
    nfs = json.loads((FIXTURES / "connection_info" / "nfs.json").read_text())
    with pytest.raises(InvalidRenderOption, match="needs a block or iSCSI volume"):
        build_disk(nfs, device="lun", bus="scsi", target_dev="sdb", mount_base="/mnt")


def test_lun_on_a_host_block_device_gets_managed_reservations() -> None:
    """PERSISTENT RESERVE OUT needs CAP_SYS_RAWIO: libvirt's managed qemu-pr-helper sends it."""
    disk = build_disk(LOCAL, device="lun", bus="scsi", target_dev="sdb")
    assert disk.source.reservations is not None
    assert disk.source.reservations.managed == "yes" and disk.source.reservations.source is None
    assert build_disk(LOCAL, bus="scsi", target_dev="sdb").source.reservations is None


def test_lun_on_native_iscsi_has_no_reservations_element() -> None:
    """QEMU's own initiator (libiscsi) carries the guest's reservations: no helper."""
    iscsi = json.loads((FIXTURES / "connection_info" / "iscsi-multiattach.json").read_text())
    disk = build_disk(iscsi, device="lun", bus="scsi", target_dev="sdb", native_iscsi=True)
    assert disk.type == "network" and disk.source.reservations is None
    assert "reservations" not in disk.to_xml()


def test_attach_mode_must_be_ro_or_rw() -> None:
    with pytest.raises(InvalidAttachMode):
        build_disk(LOCAL, attach_mode="r")


def test_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(UnsupportedVolumeType) as caught:
        build_disk(dict(LOCAL, driver_volume_type="floppy-net"))
    assert "iscsi" in str(caught.value) and "rbd" in str(caught.value)
    assert caught.value.known == known_types()


def test_no_alias_without_an_id() -> None:
    info = {"driver_volume_type": "local", "data": {"device_path": "/dev/loop3"}}
    disk = build_disk(info)
    assert disk.alias is None and disk.serial is None
    assert "ua-None" not in disk.to_xml()


def test_serial_and_block_sizes_are_omitted_for_lun() -> None:
    disk = build_disk(with_data(LOCAL, logical_block_size=4096), device="lun", bus="scsi",
                      target_dev="sdb")
    assert disk.serial is None and disk.blockio is None


def test_unknown_qos_key_is_ignored_with_a_warning(caplog) -> None:
    disk = build_disk(with_data(LOCAL, qos_specs={"read_iops_sec": 5, "consumer": "front-end"}))
    assert disk.iotune is not None and disk.iotune.read_iops_sec == 5
    assert "unknown QoS key 'consumer'" in caplog.text


# ---- property-based: every input renders schema-valid XML or raises one of our errors ---------

TEXT = st.one_of(st.text(max_size=40), st.sampled_from(
    ["/dev/loop1", "p/i", "192.0.2.1:3260", "iqn.2010-10.org.x:v", "ro", "rw", "CHAP", "raw",
     "qcow2", "192.0.2.1:/export", "a&b<c>'\"", "x\ny", "\x00", "/dev/../etc", "9" * 400]))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2, 70000), TEXT)
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6)
DATA_KEYS = ["device_path", "volume_id", "access_mode", "qos_specs", "discard",
             "logical_block_size", "physical_block_size", "target_iqn", "target_portal",
             "target_lun", "auth_method", "auth_username", "auth_password", "name", "hosts",
             "ports", "auth_enabled", "secret_uuid", "secret_type", "export", "format", "host",
             "port", "socket", "encrypted"]
QOS = st.dictionaries(st.sampled_from(sorted(__import__("virtdriver.render").render.QOS_KEYS)
                                      + ["bogus"]),
                      st.one_of(st.integers(-1, 10**7), TEXT), max_size=4)
DATA = st.fixed_dictionaries({}, optional={
    **{key: VALUE for key in DATA_KEYS}, "qos_specs": QOS,
    "device_path": st.sampled_from(["/dev/loop1", "/dev/sdb", "x"]),
    "name": st.sampled_from(["volumes/v1", "v1", "a/b/c"])})
CONNECTION_INFO = st.fixed_dictionaries({
    "driver_volume_type": st.one_of(st.sampled_from(sorted(known_types())), TEXT),
    "data": st.one_of(DATA, VALUE)}, optional={"serial": VALUE, "multiattach": VALUE})
OPTIONS = st.fixed_dictionaries({}, optional={
    "attach_mode": st.sampled_from(["ro", "rw", "RW", ""]),
    "bus": st.sampled_from(["virtio", "scsi", "sata", "ide", "usb", "xen"]),
    "target_dev": st.sampled_from(["vdb", "sdc", "hdb", "sdz", "vd", "xyz"]),
    "device": st.sampled_from(["disk", "lun", "cdrom"]),
    "scsi_unit": st.one_of(st.none(), st.integers(-1, 20000)),
    "luks_secret_uuid": st.sampled_from([None, "0b4e3c52-7b3f-4c2c-9e6b-3f6a1d2e4c5f", "x"]),
    "mount_base": st.sampled_from([None, "/mnt/vols", "rel"]),
    "label_policy": st.sampled_from(["auto", "explicit", "none"]),
    "shared_image_label": st.sampled_from(["system_u:object_r:svirt_image_t:s0"]),
    "native_iscsi": st.booleans(), "native_glusterfs": st.booleans()})


@settings(max_examples=int(os.environ.get("VIRTDRIVER_FUZZ_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(info=CONNECTION_INFO, options=OPTIONS)
def test_any_input_renders_valid_xml_or_raises_our_error(info: dict, options: dict,
                                                         schema_valid) -> None:
    try:
        xml = build_disk(info, **options).to_xml()
    except VirtDriverError:
        return
    schema_valid(xml)


# ---- plugins through the entry-point group -----------------------------------------------------

PLUGIN = '''
from virtdriver.config import Source
from virtdriver.volume import VolumeDriver, VolumeSource


class TapeVolumeDriver(VolumeDriver):
    volume_type = "tape"

    def source(self, data, options):
        return VolumeSource("file", Source(file="/srv/tape/" + data["reel"]), format="raw")
'''


def install_plugin(site: Path) -> None:
    """A throwaway installed distribution: a module plus its dist-info with an entry point."""
    (site / "tape_plugin.py").write_text(PLUGIN)
    info = site / "tape_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tape-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[virtdriver.volume_drivers]\ntape = tape_plugin:TapeVolumeDriver\n")
    (info / "RECORD").write_text("")


def test_third_party_driver_renders_through_its_entry_point(tmp_path, monkeypatch) -> None:
    install_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.refresh()
    try:
        assert "tape" in known_types()
        disk = build_disk({"driver_volume_type": "tape", "serial": "reel-1",
                           "data": {"reel": "r1"}})
        assert disk.source is not None and disk.source.file == "/srv/tape/r1"
        assert disk.alias is not None and disk.alias.name == "ua-reel-1"
    finally:
        monkeypatch.undo()
        registry.refresh()
    assert "tape" not in known_types()


def test_third_party_driver_through_the_cli(tmp_path) -> None:
    install_plugin(tmp_path)
    info = tmp_path / "tape.json"
    info.write_text(json.dumps({"driver_volume_type": "tape", "multiattach": True,
                                "data": {"reel": "r2"}}))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "virtdriver", "render", str(info),
                           "--attach-mode", "ro"], capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert textwrap.dedent("""\
        <disk type='file' device='disk'>
          <driver name='qemu' type='raw' cache='none'/>
          <source file='/srv/tape/r2'/>""") in done.stdout
    assert "<shareable/>" in done.stdout and "<readonly/>" in done.stdout


# ---- what libvirt 9 or QEMU 7 refuse is refused first, naming the key ---------------------------
# (tests/host/test_render_oracle.py checks each rule against the real libvirt and QEMU)

RBD = json.loads((FIXTURES / "connection_info" / "rbd.json").read_text())
NFS = json.loads((FIXTURES / "connection_info" / "nfs.json").read_text())
NBD = {"driver_volume_type": "nbd", "data": {"host": "192.0.2.5", "port": 10809}}
SCSI = {"bus": "scsi", "target_dev": "sdb"}
UUID = "0b4e3c52-7b3f-4c2c-9e6b-3f6a1d2e4c5f"
BURST = {"read_iops_sec": 10, "read_iops_sec_max": 10**6}


@pytest.mark.parametrize("info, kwargs, message", [
    (RBD, dict(SCSI, device="lun"), "device 'lun' is not possible with protocol 'rbd'"),
    (NBD, dict(SCSI, device="lun"), "device 'lun' is not possible with protocol 'nbd'"),
    (LOCAL, dict(SCSI, device="lun", luks_secret_uuid=UUID), "device 'lun' cannot be encrypted"),
    (with_data(LOCAL, encrypted=True), dict(SCSI, device="lun"), "cannot be encrypted"),
    ({"driver_volume_type": "glusterfs", "data": {"export": "192.0.2.5:/vol", "name": "v1"}},
     dict(SCSI, device="lun", native_glusterfs=True),
     "device 'lun' is not possible with protocol 'gluster'"),
    (LOCAL, {"bus": "ide", "target_dev": "hdb", "attach_mode": "ro"}, "attach_mode 'ro'"),
    (with_data(LOCAL, access_mode="ro"), {"bus": "sata", "target_dev": "sdb"}, "read-only"),
    (with_data(LOCAL, logical_block_size=4096, physical_block_size=4096),
     {"bus": "ide", "target_dev": "hdb"}, "logical_block_size: 4096 is not possible on bus"),
    (with_data(LOCAL, logical_block_size=4096, physical_block_size=512), {},
     "logical_block_size: 4096 is larger than the physical block size"),
    (with_data(LOCAL, logical_block_size=4096), {}, "larger than the physical block size"),
    (with_data(LOCAL, qos_specs={"read_iops_sec": 10**15 + 1}), {},
     "read_iops_sec: 1000000000000001 is above QEMU's limit"),
    (with_data(LOCAL, qos_specs={"total_bytes_sec": 1, "total_bytes_sec_max": 10**15 + 1}), {},
     "total_bytes_sec_max: 1000000000000001 is above"),
    (with_data(LOCAL, qos_specs={"read_iops_sec": 2**64}), {}, "is not a non-negative integer"),
    (with_data(LOCAL, qos_specs={"read_iops_sec": "9" * 5000}), {}, "read_iops_sec"),
    (with_data(LOCAL, qos_specs=dict(BURST, read_iops_sec_max_length=10**9 + 1)), {},
     "read_iops_sec_max_length: 1000000001 times read_iops_sec_max"),
    (with_data(LOCAL, qos_specs={"read_bytes_sec": 5, "size_iops_sec": 4096}), {},
     "size_iops_sec: needs an iops limit"),
    # libvirt holds size_iops_sec to QEMU's limit too ("block I/O throttle limit must be no more
    # than 1000000000000000 using QEMU", libvirt 9.0 at hot-plug), #45
    (with_data(LOCAL, qos_specs={"read_iops_sec": 5, "size_iops_sec": 10**15 + 1}), {},
     "size_iops_sec: 1000000000000001 is above QEMU's limit"),
    # formats libvirt's schema does not name (#45): QEMU's parallels is libvirt's ploop
    (with_data(NFS, format="vhdx"), {"mount_base": "/mnt/v"}, "'vhdx' is not a disk format"),
    (with_data(NFS, format="parallels"), {"mount_base": "/mnt/v"}, "libvirt calls it 'ploop'"),
    (with_data(LOCAL, qos_specs={"total_iops_sec_max": 5, "size_iops_sec": 4096}), {},
     "total_iops_sec_max: needs total_iops_sec"),
    (with_data(RBD, secret_uuid="a5d0dd9457c4-ae55-ffe0-7e3732a24455"), {}, "secret_uuid"),
    (with_data(RBD, auth_enabled="false"), {}, "auth_enabled: 'false' is not true or false"),
    (with_data(RBD, hosts=[], ports=[]), {}, "data.hosts: [] is not a non-empty list"),
    (with_data(RBD, hosts="192.0.2.10", ports=[]), {}, "data.hosts"),
    (with_data(LOCAL, encrypted="yes"), {}, "encrypted: 'yes' is not true or false"),
    (with_data(LOCAL, encrypted=1), {}, "encrypted: 1 is not true or false"),
    (with_data(LOCAL, discard="false"), {}, "discard: 'false' is not true or false"),
    (LOCAL, {"mount_base": "/mnt/\x1b[2J"}, "mount_base"),
    (LOCAL, {"initiator_iqn": "iqn.x\n"}, "initiator_iqn"),
    (LOCAL, {"native_iscsi": "false"}, "native_iscsi: 'false' is not true or false"),
    (LOCAL, {"shared_image_label": "system_u:object_r:svirt_image_t:s0"},
     "only used with label_policy 'explicit'"),
])
def test_what_libvirt_or_qemu_refuse_is_refused_first(info: dict, kwargs: dict,
                                                      message: str) -> None:
    with pytest.raises(VirtDriverError) as caught:
        build_disk(info, **kwargs)
    assert message in str(caught.value)


@pytest.mark.parametrize("info, kwargs", [
    (RBD, {}),
    (with_data(RBD, secret_uuid="a5d0dd9457c4ae55ffe07e3732a24455"), {}),
    (with_data(LOCAL, qos_specs={"read_iops_sec": 10**15, "read_iops_sec_max": 10**15,
                                 "read_iops_sec_max_length": 1}), {}),
    (with_data(LOCAL, qos_specs=dict(BURST, read_iops_sec_max_length=10**9)), {}),
    (with_data(LOCAL, qos_specs={"read_iops_sec": "20", "size_iops_sec": "4096"}), {}),
    (with_data(LOCAL, qos_specs={"read_iops_sec": 5, "size_iops_sec": 10**15}), {}),
    (with_data(NFS, format="ploop"), {"mount_base": "/mnt/v"}),
    (with_data(LOCAL, logical_block_size=512, physical_block_size=4096), {"bus": "ide",
                                                                          "target_dev": "hdb"}),
    (with_data(LOCAL, physical_block_size=4096), {}),
    (LOCAL, dict(SCSI, device="lun", attach_mode="ro")),
    (LOCAL, {"bus": "usb", "target_dev": "sdb", "attach_mode": "ro"}),
])
def test_the_limits_themselves_are_accepted(info: dict, kwargs: dict, schema_valid) -> None:
    schema_valid(build_disk(info, **kwargs).to_xml())


@pytest.mark.parametrize("bus, dev, kept", [("scsi", "sdb", 36), ("usb", "sdb", 36),
                                             ("virtio", "vdb", 57)])
def test_a_serial_is_what_the_bus_sends_the_guest(bus: str, dev: str, kept: int) -> None:
    vid = "volume-" + "0123456789" * 5
    info = {"driver_volume_type": "local", "serial": vid,
            "data": {"device_path": "/dev/loop0", "volume_id": vid}}
    disk = build_disk(info, bus=bus, target_dev=dev)
    assert disk.serial == vid[:kept] and disk.alias is not None
    assert disk.alias.name == f"ua-{vid}"  # the volume is still found by its whole id
