"""build_disk against the real thing: libvirt's schema, defineXML, and QEMU at hot-plug time.

Every generated input, built near the limits libvirt 9 and QEMU 7 document (integers at
unsignedLong and at QEMU's 10^15 throttle ceiling, burst rate x length, block sizes per bus,
``device='lun'`` per protocol and with encryption, read-only per bus, UUID spellings, booleans of
every JSON type), either renders a disk that libvirt's RelaxNG schema accepts *and* that
``defineXML`` accepts on ``qemu:///system``, or is refused with a one-line typed error naming the
key. A smaller sample is really hot-plugged into a running guest, for what only QEMU checks
(block sizes; throttles, whose refusal libvirt 9.0 reports as a successful hot-plug of an
unthrottled disk, so the oracle compares QEMU's query-block with the <iotune>). ide and sata,
which cannot be hot-plugged, are checked by starting a guest with the disk.

Budget: ``VIRTDRIVER_FUZZ_EXAMPLES`` (default 300, as in test_fuzz) scales the samples; the default
runs 120 generated defines and 2 x 15 generated hot-plugs (about 40 s with the guests).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from testhosts.guests import kvm_available
from tests.libvirt_oracle import HotPlugOracle, define_refusal, start_refusal
from virtdriver import build_disk
from virtdriver.errors import VirtDriverError
from virtdriver.policy import THROTTLE_MAX
from virtdriver.render import QOS_KEYS

pytestmark = pytest.mark.hypervisor

EXAMPLES = int(os.environ.get("VIRTDRIVER_FUZZ_EXAMPLES", "300"))


def oracle_settings(share: float, floor: int) -> settings:
    return settings(max_examples=max(floor, int(EXAMPLES * share)), deadline=None,
                    database=None, suppress_health_check=list(HealthCheck))


# Words a refusal must contain one of: the key or option it is about.
KEYS = ("connection_info", "attach_mode", "bus", "device", "target_dev", "scsi_unit",
        "luks_secret_uuid", "mount_base", "label_policy", "shared_image_label", "native_",
        "multiattach")


def assert_one_line_naming_a_key(exc: VirtDriverError) -> None:
    message = str(exc)
    assert message and "\n" not in message, message
    assert any(key in message for key in KEYS), message


# ---- generated inputs near the documented limits ------------------------------------------------

def _near(*points: int) -> st.SearchStrategy[int]:
    return st.one_of(*(st.integers(max(0, p - 2), p + 2) for p in points))


NUMBER = st.one_of(_near(0, 1, 1000, THROTTLE_MAX, 2**63, 2**64 - 1), st.integers(1, 10**9))
QOS_VALUE = st.one_of(NUMBER, NUMBER.map(str), st.sampled_from([-1, True, "1e3", "0x10", "١٢"]))
QOS = st.dictionaries(st.sampled_from(sorted(QOS_KEYS)), QOS_VALUE, max_size=4)
# A burst with its base rate, so more of them get past the simple rules to the ceilings.
BURST = st.builds(
    lambda kind, avg, peak, length: {f"{kind}_sec": avg, f"{kind}_sec_max": avg + peak,
                                     f"{kind}_sec_max_length": length},
    st.sampled_from(["total_bytes", "read_iops", "write_bytes", "total_iops"]),
    st.integers(1, 10**6), _near(0, 10**9, THROTTLE_MAX), _near(1, 10**6, 10**9, THROTTLE_MAX))

# Mostly usable values, so that most cases render and reach libvirt; one odd value at a time.
BLOCK = st.one_of(st.none(), st.none(), st.none(),
                  st.sampled_from([512, 1024, 4096, 32768, "4096", 65536, 0]))
FLAG_VALUE = st.one_of(st.none(), st.none(), st.booleans(), st.booleans(),
                       st.sampled_from(["false", "true", 0, 1, "", []]))
GOOD_UUID = "0b4e3c52-7b3f-4c2c-9e6b-3f6a1d2e4c5f"
UUIDS = st.sampled_from([GOOD_UUID, GOOD_UUID.replace("-", ""), GOOD_UUID.replace("-", "", 1),
                         GOOD_UUID.upper(), GOOD_UUID[:-1], "not-a-uuid"])

VOLUMES = {
    "block": {"driver_volume_type": "local", "data": {"device_path": "/dev/loop7"}},
    "file": {"driver_volume_type": "gpfs", "data": {"device_path": "/srv/v.raw"}},
    "qcow2-file": {"driver_volume_type": "nfs",
                   "data": {"device_path": "/mnt/v/vol", "format": "qcow2"}},
    "rbd": {"driver_volume_type": "rbd",
            "data": {"name": "volumes/v1", "hosts": ["192.0.2.10"], "ports": [6789]}},
    "nbd": {"driver_volume_type": "nbd", "data": {"host": "192.0.2.5", "port": 10809}},
    "iscsi": {"driver_volume_type": "iscsi",
              "data": {"target_iqn": "iqn.2010-10.org.x:v1", "target_portal": "192.0.2.5:3260",
                       "target_lun": 1, "device_path": "/dev/sdx"}},
    "gluster": {"driver_volume_type": "glusterfs",
                "data": {"export": "192.0.2.5:/vol", "name": "volume-1"}},
}
TARGETS = {"virtio": "vdb", "scsi": "sdb", "sata": "sdb", "ide": "hdb", "usb": "sdb"}


VALID_QOS = st.one_of(st.just({}), st.builds(lambda k, v: {k: v}, st.sampled_from(
    ["read_iops_sec", "total_bytes_sec", "write_iops_sec"]), st.integers(1, THROTTLE_MAX)))
FOCUS = ["nothing", "block", "qos", "flags", "hosts", "uuid", "device", "bus", "mode"]


@st.composite
def render_case(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A usable volume and options with odd values in one chosen place, so that about half
    the cases render and reach libvirt, and the rest probe one rule each."""
    focus = draw(st.sampled_from(FOCUS))

    def pick(place: str, odd: st.SearchStrategy[Any], usual: st.SearchStrategy[Any]) -> Any:
        return draw(odd if focus == place else usual)

    kind = draw(st.sampled_from(sorted(VOLUMES)))
    base = VOLUMES[kind]
    data = dict(base["data"], volume_id=f"oracle-{draw(st.integers(0, 9999))}")
    for key in ("logical_block_size", "physical_block_size"):
        value = pick("block", BLOCK, st.sampled_from([None, None, 512, 4096]))
        if value is not None:
            data[key] = value
    logical, physical = data.get("logical_block_size"), data.get("physical_block_size")
    if focus != "block" and logical is not None and logical > (physical or 512):
        data["physical_block_size"] = logical
    qos = pick("qos", st.one_of(QOS, BURST), VALID_QOS)
    if qos:
        data["qos_specs"] = qos
    for key in ("encrypted", "discard"):
        value = pick("flags", FLAG_VALUE, st.sampled_from([None, False, True]))
        if value is not None:
            data[key] = value
    if kind == "rbd":
        data["auth_enabled"] = pick("flags", FLAG_VALUE, st.booleans())
        data["auth_username"] = "cinder"
        data["secret_uuid"] = pick("uuid", UUIDS, st.just(GOOD_UUID))
        data["hosts"] = pick("hosts", st.sampled_from([[], "192.0.2.10", None, {}]),
                             st.just(["192.0.2.10"]))
        if not isinstance(data["hosts"], list) or len(data["hosts"]) != 1:
            data.pop("ports")
    info = {"driver_volume_type": base["driver_volume_type"], "data": data,
            "multiattach": draw(st.booleans())}
    bus = pick("bus", st.sampled_from(["sata", "ide"]), st.sampled_from(["virtio", "scsi", "usb"]))
    if bus in ("sata", "ide") and "logical_block_size" in data:
        data["logical_block_size"] = pick("block", BLOCK, st.just(512))
    options: dict[str, Any] = {
        "bus": bus, "target_dev": TARGETS[bus],
        "device": "lun" if focus == "device" and bus == "scsi" else "disk",
        "attach_mode": draw(st.sampled_from(["ro", "rw"])),
        "native_iscsi": draw(st.booleans()), "native_glusterfs": draw(st.booleans()),
        "mount_base": "/mnt/vols",
    }
    if focus == "device":
        options.update(bus="scsi", target_dev="sdb", device="lun")
    if draw(st.integers(0, 3)) == 0:
        options["luks_secret_uuid"] = pick("uuid", UUIDS, st.just(GOOD_UUID))
    return info, options


