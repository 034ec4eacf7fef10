"""Fuzzing the input surfaces: build_disk, ``virtdriver render`` and the lenient domain reader.

Every ``connection_info`` document and every render option, however hostile (XML specials,
newlines, NUL, lone surrogates, very long values, deeply nested JSON, wrong JSON types), either
renders a ``<disk>`` that libvirt's RelaxNG schema accepts or raises a
:class:`~virtdriver.errors.VirtDriverError` subclass. The command line answers the same inputs with
exit 0 and the XML, or exit 2 and exactly one line on stderr.

Example budget: ``VIRTDRIVER_FUZZ_EXAMPLES`` (default 300) is the size of the main render sample;
the other samples are fractions of it. The CI default runs about 450 examples in a few seconds;
``VIRTDRIVER_FUZZ_EXAMPLES=10000`` is the long profile (about 15,000 examples in all).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from lxml import etree

from virtdriver import build_disk
from virtdriver.cli import main as cli_main
from virtdriver.config import Disk, DomainDisks
from virtdriver.errors import EXIT_CODES, VirtDriverError
from virtdriver.render import QOS_KEYS
from virtdriver.volume import known_types

EXAMPLES = int(os.environ.get("VIRTDRIVER_FUZZ_EXAMPLES", "300"))


def fuzz_settings(share: float, floor: int) -> settings:
    return settings(max_examples=max(floor, int(EXAMPLES * share)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                    database=None)


# ---- hostile values -----------------------------------------------------------------------------

SPECIALS = ["<", ">", "&", "'", '"', "]]>", "<!--", "&amp;", "&#0;", "\n", "\r\n", "\t", "\x00",
            "\x01", "\x1b[31m", "\x7f", "\ud800", "\udfff", "\ufffe", "\uffff", "\u202e", "\u2028",
            "\x85", "/../", "..", " ", "%s%n", "${jndi:x}", "\\", "*", "\U0001f4a3", "\u00e9",
            "<disk type='file'><source file='/etc/shadow'/></disk>"]

PLAUSIBLE = ["/dev/loop1", "/dev/disk/by-id/x", "/srv/vol.raw", "volumes/volume-1", "pool/img",
             "192.0.2.5:3260", "[2001:db8::5]:3260", "192.0.2.5", "iqn.2010-10.org.openstack:v1",
             "ceph", "CHAP", "None", "ro", "rw", "raw", "qcow2", "192.0.2.5:/export",
             "0b4e3c52-7b3f-4c2c-9e6b-3f6a1d2e4c5f", "nvme0n1", "admin", "10809", "/run/nbd.sock",
             "unix", "tcp", "volume-1", "system_u:object_r:svirt_image_t:s0", "/mnt/vols"]


def _long(n: int) -> str:
    return ("A" * (n - 1)) + "/"


HOSTILE_TEXT: st.SearchStrategy[str] = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),  # includes C0 controls
    st.sampled_from(SPECIALS),
    st.sampled_from(PLAUSIBLE),
    # a plausible value with something hostile inside or at either end, so it gets past the
    # first checks and reaches escaping
    st.builds(lambda a, b, c: a + b + c, st.sampled_from(["", *PLAUSIBLE]),
              st.sampled_from(SPECIALS), st.sampled_from(["", *PLAUSIBLE])),
    st.integers(200, 200_000).map(_long),  # very long values
    st.integers(200, 5000).map(lambda n: "/dev/" + "x" * n),
)


def _nested(depth: int, leaf: Any, kind: str) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


DEEP: st.SearchStrategy[Any] = st.builds(
    _nested, st.one_of(st.integers(2, 60), st.integers(300, 900)),
    st.sampled_from([None, "/dev/loop1", 7]), st.sampled_from(["list", "dict"]))

SCALAR: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.integers(-2, 70000),
    st.floats(allow_nan=True, allow_infinity=True), HOSTILE_TEXT)

ANY_JSON: st.SearchStrategy[Any] = st.one_of(
    st.recursive(SCALAR, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(HOSTILE_TEXT, inner, max_size=3)),
        max_leaves=8),
    DEEP)

DATA_KEYS = ["device_path", "volume_id", "access_mode", "qos_specs", "discard", "encrypted",
             "logical_block_size", "physical_block_size", "target_iqn", "target_portal",
             "target_lun", "target_iqns", "target_portals", "target_luns", "auth_method",
             "auth_username", "auth_password", "name", "hosts", "ports", "auth_enabled",
             "secret_uuid", "secret_type", "export", "format", "host", "port", "socket",
             "options", "keyring", "cluster_name"]


def _value_for(key: str) -> st.SearchStrategy[Any]:
    if key == "qos_specs":
        qos = st.dictionaries(st.one_of(st.sampled_from(sorted(QOS_KEYS)), HOSTILE_TEXT),
                              st.one_of(st.integers(-1, 10**7), st.integers(10**18, 2**80),
                                        SCALAR, DEEP), max_size=5)
        return st.one_of(qos, ANY_JSON)
    if key in ("hosts", "ports", "target_portals", "target_iqns", "target_luns"):
        return st.one_of(st.lists(st.one_of(HOSTILE_TEXT, st.integers(-5, 70000), st.none()),
                                  max_size=4), ANY_JSON)
    return st.one_of(HOSTILE_TEXT, HOSTILE_TEXT, ANY_JSON)


DATA: st.SearchStrategy[Any] = st.one_of(
    st.fixed_dictionaries({}, optional={k: _value_for(k) for k in DATA_KEYS}),
    st.fixed_dictionaries({"device_path": st.sampled_from(["/dev/loop1", "/srv/v.raw"])},
                          optional={k: _value_for(k) for k in DATA_KEYS if k != "device_path"}),
    ANY_JSON)

# Data every volume type renders from: hostile values are swapped into it one key at a time, so
# most of them reach the writer instead of the first check.
FULL_DATA: dict[str, Any] = {
    "volume_id": "v1", "access_mode": "rw", "device_path": "/dev/loop1",
    "target_iqn": "iqn.2010-10.org.x:v1", "target_portal": "192.0.2.5:3260", "target_lun": 1,
    "auth_method": "CHAP", "auth_username": "cinder", "auth_password": "s3cret",
    "name": "volumes/v1", "hosts": ["192.0.2.10"], "ports": [6789], "auth_enabled": True,
    "secret_type": "ceph", "secret_uuid": "a5d0dd94-57c4-ae55-ffe0-7e3732a24455",
    "export": "192.0.2.5:/export", "host": "192.0.2.5", "port": 10809, "discard": True,
    "qos_specs": {"read_iops_sec": 500, "write_bytes_sec": 1 << 20},
    "logical_block_size": 512, "physical_block_size": 4096}


def _mutate(volume_type: str, changes: dict[str, Any], serial: Any,
            multiattach: bool) -> dict[str, Any]:
    data = dict(FULL_DATA)
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key, None)
        else:
            data[key] = value
    info: dict[str, Any] = {"driver_volume_type": volume_type, "data": data,
                            "multiattach": multiattach}
    if serial is not _DROP:
        info["serial"] = serial
    return info


_DROP = object()

MUTATED: st.SearchStrategy[Any] = st.builds(
    _mutate, st.sampled_from(sorted(known_types())),
    st.dictionaries(st.sampled_from(sorted(set(DATA_KEYS) | set(FULL_DATA))),
                    st.one_of(st.just(_DROP), HOSTILE_TEXT, HOSTILE_TEXT, SCALAR, ANY_JSON),
                    max_size=3),
    st.one_of(st.just(_DROP), st.just("v1"), HOSTILE_TEXT), st.booleans())

CONNECTION_INFO: st.SearchStrategy[Any] = st.one_of(
    MUTATED, MUTATED, MUTATED,
    st.fixed_dictionaries(
        {"driver_volume_type": st.one_of(st.sampled_from(sorted(known_types())), HOSTILE_TEXT,
                                         ANY_JSON),
         "data": DATA},
        optional={"serial": st.one_of(HOSTILE_TEXT, ANY_JSON, st.just(str(uuid.uuid4()))),
                  "multiattach": st.one_of(st.booleans(), ANY_JSON),
                  "volume_id": ANY_JSON, "extra": ANY_JSON}),
    ANY_JSON)

GOOD_TARGETS = st.sampled_from([
    {"bus": "virtio", "target_dev": "vdb"}, {"bus": "virtio", "target_dev": "vdaaa"},
    {"bus": "scsi", "target_dev": "sdc", "scsi_unit": 3},
    {"bus": "scsi", "target_dev": "sdzz", "device": "lun", "scsi_unit": 16383},
    {"bus": "sata", "target_dev": "sdb"}, {"bus": "ide", "target_dev": "hdb"},
    {"bus": "usb", "target_dev": "sdd"}])

MILD_OPTIONS = st.fixed_dictionaries({}, optional={
    "attach_mode": st.sampled_from(["ro", "rw"]), "native_iscsi": st.booleans(),
    "native_glusterfs": st.booleans(), "mount_base": st.sampled_from(["/mnt/vols", "/mnt/a b"]),
    "label_policy": st.sampled_from(["auto", "explicit", "none"]),
    "shared_image_label": st.just("system_u:object_r:svirt_image_t:s0"),
    "luks_secret_uuid": st.just(str(uuid.uuid4()))})

HOSTILE_OPTIONS = st.fixed_dictionaries({}, optional={
    "attach_mode": st.one_of(st.sampled_from(["ro", "rw"]), SCALAR),
    "bus": st.one_of(st.sampled_from(["virtio", "scsi", "sata", "ide", "usb"]), SCALAR),
    "target_dev": st.one_of(st.sampled_from(["vdb", "sdc", "hdb", "sdzz", "vdaaa"]), SCALAR),
    "device": st.one_of(st.sampled_from(["disk", "lun"]), SCALAR),
    "scsi_unit": st.one_of(st.none(), st.integers(-1, 20000), SCALAR),
    "luks_secret_uuid": st.one_of(st.none(), st.just(str(uuid.uuid4())), SCALAR),
    "mount_base": st.one_of(st.none(), st.sampled_from(["/mnt/vols", "/mnt/a b"]), HOSTILE_TEXT),
    "label_policy": st.one_of(st.sampled_from(["auto", "explicit", "none"]), SCALAR),
    "shared_image_label": st.one_of(
        st.none(), st.just("system_u:object_r:svirt_image_t:s0"), HOSTILE_TEXT),
    "native_iscsi": st.booleans(), "native_glusterfs": st.booleans(),
    "initiator_iqn": st.one_of(st.none(), st.just("iqn.1994-05.com.redhat:h1"), HOSTILE_TEXT),
})

OPTIONS: st.SearchStrategy[dict[str, Any]] = st.builds(
    lambda *parts: {k: v for part in parts for k, v in part.items()},
    GOOD_TARGETS, MILD_OPTIONS, st.one_of(st.just({}), HOSTILE_OPTIONS))


# ---- 1. build_disk ------------------------------------------------------------------------------

@fuzz_settings(1.0, 50)
@given(info=CONNECTION_INFO, options=OPTIONS)
def test_hostile_input_renders_valid_xml_or_raises_a_typed_error(info: Any, options: dict,
                                                                 schema_valid) -> None:
    try:
        disk = build_disk(info, **options)
        xml = disk.to_xml()
    except VirtDriverError as exc:
        assert str(exc), "a typed error must say what was wrong"
        event(f"refused: {type(exc).__name__}")
        return
    event("rendered")
    schema_valid(xml)
    # What was rendered reads back as the same model (nothing written that cannot be read).
    assert Disk.from_xml(xml) == disk


# Found by the long profile: values libvirt's schema rejects (host names are dnsName or an IP
# address, <auth username> is genericName) that used to be rendered.
HOST = r"is not (a host name|an IPv6 address)"
USER = "is not a user name libvirt accepts"


@pytest.mark.parametrize("volume_type, key, value, message", [
    ("nbd", "host", ",", HOST),
    ("nbd", "host", "a_b", HOST),
    ("nbd", "host", "fe80::1%eth0", HOST),
    ("rbd", "hosts", ["mon,1"], HOST),
    ("iscsi", "target_portal", "bad,host:3260", HOST),
    ("rbd", "auth_username", "{", USER),
    ("rbd", "auth_username", "client.cinder", USER),
    ("iscsi", "auth_username", "a b", USER),
])
def test_values_libvirts_schema_rejects_are_refused(volume_type: str, key: str, value: Any,
                                                    message: str, schema_valid) -> None:
    info = _mutate(volume_type, {key: value}, "v1", False)
    with pytest.raises(VirtDriverError, match=message):
        schema_valid(build_disk(info, native_iscsi=True).to_xml())


@pytest.mark.parametrize("depth", [1, 100, 900, 5000, 50_000])
@pytest.mark.parametrize("where", ["device_path", "qos", "type", "serial", "data", "root"])
def test_nesting_deeper_than_the_interpreter_stack_is_a_typed_error(depth: int,
                                                                    where: str) -> None:
    deep = _nested(depth, "/dev/loop1", "list")
    info: Any = {"driver_volume_type": "local", "data": {"device_path": "/dev/loop1"}}
    if where == "device_path":
        info["data"]["device_path"] = deep
    elif where == "qos":
        info["data"]["qos_specs"] = {"read_iops_sec": deep}
    elif where == "type":
        info["driver_volume_type"] = deep
    elif where == "serial":
        info["serial"] = deep
    elif where == "data":
        info["data"] = deep
    else:
        info = deep
    with pytest.raises(VirtDriverError):
        build_disk(info)


# ---- 2. the command line ------------------------------------------------------------------------

@contextlib.contextmanager
def stdin_text(text: str) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved


def run_cli(argv: list[str], stdin: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with stdin_text(stdin), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(argv)
    return code, out.getvalue(), err.getvalue()


def check_cli_answer(code: int, out: str, err: str, schema_valid) -> None:
    if code == 0:
        assert err == ""
        schema_valid(out)
        return
    # bad input (2) or a refusal by the attach policy (3); never a host failure: render has none
    assert code in (EXIT_CODES["input"], EXIT_CODES["policy"]), (code, err)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith("virtdriver: error: ")
    assert "Traceback" not in err


def _dumps(doc: Any) -> str:
    try:
        return json.dumps(doc)
    except (ValueError, RecursionError):  # NaN is written as NaN; only depth can fail here
        return "[" * 100_000


STDIN: st.SearchStrategy[str] = st.one_of(
    CONNECTION_INFO.map(_dumps),
    st.text(max_size=200),
    st.sampled_from(["", " ", "\ufeff{}", "null", "{", "[" * 100_000, "{\"a\":" * 50_000,
                     '{"data": {}, "driver_volume_type": "local"}\x00', "\ud800", "1e999999",
                     "-" * 10, '{"data": NaN}', "[" * 990 + "]" * 990]),
)

ARGS: st.SearchStrategy[list[str]] = st.lists(st.one_of(
    st.tuples(st.just("--attach-mode"), st.one_of(st.sampled_from(["ro", "rw"]), HOSTILE_TEXT)),
    st.tuples(st.just("--bus"), st.one_of(st.sampled_from(["virtio", "scsi"]), HOSTILE_TEXT)),
    st.tuples(st.just("--target-dev"), st.one_of(st.sampled_from(["vdc", "sdc"]), HOSTILE_TEXT)),
    st.tuples(st.just("--scsi-unit"), st.one_of(st.sampled_from(["3", "-1", "99999"]),
                                                HOSTILE_TEXT)),
    st.tuples(st.just("--luks-secret-uuid"), st.one_of(st.just(str(uuid.uuid4())),
                                                       HOSTILE_TEXT)),
    st.tuples(st.just("--label-policy"), st.sampled_from(["auto", "explicit", "none", "x"])),
    st.tuples(st.just("--shared-image-label"), HOSTILE_TEXT),
    st.tuples(st.just("--mount-base"), HOSTILE_TEXT),
    st.tuples(st.just("--device"), st.sampled_from(["disk", "lun", "cdrom"])),
    st.tuples(st.sampled_from(["--multiattach", "--native-iscsi", "--native-glusterfs"])),
), max_size=4).map(lambda groups: [a for g in groups for a in g])


@fuzz_settings(0.35, 40)
@given(stdin=STDIN, args=ARGS)
def test_cli_render_answers_every_input_with_xml_or_one_error_line(stdin: str, args: list[str],
                                                                   schema_valid) -> None:
    # argv cannot carry NUL (the kernel would cut it); everything else is fair game.
    args = [a.replace("\x00", "") for a in args]
    code, out, err = run_cli(["render", "-", *args], stdin)
    event(f"exit {code}")
    check_cli_answer(code, out, err, schema_valid)


def run_cli_process(stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    # The kernel refuses a single argument over 128 KiB (E2BIG) and cannot carry NUL.
    argv = [a.encode("utf-8", errors="surrogatepass").replace(b"\0", b"")[:100_000]
            for a in args]
    return subprocess.run([sys.executable.encode(), b"-m", b"virtdriver", b"render", b"-",
                           *argv],
                          input=stdin, capture_output=True, check=False, timeout=60)


def check_process_answer(done: subprocess.CompletedProcess[bytes], schema_valid) -> None:
    out = done.stdout.decode("utf-8")
    err = done.stderr.decode("utf-8", errors="replace")
    check_cli_answer(done.returncode, out, err, schema_valid)


@pytest.mark.parametrize("stdin", [
    b"[" * 100_000,  # deeper than the JSON decoder's recursion limit
    b'{"data": ' * 20_000 + b"{}" + b"}" * 20_000,
    b"\xff\xfe{\x00}",  # not UTF-8
    b'{"driver_volume_type": "local", "data": {"device_path": "/dev/x\\u0000y"}}',
    b'{"driver_volume_type": "local", "data": {"device_path": "/dev/x\\ud800"}}',
    b'{"driver_volume_type": "local", "data": {"device_path": "/dev/' + b"y" * 1_000_000 + b'"}}',
    b'{"driver_volume_type": "local", "serial": "a\\nb", "data": {"device_path": "/dev/x"}}',
    b"",
])
def test_cli_render_subprocess_edge_cases(stdin: bytes, schema_valid) -> None:
    check_process_answer(run_cli_process(stdin), schema_valid)


@settings(max_examples=max(8, EXAMPLES // 30), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stdin=STDIN, args=ARGS)
def test_cli_render_subprocess_sample(stdin: str, args: list[str], schema_valid) -> None:
    args = [a.replace("\x00", "") for a in args]
    done = run_cli_process(stdin.encode("utf-8", errors="surrogatepass"), *args)
    check_process_answer(done, schema_valid)


def test_cli_failure_is_usage_not_hypervisor() -> None:
    """Render never talks to libvirt: none of its errors may map to exit 1."""
    code, _, err = run_cli(["render", "-"], json.dumps({"driver_volume_type": "local",
                                                        "data": {"device_path": 7}}))
    assert code == 2 and "device_path" in err


# ---- 3. live domain XML the model does not fully know -------------------------------------------

def canonical(node: etree._Element) -> str:
    """An order-insensitive canonical form of an element: attributes and children sorted,
    whitespace-only text dropped, namespaces kept."""
    attrs = "".join(f" {k}={v!r}" for k, v in sorted(node.attrib.items()))
    text = (node.text or "").strip()
    kids = sorted(canonical(c) for c in node if isinstance(c.tag, str))
    return f"<{node.tag}{attrs}>{text}{''.join(kids)}</{node.tag}>"


def assert_disks_round_trip(domain_xml: str) -> int:
    """Every <disk> of ``domain_xml`` survives DomainDisks → to_xml() without loss."""
    parser = etree.XMLParser(remove_blank_text=True)
    root = etree.fromstring(domain_xml.encode(), parser)
    originals = root.findall("./devices/disk")
    read = DomainDisks.from_xml(domain_xml)
    assert len(read.disks) == len(originals)
    for original, disk in zip(originals, read.disks):
        again = etree.fromstring(disk.to_xml().encode(), parser)
        assert canonical(again) == canonical(original), etree.tostring(original).decode()
        # And once more through the lenient single-disk reader.
        assert canonical(etree.fromstring(
            Disk.from_xml(disk.to_xml(), strict=False).to_xml().encode(), parser)) == \
            canonical(original)
    return len(originals)


UNKNOWN_IN_DISK = [
    "<vendor-extension level='3'><deep a='1'><deeper>text &amp; more</deeper></deep>"
    "</vendor-extension>",
    "<x:meta xmlns:x='http://example.org/x' x:attr='1'><x:child/></x:meta>",
    "<throttlefilters><throttlefilter group='limit0'/></throttlefilters>",
    "<backingStore type='file'><format type='raw'/><source file='/srv/base.raw'/>"
    "<backingStore/></backingStore>",
    "<mirror type='file' job='copy' ready='yes'><source file='/srv/copy.raw'/>"
    "<format type='raw'/></mirror>",
    "<geometry cyls='16383' heads='16' secs='63' trans='lba'/>",
    "<wwn>0x5000c50015ea71ac</wwn>",
    "<vendor>VENDOR</vendor><product>PRODUCT</product>",
    "<transient/>",
]


@pytest.mark.parametrize("extra", UNKNOWN_IN_DISK)
def test_unknown_children_and_attributes_in_a_disk_survive(extra: str) -> None:
    slices = "<slices><slice type='storage' offset='0' size='1'/></slices>"
    domain = f"""<domain type='kvm' id='3' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
      <name>g</name><uuid>0b4e3c52-7b3f-4c2c-9e6b-3f6a1d2e4c5f</uuid>
      <metadata><app:x xmlns:app='http://example.org/app'>1</app:x></metadata>
      <devices>
        <emulator>/usr/bin/qemu-system-x86_64</emulator>
        <disk type='file' device='disk' model='virtio-transitional' future-attr='yes'>
          <driver name='qemu' type='raw' cache='none' queues='4' iothread='1' unknown='1'/>
          <source file='/srv/v.raw' index='2' startupPolicy='optional'>
            <reservations managed='yes'/>{slices}
          </source>
          {extra}
          <target dev='sda' bus='scsi' rotation_rate='1'/>
          <alias name='ua-v1'/>
          <address type='drive' controller='0' bus='0' target='0' unit='0'/>
        </disk>
        <controller type='scsi' index='0' model='virtio-scsi'/>
        <interface type='user'><mac address='52:54:00:00:00:01'/></interface>
        <qemu:commandline/>
      </devices>
    </domain>"""
    assert assert_disks_round_trip(domain) == 1


EXTRA_ELEMENT = st.builds(
    lambda tag, attrs, text: (tag, attrs, text),
    st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True),
    st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
                    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]),
                            max_size=20), max_size=3),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]), max_size=20))


@fuzz_settings(0.15, 25)
@given(extras=st.lists(st.tuples(st.sampled_from(["disk", "driver", "source", "target",
                                                   "alias", "address", "new"]),
                                 EXTRA_ELEMENT), max_size=5))
def test_random_unknown_parts_in_a_disk_survive(extras: list) -> None:
    parser = etree.XMLParser(remove_blank_text=True)
    disk = etree.fromstring(
        b"<disk type='block' device='disk'><driver name='qemu' type='raw' cache='none'/>"
        b"<source dev='/dev/loop1'/><target dev='sda' bus='scsi'/><shareable/>"
        b"<alias name='ua-v1'/><address type='drive' controller='0' bus='0' target='0' "
        b"unit='1'/></disk>", parser)
    for where, (tag, attrs, text) in extras:
        parent = disk if where in ("disk", "new") else disk.find(where)
        assert parent is not None
        if where == "new" or tag in ("driver", "source", "target", "alias", "address",
                                     "shareable", "readonly", "serial"):
            node = etree.SubElement(parent, "x-" + tag, attrs)
            node.text = text or None
        else:
            for name, value in attrs.items():
                parent.set("x_" + name, value)
    domain = ("<domain type='kvm'><name>g</name><devices>"
              + etree.tostring(disk, encoding="unicode") + "</devices></domain>")
    assert assert_disks_round_trip(domain) == 1


# ---- 4. the corpus libvirt itself writes: every disk of every guest on the host -----------------
