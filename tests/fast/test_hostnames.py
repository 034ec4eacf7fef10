"""Host names and addresses, one rule for every protocol that takes a host (issue #25).

A host is an RFC 1123 host name or an IP literal (IPv4; IPv6 bare or in brackets, as portals
and exports write it). Every protocol that names a host -- rendered into ``<host name=...>``
(nbd, rbd, QEMU's iSCSI, QEMU's gluster), logged in to (the kernel's iSCSI and iSER portals) or
mounted from (nfs, glusterfs, smbfs, quobyte) --
accepts exactly those and refuses anything else with ``InvalidConnectionInfo`` naming the key.
The oracles: an RFC 1123 check written independently of the code, Python's ``ipaddress``, and
libvirt's own RelaxNG schema (and, with a hypervisor, libvirt's parser through defineXML).
"""

from __future__ import annotations

import ipaddress
import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from virtdriver import build_disk
from virtdriver.config.schema import validate_disk
from virtdriver.errors import InvalidConnectionInfo
from virtdriver.volume.base import RenderOptions

DATA = "connection_info.data"
SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# name -> (connection_info and build_disk options for a host text, the key a refusal names,
#          whether the host is rendered into <host name=...>)
Case = Callable[[str], tuple[dict[str, Any], dict[str, Any]]]
PROTOCOLS: dict[str, tuple[Case, str, bool]] = {
    "nbd": (lambda h: ({"driver_volume_type": "nbd", "data": {"host": h, "name": "e"}}, {}),
            f"{DATA}.host", True),
    "rbd": (lambda h: ({"driver_volume_type": "rbd",
                        "data": {"name": "pool/img", "hosts": ["192.0.2.9", h]}}, {}),
            f"{DATA}.hosts[1]", True),
    "iscsi (QEMU)": (lambda h: ({"driver_volume_type": "iscsi", "data": {
        "target_iqn": "iqn.2010-10.org.x:v1", "target_lun": 1,
        "target_portal": f"{bracketed(h)}:3260"}}, {"native_iscsi": True}),
        f"{DATA}.target_portal", True),
    "iscsi (kernel)": (lambda h: ({"driver_volume_type": "iscsi", "data": {
        "target_iqn": "iqn.2010-10.org.x:v1", "target_lun": 1, "device_path": "/dev/sdx",
        "target_portal": f"{bracketed(h)}:3260"}}, {}), f"{DATA}.target_portal", False),
    "iscsi multipath": (lambda h: ({"driver_volume_type": "iscsi", "data": {
        "target_iqn": "iqn.2010-10.org.x:v1", "target_lun": 1, "device_path": "/dev/sdx",
        "target_portal": "192.0.2.5:3260",
        "target_portals": ["192.0.2.5:3260", f"{bracketed(h)}:3260"]}}, {}),
        f"{DATA}.target_portals[1]", False),
    "iser": (lambda h: ({"driver_volume_type": "iser", "data": {
        "target_iqn": "iqn.2010-10.org.x:v1", "device_path": "/dev/sdx",
        "target_portal": f"{bracketed(h)}:3260"}}, {}), f"{DATA}.target_portal", False),
    "nvmeof": (lambda h: ({"driver_volume_type": "nvmeof", "data": {
        "device_path": "/dev/nvme0n1", "portals": [["192.0.2.5", 4420, "tcp"], [h, 4420, "tcp"]]}},
        {}), f"{DATA}.portals[1]", False),
    "glusterfs (QEMU)": (lambda h: ({"driver_volume_type": "glusterfs", "data": {
        "export": f"{bracketed(h)}:/vol", "name": "v1"}}, {"native_glusterfs": True}),
        f"{DATA}.export", True),
    "glusterfs": (lambda h: ({"driver_volume_type": "glusterfs", "data": {
        "export": f"{bracketed(h)}:/vol", "name": "v1"}}, {"mount_base": "/mnt/v"}),
        f"{DATA}.export", False),
    "nfs": (lambda h: ({"driver_volume_type": "nfs", "data": {
        "export": f"{bracketed(h)}:/srv/nfs", "name": "v1"}}, {"mount_base": "/mnt/v"}),
        f"{DATA}.export", False),
    "nfs with device_path": (lambda h: ({"driver_volume_type": "nfs", "data": {
        "export": f"{bracketed(h)}:/srv/nfs", "name": "v1", "device_path": "/mnt/v/x/v1"}}, {}),
        f"{DATA}.export", False),
    "smbfs": (lambda h: ({"driver_volume_type": "smbfs", "data": {
        "export": f"//{bracketed(h)}/share", "name": "v1"}}, {"mount_base": "/mnt/v"}),
        f"{DATA}.export", False),
    "quobyte": (lambda h: ({"driver_volume_type": "quobyte", "data": {
        "export": f"quobyte://192.0.2.9,{bracketed(h)}:7861/vol", "name": "v1"}},
        {"mount_base": "/mnt/v"}), f"{DATA}.export", False),
}