def _render(info: dict[str, Any], options: dict[str, Any]) -> str | None:
    try:
        xml = build_disk(info, **options).to_xml()
    except VirtDriverError as exc:
        assert_one_line_naming_a_key(exc)
        event(f"refused: {str(exc).split(':')[0][:60]}")
        return None
    event("rendered")
    return xml


def _accepted_flags_are_booleans(info: dict[str, Any]) -> None:
    for key in ("encrypted", "discard", "auth_enabled"):
        assert info["data"].get(key) in (None, True, False), (key, info["data"][key])
    hosts = info["data"].get("hosts")
    assert hosts is None or (isinstance(hosts, list) and hosts), hosts


@oracle_settings(0.4, 40)
@given(case=render_case())
def test_every_rendered_disk_is_accepted_by_libvirt(case, system_conn, schema_valid) -> None:
    info, options = case
    xml = _render(info, options)
    if xml is None:
        return
    schema_valid(xml)
    _accepted_flags_are_booleans(info)
    assert define_refusal(system_conn, xml) is None, xml


# What the rules above rest on: libvirt 9 itself refuses these at define time (if one is accepted
# one day, the matching rule in virtdriver.policy can be relaxed).
DISK = ("<disk type='{type}' device='{device}'><driver name='qemu' type='{fmt}'/>{source}"
        "<target dev='{dev}' bus='{bus}'/>{extra}</disk>")
