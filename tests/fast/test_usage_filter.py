"""The look at a domain's XML text before parsing it (``volume_users.Wanted``): it may let a domain
through that holds nothing of the volume (then it is parsed for nothing), but never hide one that
does. Checked against the parsed disks themselves, for every way a disk can be a volume or hold
its data: the alias (plain and encoded ids), a swap note (ids that XML escapes), a file or device
under another spelling, a symlink, a hard link, a second device node, escaped characters in a
path, network volumes with their hosts in another order, in the live XML or the definition.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from virtdriver.hypervisor.dataid import DataIdentity
from virtdriver.hypervisor.domains import DomainsView, DomainXml, ListedDomain, source_token
from virtdriver.hypervisor.metadata import NS
from virtdriver.hypervisor.volume_users import Wanted
from virtdriver.policy.identity import alias_for
from virtdriver.policy.sharing import users_of


def disk(kind: str, source: dict[str, str], alias: str | None, target: str,
         hosts: list[tuple[str, str]] = ()) -> etree._Element:
    node = etree.Element("disk", type=kind, device="disk")
    etree.SubElement(node, "driver", name="qemu", type="raw", cache="none")
    src = etree.SubElement(node, "source", **source)
    for name, port in hosts:
        etree.SubElement(src, "host", name=name, port=port)
    etree.SubElement(node, "target", dev=target, bus="scsi")
    if alias:
        etree.SubElement(node, "alias", name=alias)
    return node


def domain(name: str, disks: list[etree._Element],
           notes: dict[str, tuple[str, str]] | None = None, quote: str = "'") -> str:
    """Domain XML as libvirt writes it (single quotes, &apos;) or as libxml2 does (double)."""
    root = etree.Element("domain", type="kvm")
    etree.SubElement(root, "name").text = name
    etree.SubElement(root, "uuid").text = f"00000000-0000-0000-0000-{len(name):012d}"
    if notes:
        meta = etree.SubElement(root, "metadata")
        mine = etree.SubElement(meta, f"{{{NS}}}attachments", nsmap={"virtdriver": NS})
        for alias, (volume, source) in notes.items():
            etree.SubElement(mine, f"{{{NS}}}inherited", alias=alias, volume=volume,
                             source=source)
    devices = etree.SubElement(root, "devices")
    devices.extend(disks)
    text = etree.tostring(root, encoding="unicode")
    if quote == "'":  # libvirt's own style: attributes in single quotes, ' escaped
        text = text.replace("'", "&apos;").replace('"', "'")
    return text


def read(current: str, config: str | None = None) -> DomainXml:
    return DomainXml(ListedDomain(None, "g", "u", True, config is not None), current, config)


def never_hides(xml: DomainXml, volume: str | None, data: DataIdentity | None) -> bool:
    """True when the filter lets ``xml`` through, or the domain has no such disk."""
    wanted = Wanted(volume, data)
    holds = users_of(volume or "\0", data, xml.parsed.uses())
    return wanted.uses(xml.parsed.uses()) == holds and (xml.may_use(wanted) or not holds)


def test_aliases_notes_and_escaped_ids(tmp_path: Path) -> None:
    image = tmp_path / "a.raw"
    image.write_bytes(b"\0")
    for vid in ("4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e", "vol.1", "a_b", "x&y", "it's",
                'q"uote', "ünï", "<tag>"):
        for quote in ("'", '"'):
            plain = read(domain("g", [disk("file", {"file": str(image)}, alias_for(vid),
                                           "sda")], quote=quote))
            assert never_hides(plain, vid, None) and plain.may_use(Wanted(vid, None)), vid
            # a swapped device: another volume's alias, this volume by the note
            old = alias_for("old-volume")
            src = disk("file", {"file": str(image)}, old, "sdb")
            from virtdriver.config import Disk

            token = source_token(Disk.from_element(src, strict=False))
            noted = read(domain("g", [src], {old: (vid, token)}, quote=quote))
            assert [u.volume for u in noted.parsed.uses()] == [vid]
            assert never_hides(noted, vid, None) and noted.may_use(Wanted(vid, None)), vid
            # a domain with other volumes only is not parsed
            other = read(domain("g", [disk("file", {"file": str(image)}, alias_for("zz"),
                                           "sda")], quote=quote))
            assert not other.may_use(Wanted("4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e", None))


def test_a_second_attachments_numbered_alias_and_ids_that_share_a_start(tmp_path: Path) -> None:
    """The look finds an id among a document's aliases (not by scanning the text per ask): a
    second attachment's alias (``_x2``) is the volume's, an id that another id begins with or
    ends with is not mistaken for it either way."""
    image = tmp_path / "a.raw"
    image.write_bytes(b"\0")
    for vid, neighbour in (("vol", "vol-2"), ("vol-2", "vol"), ("a_b", "a_b_c"), ("x", "ax")):
        first = alias_for(vid)
        second = alias_for(vid, {first})
        assert second.endswith("_x2")
        for quote in ("'", '"'):
            both = read(domain("g", [disk("file", {"file": str(image)}, first, "sda"),
                                     disk("file", {"file": str(image)}, second, "sdb")],
                               quote=quote))
            only_second = read(domain("g", [disk("file", {"file": str(image)}, second, "sdb")],
                                      quote=quote))
            live_only = read(domain("g", [disk("file", {"file": str(image)}, second, "sdb")],
                                    quote=quote), domain("g", [], quote=quote))
            for xml in (both, only_second, live_only):
                assert xml.may_use(Wanted(vid, None)) and never_hides(xml, vid, None)
            assert never_hides(only_second, neighbour, None)
            other = read(domain("g", [disk("file", {"file": str(image)}, alias_for(neighbour),
                                           "sda")], quote=quote))
            assert not other.may_use(Wanted(vid, None)), (vid, neighbour)


def test_files_and_devices_under_any_spelling(tmp_path: Path) -> None:
    image = tmp_path / "it's & <odd>.raw"
    image.write_bytes(b"\0")
    link = tmp_path / "link"
    link.symlink_to(image)
    hard = tmp_path / "hard"
    os.link(image, hard)
    node, twin = tmp_path / "node", tmp_path / "twin"
    for n in (node, twin):
        os.mknod(n, 0o600 | stat.S_IFBLK, os.makedev(7, 211))
    missing = f"{tmp_path}/gone//x.raw"
    cases = [(str(image), [str(image), f"{tmp_path}//{image.name}", str(link), str(hard)],
              "file"),
             (str(node), [str(twin), str(node)], "block"),
             (missing, [f"{tmp_path}/./gone/x.raw"], "file")]
    from virtdriver.hypervisor.dataid import path_identity

    for path, spellings, kind in cases:
        data = path_identity(path)
        attr = "file" if kind == "file" else "dev"
        for spelling in spellings:
            for quote in ("'", '"'):
                for where in ("live", "definition"):
                    d = disk(kind, {attr: spelling}, None, "sdc")
                    text = domain("g", [d], quote=quote)
                    empty = domain("g", [], quote=quote)
                    xml = read(text, empty) if where == "live" else read(empty, text)
                    assert xml.may_use(Wanted(None, data)), (spelling, quote, where)
                    assert never_hides(xml, "some-volume", data)
        elsewhere = read(domain("g", [disk("file", {"file": str(tmp_path / "x")}, None,
                                           "sda")]))
        (tmp_path / "x").write_bytes(b"")
        assert not elsewhere.may_use(Wanted("some-volume", data))


def test_network_volumes() -> None:
    rbd = disk("network", {"protocol": "rbd", "name": "pool/vol-1"}, None, "sda",
               [("Ceph.Example", "6789"), ("b", "6789")])
    xml = read(domain("g", [rbd]))
    data = xml.parsed.disks[0].data
    assert data is not None and xml.may_use(Wanted(None, data)) and never_hides(xml, None, data)
    odd = disk("network", {"protocol": "iscsi", "name": "iqn.x:a&b/1"}, None, "sda",
               [("h", "3260")])
    xml = read(domain("g", [odd]))
    data = xml.parsed.disks[0].data
    assert xml.may_use(Wanted(None, data)) and never_hides(xml, None, data)
    other = read(domain("g", [disk("network", {"protocol": "rbd", "name": "pool/vol-2"}, None,
                                   "sda", [("b", "6789")])]))
    assert not other.may_use(Wanted(None, ("net", "rbd", "pool/vol-1", "b:6789")))


def test_the_view_parses_only_what_can_matter(tmp_path: Path) -> None:
    image = tmp_path / "a.raw"
    image.write_bytes(b"\0")
    mine = read(domain("a", [disk("file", {"file": str(image)}, alias_for("v1"), "sda")]))
    others = [read(domain(f"o{i}", [disk("file", {"file": str(tmp_path / f"o{i}")},
                                         alias_for(f"w{i}"), "sda")])) for i in range(5)]
    view = DomainsView([mine, *others])
    from virtdriver.hypervisor.dataid import path_identity

    uses = view.uses("v1", path_identity(str(image)))
    assert [u.volume for u in uses] == ["v1"]
    assert "parsed" in mine.__dict__ and not any("parsed" in o.__dict__ for o in others)


PATH_CHARS = st.text(st.sampled_from("ab.-_ '&<>\"/ü"), min_size=1, max_size=8)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(PATH_CHARS, min_size=1, max_size=4), pick=st.integers(0, 3),
       vid=st.text(st.sampled_from("ab1-_.&'<ü"), min_size=1, max_size=6),
       quote=st.sampled_from(["'", '"']))
def test_never_hides_a_user(tmp_path_factory, names, pick, vid, quote) -> None:
    """Random file names (escaped characters, spaces, non-ASCII) and ids: whatever the parsed
    disks say uses the volume or its data, the text filter lets through."""
    from virtdriver.hypervisor.dataid import path_identity

    base = tmp_path_factory.mktemp("f")
    paths = []
    for i, name in enumerate(names):
        path = base / f"{i}{name.replace('/', '_')}"
        path.write_bytes(b"")
        paths.append(str(path))
    aliases = [alias_for(vid), alias_for(vid, {alias_for(vid)}), None, None]  # (_x2)
    disks = [disk("file", {"file": p}, aliases[i], f"sd{'abcd'[i]}")
             for i, p in enumerate(paths)]
    xml = read(domain("g", disks, quote=quote))
    data = path_identity(paths[pick % len(paths)])
    assert xml.may_use(Wanted(None, data)) and never_hides(xml, None, data)
    assert xml.may_use(Wanted(vid, None)) and never_hides(xml, vid, None)