# ---- the oracles ----------------------------------------------------------------------------

_LABEL_CHARS = set(string.ascii_letters + string.digits + "-")


def rfc1123(name: str) -> bool:
    """RFC 1123 host name, written apart from the code: labels of 1-63 letters, digits and
    hyphens, no hyphen at either end, joined by single dots, at most 253 characters; a last
    label of digits only would make it a (bad) dotted-decimal address, not a name. One
    trailing dot makes a name absolute (RFC 1034), which resolvers, libvirt and QEMU accept."""
    if name.endswith(".") and name[:-1] and not name[:-1].replace(".", "").isdigit():
        name = name[:-1]
    labels = name.split(".")
    return (0 < len(name) <= 253 and not labels[-1].isdigit()
            and all(0 < len(lb) <= 63 and set(lb) <= _LABEL_CHARS
                    and lb[0] != "-" and lb[-1] != "-" for lb in labels))


def libvirt_schema_accepts(host: str) -> bool:
    """libvirt's schema (dnsName or ipAddr) on a network disk's <host name>."""
    disk = etree.Element("disk", type="network", device="disk")
    source = etree.SubElement(disk, "source", protocol="nbd", name="e")
    etree.SubElement(source, "host", name=host)
    etree.SubElement(disk, "target", dev="vdb", bus="virtio")
    try:
        validate_disk(etree.tostring(disk, encoding="unicode"))
    except Exception:  # noqa: BLE001 - any refusal is a "no"
        return False
    return True


def ip_literal(host: str) -> bool:
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if text != host and ":" not in text:
        return False  # only IPv6 goes in brackets
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return "%" not in text


def acceptable(host: str) -> bool:
    """A name or IP literal: accepted whatever form libvirt's schema knows (an IPv6 address is
    rendered in one it knows, checked by :func:`outcome`)."""
    return rfc1123(host) or ip_literal(host)


def same_host(rendered: str | None, host: str) -> bool:
    """``rendered`` names ``host``: the same text, or the same IPv6 address."""
    bare = host[1:-1] if host.startswith("[") else host
    if rendered is None or ":" not in bare:
        return rendered == bare
    return ipaddress.IPv6Address(rendered) == ipaddress.IPv6Address(bare)


# ---- generated hosts ------------------------------------------------------------------------

LABEL = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9-]{0,20}[A-Za-z0-9])?", fullmatch=True)
NAMES = st.lists(LABEL, min_size=1, max_size=5).map(".".join).filter(
    lambda n: not n.split(".")[-1].isdigit())
IPV4 = st.ip_addresses(v=4).map(str)
IPV6 = st.ip_addresses(v=6).map(str)
VALID = st.one_of(NAMES, IPV4, IPV6, IPV6.map(lambda a: f"[{a}]"))

NEAR_MISSES = ["-", "...", ".", "a..b", "-a", "a-", ".a", "a.", "a..", "1.2.3.4.",
               "a.-b", "1.2.3", "256.1.1.1",
               "01.2.3.4", "1.2.3.4.5", "fe80::1%eth0", "[fe80::1%eth0]", "1::2::3", ":::",
               "[1.2.3.4]", "[]", "[::1", "x" * 64, ("a" * 60 + ".") * 4 + "abc", "a_b",
               "caf\u00e9", "a b", " a", "a\n", "", "1.2.3.4 ", "\u0661.2.3.4", "a\x00b"]
# Text from the alphabets host names and addresses are made of, plus a few that are not.
# (No '/', ',' or '\\': those separate the parts of an export, not of a host.)
ANY_TEXT = st.one_of(
    st.text(alphabet="ab09-._", max_size=12),
    st.text(alphabet="0123456789.", max_size=16),
    st.text(alphabet="0123456789abcdef:", max_size=24),
    st.text(alphabet="0123456789abcdef:", max_size=24).map(lambda t: f"[{t}]"),
    st.text(alphabet=st.characters(exclude_characters="/,\\"), max_size=10),
    st.sampled_from(NEAR_MISSES))