FILE, BLOCKDEV = "<source file='/srv/v.raw'/>", "<source dev='/dev/loop7'/>"
RBD = "<source protocol='rbd' name='p/i'><host name='192.0.2.10'/></source>"
NBD = "<source protocol='nbd'><host name='192.0.2.5' port='10809'/></source>"
LUKS = (f"<encryption format='luks'><secret type='passphrase' uuid='{GOOD_UUID}'/>"
        "</encryption>")


def _disk(type: str = "file", device: str = "disk", fmt: str = "raw", source: str = FILE,
          dev: str = "vdb", bus: str = "virtio", extra: str = "") -> str:
    return DISK.format(type=type, device=device, fmt=fmt, source=source, dev=dev, bus=bus,
                       extra=extra)


SCHEMA = "failed to validate against schema"


@pytest.mark.parametrize("xml, why", [
    (_disk(extra=f"<iotune><read_iops_sec>{THROTTLE_MAX + 1}</read_iops_sec></iotune>"),
     "throttle limit must be no more than 1000000000000000"),
    (_disk(extra=f"<iotune><read_bytes_sec>{2**64}</read_bytes_sec></iotune>"), SCHEMA),
    (_disk(dev="hdb", bus="ide", extra="<readonly/>"), "readonly ide disks are not supported"),
    (_disk(dev="sdb", bus="sata", extra="<readonly/>"), "readonly sata disks are not supported"),
    (_disk("network", "lun", source=RBD, dev="sdb", bus="scsi"), "protocol='rbd'"),
    (_disk("network", "lun", source=NBD, dev="sdb", bus="scsi"), "protocol='nbd'"),
    (_disk("block", "lun", source=BLOCKDEV, dev="sdb", bus="scsi", extra=LUKS),
     "doesn't support encryption"),
    (_disk("block", "lun", fmt="qcow2", source=BLOCKDEV, dev="sdb", bus="scsi"),
     "must use 'raw' format"),
    (_disk("network", source="<source protocol='rbd' name='p/i'><host name='h'/><auth "
           "username='a'><secret type='ceph' uuid='0b4e3c527b3f-4c2c-9e6b-3f6a1d2e4c5f'/>"
           "</auth></source>"), SCHEMA),
])
def test_libvirt_refuses_what_the_policy_refuses(xml: str, why: str, system_conn) -> None:
    refusal = define_refusal(system_conn, xml)
    assert refusal is not None and why in refusal, refusal


# ---- what only QEMU checks: a real hot-plug into a running guest --------------------------------

@st.composite
def hotplug_case(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly usable block sizes and throttles (so most cases plug), sometimes one odd value."""
    data: dict[str, Any] = {}
    logical, physical = draw(st.one_of(
        st.sampled_from([(None, None), (512, 512), (512, 4096), (4096, 4096), (None, 4096)]),
        st.tuples(st.sampled_from([None, 512, 4096, 32768]),
                  st.sampled_from([None, 512, 4096, 32768]))))
    for key, value in (("logical_block_size", logical), ("physical_block_size", physical)):
        if value is not None:
            data[key] = value
    qos = draw(st.one_of(VALID_QOS, VALID_QOS, BURST, QOS))
    if draw(st.integers(0, 3)) == 0:
        qos = dict(qos, size_iops_sec=draw(st.sampled_from([512, 4096, THROTTLE_MAX])))
    if qos:
        data["qos_specs"] = qos
    return data


@pytest.mark.parametrize("bus", ["scsi", "usb"])
def test_every_rendered_disk_hot_plugs(bus: str, guests, system_conn, tmp_path) -> None:
    dom = guests.start("hotplug")
    image = tmp_path / "hp.raw"
    image.write_bytes(b"")
    os.truncate(image, 1 << 20)
    oracle = HotPlugOracle(system_conn, dom)
    counter = iter(range(10**6))
    plugged: list[str] = []

    @settings(max_examples=max(12, EXAMPLES // 20), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=hotplug_case())
    # Three that must plug, whatever the random sample draws (it may draw mostly refusals).
    @example(data={})
    @example(data={"logical_block_size": 512, "physical_block_size": 4096})
    @example(data={"qos_specs": {"total_iops_sec": 100, "total_bytes_sec": 1 << 20}})
    def check(data: dict[str, Any]) -> None:
        info = {"driver_volume_type": "gpfs", "serial": f"hp-{next(counter)}",
                "data": dict(data, device_path=str(image))}
        xml = _render(info, {"bus": bus, "target_dev": "sdb"})
        if xml is not None:
            assert oracle.refusal(xml) is None, xml
            plugged.append(xml)

    try:
        check()
    finally:
        oracle.close()
    assert len(plugged) >= 3, "the sample must really hot-plug disks, not only refuse them"


ALIAS = "<alias name='ua-qemu-fact'/>"
# libvirt 9.0 reports a hot-plug whose throttle QEMU refused as a success, the disk then not
# throttled at all: the hot-plug oracle compares what QEMU applies with the <iotune>.
QEMU_REFUSES = {
    "logical block size above physical":
        "<blockio logical_block_size='4096' physical_block_size='512'/>",
    "logical block size above the default physical one": "<blockio logical_block_size='4096'/>",
    "burst rate x length above 10^15":
        "<iotune><read_iops_sec>10</read_iops_sec><read_iops_sec_max>1000000</read_iops_sec_max>"
        "<read_iops_sec_max_length>1000000000000</read_iops_sec_max_length></iotune>",
    "size_iops_sec without an iops rate":
        "<iotune><read_bytes_sec>10000</read_bytes_sec><size_iops_sec>4096</size_iops_sec>"
        "</iotune>",
}
def _file_disk(image: Any, extra: str) -> str:
    return _disk(source=f"<source file='{image}'/>", dev="sdb", bus="scsi", extra=extra + ALIAS)


def test_qemu_refuses_at_hot_plug_what_the_policy_refuses(guests, system_conn,
                                                           tmp_path) -> None:
    """The facts behind the attach-time rules: libvirt defines these, QEMU refuses the device."""
    dom = guests.start("qemufacts")
    image = tmp_path / "f.raw"
    image.write_bytes(b"")
    os.truncate(image, 1 << 20)
    oracle = HotPlugOracle(system_conn, dom)
    try:
        for what, extra in QEMU_REFUSES.items():
            assert define_refusal(system_conn, _file_disk(image, extra)) is None, what
            assert oracle.refusal(_file_disk(image, extra)) is not None, what
    finally:
        oracle.close()


def test_a_bus_attach_cannot_hot_plug_is_refused_by_qemu_too(system_conn, tmp_path) -> None:
    """The fact behind ``check_hotplug_bus``: with a guest that has both an IDE and a SATA
    controller, QEMU refuses to hot-plug a disk on either bus."""
    import secrets

    from testhosts.guests import guest_xml

    (tmp_path / "x.raw").write_bytes(b"\0" * 4096)
    name = f"vdtest-nohotplug-{secrets.token_hex(4)}"
    xml = guest_xml(name, kvm=kvm_available()).replace(
        "</devices>", "<controller type='sata' index='0'/></devices>")
    dom = system_conn.createXML(xml, 0)
    oracle = HotPlugOracle(system_conn, dom)
    try:
        for bus, dev in (("ide", "hdb"), ("sata", "sdb")):
            disk = _disk(source=f"<source file='{tmp_path}/x.raw'/>", dev=dev, bus=bus,
                         extra="<alias name='ua-nohotplug'/>")
            refusal = oracle.refusal(disk)
            assert refusal is not None and "does not support hotplugging" in refusal, refusal
    finally:
        oracle.close()
        dom.destroy()


def test_block_sizes_qemu_refuses_at_start_are_refused(system_conn, tmp_path) -> None:
    """QEMU refuses logical > physical, and a logical size other than 512 on ide and sata (its
    ide-hd device), when the device is created: a guest that starts with such a disk shows it
    (ide and sata cannot be hot-plugged), and render refuses each."""
    image = tmp_path / "b.raw"
    image.write_bytes(b"")
    os.truncate(image, 1 << 20)
    for bus, dev, logical, physical in (("ide", "hdb", 4096, 4096), ("sata", "sdb", 4096, 4096),
                                        ("virtio", "vdb", 4096, 512)):
        disk = _disk(source=f"<source file='{image}'/>", dev=dev, bus=bus,
                     extra=f"<blockio logical_block_size='{logical}' "
                           f"physical_block_size='{physical}'/>")
        refusal = start_refusal(system_conn, disk + "<controller type='sata' index='0'/>",
                                kvm=kvm_available())
        assert refusal is not None and "block_size" in refusal, refusal
        info = {"driver_volume_type": "gpfs",
                "data": {"device_path": str(image), "logical_block_size": logical,
                         "physical_block_size": physical}}
        with pytest.raises(VirtDriverError, match="logical_block_size"):
            build_disk(info, bus=bus, target_dev=dev)