def outcome(protocol: str, host: str) -> tuple[str, str | None]:
    """("rendered", <host name> or None) or ("refused", the key the error names)."""
    make, _, _ = PROTOCOLS[protocol]
    info, options = make(host)
    try:
        disk = build_disk(info, **options)
    except InvalidConnectionInfo as exc:
        return "refused", exc.path
    xml = disk.to_xml()
    validate_disk(xml)
    names = [h.name for h in (disk.source.hosts if disk.source else [])]
    return "rendered", (names[-1] if names else None)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@SETTINGS
@given(host=VALID)
def test_every_rfc1123_name_and_ip_literal_is_accepted(protocol: str, host: str) -> None:
    assert acceptable(host), host  # the generator itself agrees with the oracles
    kind, rendered = outcome(protocol, host)
    assert kind == "rendered", (host, rendered)
    if PROTOCOLS[protocol][2]:
        assert same_host(rendered, host), (host, rendered)  # rendered bare


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@SETTINGS
@given(host=ANY_TEXT)
def test_any_other_text_is_refused_naming_the_key(protocol: str, host: str) -> None:
    kind, detail = outcome(protocol, host)
    if acceptable(host):
        assert kind == "rendered", (host, detail)
    else:
        assert (kind, detail) == ("refused", PROTOCOLS[protocol][1]), host


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("host", ["-", "...", "a..b", "-a.example", "1.2.3", "[::1"])
def test_the_reported_hosts_are_refused_by_every_protocol(protocol: str, host: str) -> None:
    make, key, _ = PROTOCOLS[protocol]
    info, options = make(host)
    with pytest.raises(InvalidConnectionInfo) as refused:
        build_disk(info, **options)
    assert refused.value.path == key
    assert str(refused.value).startswith(key + ": ") and "\n" not in str(refused.value)


# RFC 4291's forms with an embedded IPv4 part that libvirt's ipv6Addr pattern does not know, and
# absolute names (#45): each is accepted and rendered as a form libvirt's schema takes.
LAST_INPUTS = [("2001:db8::1:192.0.2.1", "2001:db8::1:c000:201"),
               ("1::2:3:1.2.3.4", "1::2:3:102:304"),
               ("64:ff9b::192.0.2.33", "64:ff9b::192.0.2.33"),
               ("[::ffff:192.0.2.1]", "::ffff:192.0.2.1"), ("0::0:1.2.3.4", "0::0:1.2.3.4"),
               ("1:0:0:0:0:0:1.2.3.4", "1::102:304"),
               ("ceph-mon.example.com.", "ceph-mon.example.com."),
               ("node1.", "node1.")]


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize(("host", "expected"), LAST_INPUTS)
def test_rfc4291_addresses_and_absolute_names_are_accepted(protocol: str, host: str,
                                                           expected: str) -> None:
    kind, rendered = outcome(protocol, host)
    assert kind == "rendered", (host, rendered)
    if PROTOCOLS[protocol][2]:
        assert same_host(rendered, host) and libvirt_schema_accepts(rendered or "")
        assert rendered == expected or ipaddress.IPv6Address(rendered or "").exploded == \
            ipaddress.IPv6Address(expected).exploded


def test_a_host_that_is_not_a_string_is_refused_naming_the_key() -> None:
    for value in (None, 7, ["a"], {"a": 1}, True):
        with pytest.raises(InvalidConnectionInfo, match=r"hosts\[0\]"):
            build_disk({"driver_volume_type": "rbd", "data": {"name": "p/i", "hosts": [value]}})


@pytest.mark.parametrize("protocol", sorted(p for p in PROTOCOLS if not PROTOCOLS[p][2]))
def test_a_host_the_host_side_connects_to_is_checked_before_it_does(protocol: str) -> None:
    """Parsing a request (before any lock or connect) refuses the bad host already."""
    from virtdriver.driver.request import VolumeRequest

    make, key, _ = PROTOCOLS[protocol]
    info, options = make("-")
    info = dict(info, serial="v1")
    render_options = RenderOptions(mount_base="/mnt/v",
                                   native_iscsi=options.get("native_iscsi", False))
    with pytest.raises(InvalidConnectionInfo) as refused:
        VolumeRequest.parse(info, render_options)
    assert refused.value.path == key
